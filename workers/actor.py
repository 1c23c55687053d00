"""Actor processes: play `envs_per_worker` envs as one batched env and write rollouts.

Each actor owns a CPU copy of the policy and runs one batched forward pass per
env step over all its envs, with one torch thread. The policy is a class chosen
by `ActorConfig.policy`: `ModelPolicy` (the network, refreshed from the learner's
published weights) or `RandomPolicy` (uniform actions and no inference, for the
benchmarks). Before each rollout the actor receives one slot per env from the
learner and refreshes its weights if a newer version was published; it writes
T+1 rows into each slot (row 0 repeats the previous rollout's last row, see
`workers/slots.py`) and sends back a `RolloutDone` (workers/messages.py): the
slot indices, the (return, length) of the episodes that ended, and the seconds
{"env", "inference", "wait"} spent since the previous message stepping envs, in
forward passes and waiting for slots. With `store_features` the same forward
pass also gives the policy's last hidden layer, written as the float16 field
"features" (for replays whose `features` are "hidden"; zeros under
`RandomPolicy`). An exception is sent as an `ActorError` (the traceback) and
ends the actor.

An actor shares no lock with anyone (pipes of its own, a seqlock for weights, a
shared-memory stop flag), so killing one cannot block the others; it dies with
its parent (PR_SET_PDEATHSIG) and ignores SIGINT: the main process decides.
"""

from __future__ import annotations

import ctypes
import dataclasses
import signal
import time
import traceback

import numpy as np
import torch

from agents.distributions import DISTRIBUTIONS
from agents.model_spec import ModelSpec
from agents.networks import mask_state, pack_state, step_model
from workers.messages import ActorError, RolloutDone
from wrappers.envs import EnvOptions, make_batched_env
from wrappers.reward_scaling import RewardScaler

FP16_MAX = 65504.0  # stored features are clamped to float16's range, never inf


class ModelPolicy:
    """The network: batched action selection by sampling from its policy.

    Holds a CPU model built from the config, loaded from `weights` (SharedWeights) on
    `refresh()`; `version` is the weights' version held (-1 before the first pull).
    Sampling draws from `rng` (torch.Generator), the actor's own stream.
    """

    def __init__(self, cfg: ActorConfig, weights, rng: torch.Generator):
        self.cfg = cfg
        self.weights = weights
        self.rng = rng
        self.model = cfg.model.build().eval()
        self.state = self.model.initial_state(cfg.envs_per_worker)
        self.version = -1

    def refresh(self) -> None:
        """Pull the published weights if they are newer than `version`."""
        self.version = self.weights.pull(self.model, self.version)

    @torch.inference_mode()
    def act(self, obs: torch.Tensor, starts: torch.Tensor) -> dict[str, torch.Tensor]:
        """obs [E, *obs_shape], starts bool [E] (obs begins a new episode) -> the
        policy's fields of the row (workers/slots.py): action (sampled) int64 [E] or
        float32 [E, A], logits float32 [E, P], value float32 [E]; with `store_features` features
        float16 [E, H] (the hidden layer of the same forward pass, clamped to
        float16's range); for a model with state, core_state float32 [E, *state]
        (the state that read obs: zeroed where `starts`). Steps each env's state."""
        state = mask_state(self.state, starts)
        logits, value, hidden, self.state = step_model(self.model, obs, state, starts)
        if self.cfg.random_until_trained and self.version <= 0:
            model = self.model  # uniform within the bounds
            noise = torch.rand(model.action_scale.shape[0] * obs.shape[0], generator=self.rng)
            action = model.action_bias + model.action_scale * (2 * noise.view(obs.shape[0], -1) - 1)
        else:
            action = self.model.distribution(logits).sample(self.rng)
        row = {"action": action, "logits": logits, "value": value}
        if self.cfg.store_features:
            row["features"] = hidden.clamp(-FP16_MAX, FP16_MAX).half()
        if state:
            row["core_state"] = pack_state(state)
        return row

    @torch.inference_mode()
    def value(self, obs: torch.Tensor, envs: np.ndarray) -> torch.Tensor:
        """The value float32 [N] of final observations obs [N, *obs_shape] of envs
        `envs` [N] (their truncated episodes' last), read from those envs' state."""
        state = tuple(s[envs] for s in self.state)
        return step_model(self.model, obs, state, torch.zeros(len(envs), dtype=torch.bool))[1]


