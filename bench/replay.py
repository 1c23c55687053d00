"""Replay cost on Pong batches, in one run, as JSON.

    python -m bench.replay [--rollouts=400] [--updates=30] [--batch_size=32]

Fills a `standard` and a `custom` (elite, lambda 6, strategy 3, ln_norm) replay with
the same real Pong rollouts (random policy, 8 envs, T=20), then measures batches
drawn uniformly against batches whose `--elite_share` (0.5, as in queue 0.5 +
elite 0.5) is drawn by elite sampling and the rest uniformly:
    updates_per_s_uniform / _elite   learner updates (sample + the training step of the
                                     Pong defaults, `training.factory.make_agent`) per second
    elite_over_uniform               their ratio (goal >= 0.85)
    bytes_per_step                   allocated replay bytes per stored env step
    batch_prep_ms_uniform / _elite   time to prepare one batch
    updates_per_s_elite_cached       elite with --caching (batches prepared in a thread)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from agents.networks import policy_features, step_model  # noqa: E402
from option_flags import default_values  # noqa: E402
from replay.config import parse_replay_parameters  # noqa: E402
from replay.mixer import BatchMixer, Prefetcher, build_replays  # noqa: E402
from training.config import make_config  # noqa: E402
from training.factory import make_agent  # noqa: E402
from workers.slots import SlotPool, rollout_spec  # noqa: E402
from wrappers.envs import EnvOptions, env_info, make_batched_env  # noqa: E402

T, ENVS = 20, 8


def fill(replays, pool, model, rollouts: int) -> None:
    """Play Pong with a random policy and add every env's rollouts, in order."""
    env = make_batched_env("PongNoFrameskip-v4", ENVS, EnvOptions(), seed=0)
    rng = np.random.default_rng(0)
    obs = torch.from_numpy(env.reset())
    slots = torch.tensor(pool.take(ENVS))
    for _ in range(rollouts // ENVS):
        for t in range(T + 1):
            if t > 0:
                step = env.step(rng.integers(0, env.num_actions, size=ENVS))
                obs = torch.from_numpy(step.obs)
            with torch.no_grad():
                logits, value, _, _ = step_model(model, obs)
            pool.buffers["obs"][t].index_copy_(0, slots, obs)
            pool.buffers["logits"][t].index_copy_(0, slots, logits)
            pool.buffers["value"][t].index_copy_(0, slots, value)
        for i in slots.tolist():
            for r in replays:
                r.add(i)
    env.close()


def updates_per_s(mixer, agent, updates: int, cached: bool) -> tuple[float, float]:
    """(updates per second, mean batch preparation ms)."""
    prefetcher = Prefetcher(mixer, 2) if cached else None
    prep = []
    t0 = time.perf_counter()
    for _ in range(updates):
        t = time.perf_counter()
        batch = prefetcher.get(timeout=60) if cached else mixer.sample()
        prep.append(time.perf_counter() - t)
        agent.update(batch, 0.0)
    rate = updates / (time.perf_counter() - t0)
    if prefetcher is not None:
        prefetcher.close()
    return rate, 1000 * statistics.mean(prep)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rollouts", type=int, default=400)
    ap.add_argument("--updates", type=int, default=30)
    ap.add_argument("--batch_size", type=int, default=32)
    ap.add_argument("--elite_share", type=float, default=0.5,
                    help="share of the batch sampled by elite; the rest uniformly, as the "
                         "queue's share would be")
    args = ap.parse_args()
    torch.manual_seed(0)
    spec = rollout_spec(T, (4, 84, 84), "uint8", 6)
    pool = SlotPool(spec, num_slots=ENVS)
    cfg, errors = make_config(default_values(env="PongNoFrameskip-v4",
                                             batch_size=args.batch_size))
    assert not errors, errors
    agent = make_agent(cfg, env_info(cfg.env, cfg.env_options()))
    model = agent.model

    def features(obs, state=None):
        return policy_features(model, obs, state, obs_shape=(4, 84, 84))

    cap = args.rollouts
    text = (f'[{{"type": "standard", "capacity": {cap}, "sample_ratio": 0.5}}, '
            f'{{"type": "custom", "capacity": {cap}, "sample_ratio": 0.5, '
            '"sample_strategy": "elite_sampling", "lambda_batch_multiplier": 6, '
            '"elite_sampling_strategy": "strategy3", "dist_function": "ln_norm"}]')
    entries, errors = parse_replay_parameters(text, args.batch_size)
    assert not errors, errors
    uniform, elite = build_replays(entries, pool, spec, T, 4, 2 * ENVS, 0.0, features, 1e9)
    fill([uniform, elite], pool, model, cap)
    result = {"rollouts_stored": len(elite), "batch_size": args.batch_size,
              "bytes_per_step": round(elite.storage.bytes_per_step(), 1),
              "torch_threads": torch.get_num_threads()}
    share = args.elite_share
    setups = {"uniform": ([uniform], [1.0]),
              "elite": ([uniform, elite], [1.0 - share, share]) if share < 1 else ([elite], [1.0])}
    result["elite_share"] = share
    for name, (replays, ratios) in setups.items():
        mixer = BatchMixer(pool, replays, ratios, args.batch_size)
        updates_per_s(mixer, agent, 3, cached=False)  # warm-up
        rate, prep = updates_per_s(mixer, agent, args.updates, cached=False)
        result[f"updates_per_s_{name}"] = round(rate, 3)
        result[f"batch_prep_ms_{name}"] = round(prep, 1)
        if name == "elite":
            rate, wait = updates_per_s(mixer, agent, args.updates, cached=True)
            result["updates_per_s_elite_cached"] = round(rate, 3)
            result["batch_wait_ms_elite_cached"] = round(wait, 1)
    result["elite_over_uniform"] = round(result["updates_per_s_elite"]
                                         / result["updates_per_s_uniform"], 3)
    result["elite_cached_over_uniform"] = round(result["updates_per_s_elite_cached"]
                                                / result["updates_per_s_uniform"], 3)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
