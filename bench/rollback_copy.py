"""What a data-parallel rank's rollback costs per update, as JSON: before each update
`GroupDriver._update` keeps the agent's state (model, optimizers' moments, targets)
to go back to should a collective fail part-way. Times, per update of the default
agent (or --agent) of --env on a synthetic batch (`bench.throughput.synthetic_batch`),
on --device (timed after a synchronize on a GPU):

- `update_ms`: `Agent.update`;
- `deepcopy_ms`: `copy.deepcopy(agent.state_dict())`, the rollback's copy before
  `Snapshot` (allocates every tensor anew, and walks the state in Python);
- `snapshot_ms`: `training.ranks.driver.Snapshot.take`, its copy now (copies into
  tensors allocated at the first take).

    python -m bench.rollback_copy [--env=PongNoFrameskip-v4] [--agent=impala]
                                  [--device=cpu] [--threads=N] [--repeats=30]

Each repeat times one deep copy and one snapshot; every `--repeats // 5`-th also an
update. Minima and medians are reported: on a machine that other work shares, the
minimum is the copy's own cost, the median what it costs there.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench.learner_step import synchronize  # noqa: E402
from bench.throughput import synthetic_batch  # noqa: E402
from option_flags import default_values  # noqa: E402
from training.allocator import keep_freed_memory  # noqa: E402
from training.config import make_config  # noqa: E402
from training.factory import make_agent  # noqa: E402
from training.ranks.driver import Snapshot, _tensors  # noqa: E402
from wrappers.envs import env_info  # noqa: E402


def timed(fn, device: torch.device) -> float:
    """Seconds `fn()` takes, its device's queued work included."""
    synchronize(device)
    t0 = time.perf_counter()
    fn()
    synchronize(device)
    return time.perf_counter() - t0


def summary(seconds: list[float]) -> dict[str, float]:
    """The minimum and median of `seconds`, in ms."""
    return {"min": round(1e3 * min(seconds), 3),
            "median": round(1e3 * statistics.median(seconds), 3)}


def main() -> None:
    keep_freed_memory()  # as each learner's process does (training/factory.py)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--env", default="PongNoFrameskip-v4")
    ap.add_argument("--agent", default=None, help="default: the env family's")
    ap.add_argument("--device", default="cpu", help="the learner's device, e.g. cuda:0")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--repeats", type=int, default=30)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    cfg, errors = make_config({**default_values(), "env": args.env, "agent": args.agent,
                               "device": args.device})
    assert not errors, errors
    info = env_info(cfg.env, cfg.env_options())
    torch.manual_seed(cfg.seed)
    agent = make_agent(cfg, info)
    batch = synthetic_batch(cfg, info, agent.device)
    for _ in range(2):  # warm-up; the optimizers' moments exist from the first step
        agent.update(batch, 0.0)
    snapshot = Snapshot()
    snapshot.take(agent)  # allocates its tensors
    times: dict[str, list[float]] = {"update_ms": [], "deepcopy_ms": [], "snapshot_ms": []}
    for k in range(args.repeats):
        times["deepcopy_ms"].append(timed(lambda: copy.deepcopy(agent.state_dict()),
                                          agent.device))
        times["snapshot_ms"].append(timed(lambda: snapshot.take(agent), agent.device))
        if k % max(1, args.repeats // 5) == 0:
            times["update_ms"].append(timed(lambda: agent.update(batch, 0.0), agent.device))
    tensors = _tensors(snapshot.state)
    print(json.dumps({
        "env": cfg.env, "agent": cfg.agent, "optimizer": cfg.optimizer,
        "batch": [cfg.r_f_steps, cfg.batch_size], "device": args.device,
        "threads": args.threads, "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
        "state_tensors": len(tensors),
        "state_mb": round(sum(t.numel() * t.element_size() for t in tensors) / 1e6, 1),
        **{name: summary(s) for name, s in times.items()}}))


if __name__ == "__main__":
    main()