class RandomPolicy:
    """Uniform random actions without inference (the pipeline benchmark).

    Same interface as `ModelPolicy`; it never reads `weights`, so `version` stays -1.
    Actions are drawn from `rng` (torch.Generator); logits and values are zeros.
    """

    def __init__(self, cfg: ActorConfig, weights, rng: torch.Generator):
        self.cfg = cfg
        self.rng = rng
        self.version = -1

    def refresh(self) -> None:
        """Nothing to pull."""

    @torch.inference_mode()
    def act(self, obs: torch.Tensor, starts: torch.Tensor) -> dict[str, torch.Tensor]:
        """`ModelPolicy.act`'s fields: actions from the distribution of all-zero
        params (uniform over A discrete actions; N(0, 1) per dimension of a Box) and
        zeros for the rest."""
        n, spec = obs.shape[0], self.cfg.model
        logits = torch.zeros(n, spec.param_size)
        row = {"action": DISTRIBUTIONS[spec.action_kind](logits).sample(self.rng),
               "logits": logits, "value": torch.zeros(n)}
        if self.cfg.store_features:
            row["features"] = torch.zeros(n, spec.feature_size, dtype=torch.float16)
        if spec.state_shape:
            row["core_state"] = torch.zeros(n, *spec.state_shape)
        return row

    @torch.inference_mode()
    def value(self, obs: torch.Tensor, envs: np.ndarray) -> torch.Tensor:
        """obs [N, *obs_shape] -> zeros float32 [N]."""
        return torch.zeros(obs.shape[0])


@dataclasses.dataclass(frozen=True)
class ActorConfig:
    env_id: str
    env_options: EnvOptions
    envs_per_worker: int
    unroll_length: int
    model: ModelSpec
    seed: int
    # the policy class, built in the actor as policy(cfg, weights, rng): ModelPolicy,
    # or RandomPolicy for the benchmarks; a module-level class, pickled by reference
    policy: type = ModelPolicy
    # write each row's policy hidden layer as "features" (float16 [E, H]); the slots'
    # spec must then have rollout_spec(..., feature_size=model.feature_size)
    store_features: bool = False
    # --scale_rewards: the stored rewards are divided by a running std of the
    # discounted return with this gamma (wrappers/reward_scaling.py); None: raw rewards
    reward_scale_gamma: float | None = None
    # the policy whose weights it acts with; its rollouts carry it to that policy's learner
    policy_id: int = 0
    # write "final_obs" (workers/slots.py): off-policy agents bootstrap from it
    store_final_obs: bool = False
    # act uniformly at random within a Box's bounds while the weights are the first
    # ones (version 0: no update yet), as off-policy agents do before --learning_starts
    random_until_trained: bool = False


def write_row(buffers, t: int, slots: torch.Tensor, row: dict[str, torch.Tensor]) -> None:
    """Row t of every field, for the envs' slots. Large per-env rows (frames) are
    copied slot by slot: index_copy_ of uint8 frames is ~9x slower (measured with
    py-spy and a micro-benchmark: 189 us against 21 us for 4 Pong stacks)."""
    slot_list = None
    for name, value in row.items():
        if value[0].numel() >= 1024:
            slot_list = slot_list or slots.tolist()
            target = buffers[name][t]
            for j, s in enumerate(slot_list):
                target[s].copy_(value[j])
        else:
            buffers[name][t].index_copy_(0, slots, value)


