"""What each `--replays` preset costs the learner, with and without `--caching`, in
one run, as JSON.

    python -m bench.replay [--env=PongNoFrameskip-v4] [--presets=elite3,attentive]
                           [--rollouts=400] [--updates=30] [--batch_size=N]
                           [--repeats=3]

Fills a `standard` replay and each preset's storage replay (capacity `--rollouts`)
with the same real rollouts of `--env` (random policy, 8 envs, T=20), then times
learner updates (sample + the training step of the env's defaults,
`training.factory.make_agent`):
    uniform          the whole batch drawn uniformly from the standard replay, a
                     stand-in for the queue-only run (whose batch is a gather of slots)
    <preset>         half the batch from the standard replay (the queue's half), half
                     from the preset's replay, as `--replays=<preset>` mixes them
Each preset's update also stores the queue's share of fresh rollouts in its replay,
as a run at replay ratio 2 does (elite insertion ranks residents there), in the
learner's thread whether or not batches are cached.
For each: updates_per_s (batches prepared inline), updates_per_s_cached (prepared
ahead in a thread, `--caching`), batch_prep_ms, and over_uniform /
cached_over_uniform, both against the uncached uniform rate of the same round
(goal: cached >= 0.85). Every figure is the median over `--repeats` rounds.
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
from replay.presets import PRESETS  # noqa: E402
from training.config import make_config  # noqa: E402
from training.factory import make_agent  # noqa: E402
from training.plan import make_plan  # noqa: E402
from workers.slots import SlotPool  # noqa: E402
from wrappers.envs import make_batched_env  # noqa: E402

T, ENVS = 20, 8


def fill(replays, pool, model, env_id: str, options, rollouts: int) -> None:
    """Play `env_id` with a random policy and add every env's rollouts, in order."""
    env = make_batched_env(env_id, ENVS, options, seed=0)
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


def updates_per_s(mixer, agent, updates: int, cached: bool, fresh: int = 0
                  ) -> tuple[float, float]:
    """(updates per second, mean batch preparation (or wait) ms). Each update first
    stores `fresh` rollouts (the filled slots, in turn) in the mixer's last replay."""
    prefetcher = Prefetcher(mixer, 2) if cached else None
    prep = []
    t0 = time.perf_counter()
    for u in range(updates):
        for k in range(fresh):
            mixer.replays[-1].add((u * fresh + k) % ENVS)
        t = time.perf_counter()
        batch = prefetcher.get(timeout=60) if cached else mixer.sample()
        prep.append(time.perf_counter() - t)
        agent.update(batch, 0.0)
    rate = updates / (time.perf_counter() - t0)
    if prefetcher is not None:
        prefetcher.close()
    return rate, 1000 * statistics.mean(prep)


def storage_entry(preset: str, capacity: int) -> str:
    """The preset's storage replay (its second entry) at `capacity`, as JSON."""
    entry = json.loads(PRESETS[preset])[1]
    return json.dumps({**entry, "capacity": capacity, "sample_ratio": 1})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--env", default="PongNoFrameskip-v4")
    ap.add_argument("--presets", default=",".join(p for p in PRESETS if p != "queue"))
    ap.add_argument("--rollouts", type=int, default=400)
    ap.add_argument("--updates", type=int, default=30)
    ap.add_argument("--batch_size", type=int, help="default: the env's auto value")
    ap.add_argument("--repeats", type=int, default=3,
                    help="rounds through every setup; figures are medians over rounds")
    args = ap.parse_args()
    presets = args.presets.split(",")
    if not set(presets) <= set(PRESETS) - {"queue"}:
        ap.error(f"--presets: names among {', '.join(p for p in PRESETS if p != 'queue')}")
    torch.manual_seed(0)
    cfg, errors = make_config(default_values(env=args.env, batch_size=args.batch_size,
                                             r_f_steps=T, worker_count=1,
                                             envs_per_worker=ENVS))
    assert not errors, errors
    plan = make_plan(cfg)
    if plan.info.action_kind != "discrete":
        ap.error("--env: the random rollouts here need discrete actions")
    pool = SlotPool(plan.spec, num_slots=ENVS)
    agent = make_agent(cfg, plan.info)
    model = agent.model

    def features(obs, state=None):
        return policy_features(model, obs, state, obs_shape=plan.info.obs_shape)

    entries = []
    for name in ["standard", *presets]:
        parsed, errors = parse_replay_parameters(f"[{storage_entry(name, args.rollouts)}]", 0)
        assert not errors, errors
        entries += parsed
    replays = build_replays(entries, pool, plan.spec, T, plan.pixel_stack, 2 * ENVS, 0.0,
                            features, 1e9, distribution=model.distribution)
    fill(replays, pool, model, args.env, cfg.env_options(), args.rollouts)
    uniform = replays[0]
    result = {"env": args.env, "rollouts_stored": len(uniform), "batch_size": cfg.batch_size,
              "torch_threads": torch.get_num_threads()}
    setups = {"uniform": ([uniform], [1.0]),
              **{p: ([uniform, r], [0.5, 0.5]) for p, r in zip(presets, replays[1:],
                                                                 strict=True)}}
    mixers = {name: BatchMixer(pool, mix, ratios, cfg.batch_size)
              for name, (mix, ratios) in setups.items()}
    # fresh rollouts stored per update: the queue's share, for a mix with a replay
    fresh = {name: m.shares[0] if len(m.replays) > 1 else 0 for name, m in mixers.items()}
    for name, mixer in mixers.items():
        updates_per_s(mixer, agent, 3, cached=False, fresh=fresh[name])  # warm-up
    # rounds through every setup: a rate is compared with uniform's of the same round,
    # so the drift of a shared machine cancels out of the ratios (their medians)
    rounds = {name: [] for name in setups}
    for _ in range(args.repeats):
        for name, mixer in mixers.items():
            rounds[name].append(
                updates_per_s(mixer, agent, args.updates, cached=False, fresh=fresh[name])
                + updates_per_s(mixer, agent, args.updates, cached=True, fresh=fresh[name]))
    med = statistics.median
    base = rounds["uniform"]
    for name, runs in rounds.items():
        pairs = list(zip(runs, base, strict=True))
        result[name] = {
            "updates_per_s": round(med(r[0] for r in runs), 2),
            "batch_prep_ms": round(med(r[1] for r in runs), 1),
            "updates_per_s_cached": round(med(r[2] for r in runs), 2),
            "batch_wait_ms_cached": round(med(r[3] for r in runs), 1),
            "over_uniform": round(med(r[0] / b[0] for r, b in pairs), 3),
            "cached_over_uniform": round(med(r[2] / b[0] for r, b in pairs), 3)}
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
