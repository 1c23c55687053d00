"""The learner's step alone under each compute variant, as JSON: seconds per
`Agent.update` of the default agent (or --agent) on a synthetic batch of --env's
shapes (`bench.throughput.synthetic_batch`), with --threads torch threads, on
--device (cpu; cuda:0 on a GPU machine, timed after a synchronize).

    python -m bench.learner_step [--env=PongNoFrameskip-v4] [--agent=ppo] [--repeats=5]
                                 [--updates=3] [--variants=fp32,bf16,compile,compile_bf16]
                                 [--device=cpu] [--r_f_steps=T] [--batch_size=B]
                                 [--ppo_minibatches=M]

--r_f_steps, --batch_size and --ppo_minibatches replace the defaults' batch (T x B env
steps) and its minibatch count, as the flags of main.py do.

Variants: fp32; bf16 (--precision=bf16: autocast); compile (the model's torso,
`_features` and `_value_features`, through `torch.compile`: inductor, the default
mode; a compiled whole forward fails in backward where impala updates the
return statistics between its forward and backward passes) and compile_bf16 (both). Each
variant has an agent of its own, built from the same seed; every repeat times
`--updates` updates of each variant in turn (interleaved, so a busy machine slows
them alike) and the medians are reported, with each variant's ratio to fp32
(`speedup`, > 1: faster) and, for the compiled ones, `compile_s`: the first two
updates' time beyond two steady ones (what compiling costs a run once).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench.throughput import synthetic_batch  # noqa: E402
from option_flags import default_values  # noqa: E402
from training.allocator import keep_freed_memory  # noqa: E402
from training.config import make_config  # noqa: E402
from training.factory import make_agent  # noqa: E402
from wrappers.envs import env_info  # noqa: E402

VARIANTS = ("fp32", "bf16", "compile", "compile_bf16")
BATCH_FLAGS = ("r_f_steps", "batch_size", "ppo_minibatches")  # main.py's, replacing the defaults'


def variant_agent(values: dict, info, variant: str):
    """(the agent of `variant` (see the module docstring), its synthetic batch, the
    seconds of its first two updates: warm-up, and compilation for the compiled ones)."""
    cfg, errors = make_config({**values, "precision": "bf16" if "bf16" in variant else "fp32"})
    assert not errors, errors
    torch.manual_seed(cfg.seed)
    agent = make_agent(cfg, info)
    if variant.startswith("compile"):  # the torso, where the FLOPs are
        model = agent.model
        model._features = torch.compile(model._features)
        model._value_features = torch.compile(model._value_features)
    batch = synthetic_batch(cfg, info, agent.device)
    t0 = time.perf_counter()
    for _ in range(2):
        agent.update(batch, 0.0)
    synchronize(agent.device)
    return agent, batch, time.perf_counter() - t0


def synchronize(device: torch.device) -> None:
    """Wait for `device`'s queued kernels (a no-op on the CPU), so that timings are whole."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def main() -> None:
    keep_freed_memory()  # as each learner's process does (training/factory.py)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--env", default="PongNoFrameskip-v4")
    ap.add_argument("--agent", default=None, help="default: the env family's")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--updates", type=int, default=3, help="updates per variant per repeat")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--device", default="cpu", help="the learner's device, e.g. cuda:0")
    for flag in BATCH_FLAGS:
        ap.add_argument(f"--{flag}", type=int, default=None, help="default: the defaults'")
    args = ap.parse_args()
    variants = args.variants.split(",")
    if unknown := sorted(set(variants) - set(VARIANTS)):
        ap.error(f"--variants: unknown {unknown}; choose from {', '.join(VARIANTS)}")
    torch.set_num_threads(args.threads)
    values = {**default_values(), "env": args.env, "agent": args.agent, "device": args.device,
              **{k: getattr(args, k) for k in BATCH_FLAGS if getattr(args, k) is not None}}
    cfg, errors = make_config(values)
    assert not errors, errors
    info = env_info(cfg.env, cfg.env_options())
    built = {v: variant_agent(values, info, v) for v in variants}
    times: dict[str, list[float]] = {v: [] for v in variants}
    for _ in range(args.repeats):
        for v in variants:
            agent, batch, _ = built[v]
            t0 = time.perf_counter()
            for _ in range(args.updates):
                agent.update(batch, 0.0)
            synchronize(agent.device)
            times[v].append((time.perf_counter() - t0) / args.updates)
    median = {v: statistics.median(t) for v, t in times.items()}
    out = {"env": cfg.env, "agent": cfg.agent, "batch": [cfg.r_f_steps, cfg.batch_size],
           "threads": args.threads, "device": args.device, "torch": torch.__version__,
           "cpu": torch.backends.cpu.get_cpu_capability(),
           "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
           "update_s": {v: round(m, 4) for v, m in median.items()},
           "update_s_all": {v: [round(x, 4) for x in t] for v, t in times.items()}}
    if "fp32" in median:
        out["speedup"] = {v: round(median["fp32"] / m, 3) for v, m in median.items()}
    out["compile_s"] = {v: round(built[v][2] - 2 * median[v], 2)
                        for v in variants if v.startswith("compile")}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