def die_with_parent() -> None:
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def run_actor(actor_id: int, cfg: ActorConfig, buffers, weights, grants, messages, stop) -> None:
    """Process entry point.

    Args:
        buffers: the SlotPool's shared buffers (`[T+1, num_slots, ...]`).
        weights: SharedWeights.
        grants: read end of a pipe of slot-index lists from the learner.
        messages: write end of a pipe to the learner.
        stop: shared uint8 [1]; nonzero asks the actor to finish.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    die_with_parent()
    torch.set_num_threads(1)
    try:
        _actor_loop(actor_id, cfg, buffers, weights, grants, messages, stop)
    except (BrokenPipeError, EOFError):
        pass  # the learner has gone away
    except Exception:  # noqa: BLE001 - every failure is reported to the learner
        try:
            messages.send(ActorError(traceback.format_exc()))
        except (BrokenPipeError, OSError):
            pass


def _take_slots(grants, held: list[int], n: int, stop) -> list[int] | None:
    while len(held) < n:
        if stop[0]:
            return None
        if grants.poll(0.05):
            held.extend(grants.recv())
    taken, held[:] = held[:n], held[n:]
    return taken


class Roller:
    """An actor's batched env and policy, one rollout at a time: what an actor process
    (here) and a Ray actor (workers/ray_actor.py) both run.

    `rollout(write)` refreshes the weights and calls `write(t, row)` for t = 0..T, each
    `row` a dict field -> tensor [E, ...] in the format of workers/slots.py (row 0 is
    the previous rollout's row T); it returns the (return, length) of the episodes
    that ended, in raw rewards (the rows hold scaled ones under `reward_scale_gamma`).
    `seconds` sums the time stepping envs ("env") and in forward passes
    ("inference") since the caller last reset it.
    """

    def __init__(self, cfg: ActorConfig, weights):
        self.cfg = cfg
        rng = torch.Generator().manual_seed(cfg.seed)
        self.env = make_batched_env(cfg.env_id, cfg.envs_per_worker, cfg.env_options,
                                    seed=cfg.seed)
        self.policy = cfg.policy(cfg, weights, rng)
        self.policy.refresh()
        self.seconds = {"env": 0.0, "inference": 0.0, "wait": 0.0}
        n = cfg.envs_per_worker
        self.scaler = None if cfg.reward_scale_gamma is None else \
            RewardScaler(n, cfg.reward_scale_gamma)
        self.zeros_f = torch.zeros(n)
        zeros_b = torch.zeros(n, dtype=torch.bool)
        obs = torch.from_numpy(self.env.reset())
        self.row = {
            "obs": obs, **self.policy.act(obs, torch.ones(n, dtype=torch.bool)),
            "reward": self.zeros_f, "done": zeros_b, "truncated": zeros_b,
            "bootstrap_value": self.zeros_f, "version": torch.full((n,), self.policy.version),
            **({"final_obs": obs} if cfg.store_final_obs else {}),
        }

    def rollout(self, write) -> list[tuple[float, int]]:
        clock = time.perf_counter
        policy, n = self.policy, self.cfg.envs_per_worker
        write(0, self.row)
        policy.refresh()
        episodes = []
        for t in range(1, self.cfg.unroll_length + 1):
            t0 = clock()
            step = self.env.step(self.row["action"].numpy())
            t1 = clock()
            obs = torch.from_numpy(step.obs)
            bootstrap = self.zeros_f
            if self.cfg.store_final_obs:
                self.row_final = obs if step.final_obs is None else \
                    torch.from_numpy(step.final_obs)
            if step.final_obs is not None:  # before `act` steps the state past it
                bootstrap = torch.zeros(n)
                idx = np.flatnonzero(step.truncated)
                bootstrap[idx] = policy.value(torch.from_numpy(step.final_obs[idx]), idx)
            done = torch.from_numpy(step.terminated)
            truncated = torch.from_numpy(step.truncated)
            reward = step.reward if self.scaler is None else \
                self.scaler(step.reward, step.terminated, step.truncated)
            acted = policy.act(obs, done | truncated)
            self.seconds["env"] += t1 - t0
            self.seconds["inference"] += clock() - t1
            self.row = {
                "obs": obs, **acted,
                "reward": torch.from_numpy(reward),
                "done": done,
                "truncated": truncated,
                "bootstrap_value": bootstrap,
                "version": torch.full((n,), policy.version),
                **({"final_obs": self.row_final} if self.cfg.store_final_obs else {}),
            }
            write(t, self.row)
            episodes.extend((ret, length) for _, ret, length in step.episodes)
        return episodes

    def take_seconds(self) -> dict[str, float]:
        out, self.seconds = self.seconds, dict.fromkeys(self.seconds, 0.0)
        return out

    def close(self) -> None:
        self.env.close()


def _actor_loop(actor_id: int, cfg: ActorConfig, buffers, weights, grants, messages, stop):
    roller = Roller(cfg, weights)
    held: list[int] = []
    try:
        while not stop[0]:
            t0 = time.perf_counter()
            taken = _take_slots(grants, held, cfg.envs_per_worker, stop)
            roller.seconds["wait"] += time.perf_counter() - t0
            if taken is None:
                break
            slots = torch.tensor(taken, dtype=torch.int64)
            episodes = roller.rollout(
                lambda t, row, slots=slots: write_row(buffers, t, slots, row))
            messages.send(RolloutDone(tuple(taken), episodes, roller.take_seconds(),
                                      cfg.policy_id))
    finally:
        roller.close()
