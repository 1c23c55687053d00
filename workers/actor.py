"""Actor processes: play `envs_per_worker` envs as one batched env and write rollouts.

Each actor owns a CPU copy of the policy and runs one batched forward pass per
env step over all its envs, with one torch thread. Before each rollout it takes
one free slot per env and refreshes its weights if a newer version was
published; it writes T+1 rows into each slot (row 0 repeats the previous
rollout's last row, see `workers/slots.py`) and puts the slot indices on the
full queue. Finished games go to the event queue as
("episodes", actor_id, [(return, length), ...]). An exception is reported as
("error", actor_id, traceback) and ends the actor.
"""

from __future__ import annotations

import dataclasses
import os
import queue
import signal
import traceback

import numpy as np
import torch

from agents.networks import build_model
from wrappers.envs import EnvOptions, make_batched_env


@dataclasses.dataclass(frozen=True)
class ActorConfig:
    env_id: str
    env_options: EnvOptions
    envs_per_worker: int
    unroll_length: int
    obs_shape: tuple[int, ...]
    num_actions: int
    hidden_size: int
    seed: int
    random_policy: bool = False  # benchmark mode: uniform actions, no inference


class _Policy:
    """Batched action selection for the actor: the model, or uniform random."""

    def __init__(self, cfg: ActorConfig, weights, rng: torch.Generator):
        self.cfg = cfg
        self.weights = weights
        self.rng = rng
        self.model = build_model(cfg.obs_shape, cfg.num_actions, cfg.hidden_size)
        self.model.eval()
        self.version = -1

    def refresh(self) -> None:
        if not self.cfg.random_policy:
            self.version = self.weights.pull(self.model, self.version)

    @torch.inference_mode()
    def act(self, obs: torch.Tensor):
        """obs [E, ...] -> action int64 [E], logits float32 [E, A], value float32 [E]."""
        n = obs.shape[0]
        if self.cfg.random_policy:
            logits = torch.zeros(n, self.cfg.num_actions)
            value = torch.zeros(n)
        else:
            logits, value = self.model(obs)
        probs = torch.softmax(logits, dim=-1)
        action = torch.multinomial(probs, 1, generator=self.rng).squeeze(-1)
        return action, logits, value

    @torch.inference_mode()
    def value(self, obs: torch.Tensor) -> torch.Tensor:
        if self.cfg.random_policy:
            return torch.zeros(obs.shape[0])
        return self.model(obs)[1]


def _write_row(buffers, t: int, slots: torch.Tensor, row: dict[str, torch.Tensor]) -> None:
    for name, value in row.items():
        buffers[name][t].index_copy_(0, slots, value)


def run_actor(actor_id: int, cfg: ActorConfig, pool, weights, events, stop) -> None:
    """Process entry point. Ignores SIGINT: the main process decides when to stop."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    torch.set_num_threads(1)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    try:
        _actor_loop(actor_id, cfg, pool, weights, events, stop)
    except Exception:  # noqa: BLE001 - every failure is reported to the learner
        events.put(("error", actor_id, traceback.format_exc()))


def _take_slots(pool, n: int, stop) -> list[int] | None:
    slots: list[int] = []
    while len(slots) < n:
        if stop.is_set():
            for i in slots:  # hand back what we took
                pool.free.put(i)
            return None
        try:
            slots.append(pool.free.get(timeout=0.1))
        except queue.Empty:
            continue
    return slots


def _actor_loop(actor_id: int, cfg: ActorConfig, pool, weights, events, stop) -> None:
    seed = cfg.seed + 10_007 * actor_id
    rng = torch.Generator().manual_seed(seed)
    env = make_batched_env(cfg.env_id, cfg.envs_per_worker, cfg.env_options, seed=seed)
    policy = _Policy(cfg, weights, rng)
    policy.refresh()
    buffers = pool.buffers
    n = cfg.envs_per_worker

    obs = torch.from_numpy(env.reset())
    action, logits, value = policy.act(obs)
    zeros_f = torch.zeros(n)
    zeros_b = torch.zeros(n, dtype=torch.bool)
    row = {
        "obs": obs, "action": action, "logits": logits, "value": value,
        "reward": zeros_f, "done": zeros_b, "truncated": zeros_b,
        "bootstrap_value": zeros_f, "version": torch.full((n,), policy.version),
    }
    try:
        while not stop.is_set():
            taken = _take_slots(pool, n, stop)
            if taken is None:
                break
            slots = torch.tensor(taken, dtype=torch.int64)
            _write_row(buffers, 0, slots, row)
            policy.refresh()
            episodes = []
            for t in range(1, cfg.unroll_length + 1):
                step = env.step(row["action"].numpy())
                obs = torch.from_numpy(step.obs)
                action, logits, value = policy.act(obs)
                truncated = torch.from_numpy(step.truncated)
                bootstrap = zeros_f
                if step.final_obs is not None:
                    bootstrap = torch.zeros(n)
                    idx = np.flatnonzero(step.truncated)
                    bootstrap[idx] = policy.value(torch.from_numpy(step.final_obs[idx]))
                row = {
                    "obs": obs, "action": action, "logits": logits, "value": value,
                    "reward": torch.from_numpy(step.reward),
                    "done": torch.from_numpy(step.terminated), "truncated": truncated,
                    "bootstrap_value": bootstrap,
                    "version": torch.full((n,), policy.version),
                }
                _write_row(buffers, t, slots, row)
                episodes.extend((ret, length) for _, ret, length in step.episodes)
            pool.full.put(tuple(taken))
            if episodes:
                events.put(("episodes", actor_id, episodes))
    finally:
        env.close()
