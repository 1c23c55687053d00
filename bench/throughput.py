"""Throughput of the pipeline against the raw env, in one run, as JSON.

    python -m bench.throughput [--env=PongNoFrameskip-v4] [--steps=40000] [--repeats=1]

Measured on the same env with the same worker_count x envs_per_worker, each
using the whole machine, all in frames/s (env steps x frameskip):
    env_ceiling_fps  worker_count processes stepping raw AtariVectorEnvs (random actions)
    pipeline_fps     the real actors (random policy) through slots and queues; the
                     learner drains and discards the batches
    train_fps        full training with the default model
and the ratios pipeline_over_ceiling and train_over_ceiling. Start-up (process
spawn, imports) is excluded: rates are taken from the first rollout received.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import numpy as np
import torch.multiprocessing as mp

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from option_flags import default_values, make_config  # noqa: E402
from training.learner import Learner, env_options  # noqa: E402
from training.run_dir import RunDir  # noqa: E402
from wrappers.envs import make_batched_env  # noqa: E402


def _raw_env_worker(env_id, options, n_envs, seconds, seed, out):
    import torch

    torch.set_num_threads(1)
    env = make_batched_env(env_id, n_envs, options, seed)
    env.reset()
    rng = np.random.default_rng(seed)
    for _ in range(50):  # warm-up
        env.step(rng.integers(0, env.num_actions, size=n_envs))
    steps, t0 = 0, time.time()
    while time.time() - t0 < seconds:
        env.step(rng.integers(0, env.num_actions, size=n_envs))
        steps += n_envs
    out.put((steps, time.time() - t0))
    env.close()


def env_ceiling_fps(cfg, seconds: float) -> float:
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [
        ctx.Process(
            target=_raw_env_worker,
            args=(cfg.env, env_options(cfg.to_dict()), cfg.envs_per_worker, seconds, i, out),
        )
        for i in range(cfg.worker_count)
    ]
    for p in procs:
        p.start()
    results = [out.get(timeout=seconds + 120) for _ in procs]
    for p in procs:
        p.join()
    frames_per_step = cfg.skipped_frames if "NoFrameskip" in cfg.env or "ALE/" in cfg.env else 1
    return sum(s / t for s, t in results) * frames_per_step


def learner_fps(cfg, steps: int, train: bool) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        run = RunDir(tmp, cfg.env, cfg.to_dict(), echo=False)
        learner = Learner(cfg, run, random_policy=not train)
        try:
            learner.run(max_env_steps=steps, train=train)
            t_end, steps_end = time.time(), learner.counters.env_steps
        finally:
            learner.close()
            run.close()
        t0, s0 = learner.first_rollout_at
        return (steps_end - s0) * learner.frames_per_step / (t_end - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--env", default="PongNoFrameskip-v4")
    ap.add_argument("--steps", type=int, default=40_000, help="env steps per measurement")
    ap.add_argument("--seconds", type=float, default=15.0, help="raw env measurement time")
    ap.add_argument("--worker_count", type=int, default=None)
    ap.add_argument("--envs_per_worker", type=int, default=None)
    ap.add_argument("--repeats", type=int, default=1, help="runs; medians are reported")
    args = ap.parse_args()
    values = default_values(
        env=args.env,
        environment_max_steps=10**9,
        worker_count=args.worker_count,
        envs_per_worker=args.envs_per_worker,
        save_model_period=10**9,
        status_interval=1e9,
    )
    cfg, errors = make_config(values)
    if errors:
        sys.exit("\n".join(errors))
    runs = []
    for _ in range(args.repeats):
        ceiling = env_ceiling_fps(cfg, args.seconds)
        pipeline = learner_fps(cfg, args.steps, train=False)
        train = learner_fps(cfg, args.steps, train=True)
        runs.append({"env_ceiling_fps": ceiling, "pipeline_fps": pipeline, "train_fps": train})
    result = {k: round(statistics.median(r[k] for r in runs), 1) for k in runs[0]}
    result.update(
        pipeline_over_ceiling=round(result["pipeline_fps"] / result["env_ceiling_fps"], 3),
        train_over_ceiling=round(result["train_fps"] / result["env_ceiling_fps"], 3),
        env=cfg.env,
        worker_count=cfg.worker_count,
        envs_per_worker=cfg.envs_per_worker,
        batch_size=cfg.batch_size,
        r_f_steps=cfg.r_f_steps,
        repeats=args.repeats,
        runs=[{k: round(v, 1) for k, v in r.items()} for r in runs],
        cpu_count=os.cpu_count(),
    )
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
