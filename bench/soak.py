"""Soak: train for a given number of minutes and watch for leaks, as JSON.

    python -m bench.soak --minutes=60 [--interval=30] [-- main.py flags]

Runs `python main.py` (Pong, the defaults, plus a replay mix with elite sampling:
`--replay_parameters` of `MIX` unless given after `--`) in a process group of its
own. Every `--interval` seconds it samples the learner (the main.py process) and
its actors (the learner's child processes): RSS (MiB), open fds and threads, each
summed over the role, and /dev/shm use (MiB). At the end it sends SIGINT, waits for
the run to stop and checks that no process of the run is left, that /dev/shm holds
no new entry and is back to its use before the run, and that the checkpoint loads.

The JSON gives, per series, the first and last sample and the slope of a least
squares line over the second half of the samples (per hour), and for RSS the
relative growth over the second half (the line's rise over the half, over its mean).
Goals (issue 10): RSS growth under 5% over the second half; fds and /dev/shm flat.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np
import psutil

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MIX = json.dumps([
    {"type": "queue", "capacity": 1, "sample_ratio": 0.5},
    {"type": "custom", "capacity": 2000, "sample_ratio": 0.5,
     "sample_strategy": "elite_sampling", "lambda_batch_multiplier": 6,
     "alfa_annealing_factor": 2.0},
])
SERIES = ("learner_rss_mib", "actors_rss_mib", "learner_fds", "actors_fds",
          "learner_threads", "actors_threads", "shm_used_mib")


def shm_state() -> tuple[set[str], float]:
    if not os.path.isdir("/dev/shm"):
        return set(), 0.0
    return set(os.listdir("/dev/shm")), shutil.disk_usage("/dev/shm").used / 2**20


def sample(learner: psutil.Process) -> dict[str, float]:
    """One sample of every series; the actors are the learner's children."""
    out = dict.fromkeys(SERIES, 0.0)
    procs = [("learner", learner)] + [("actors", c) for c in learner.children(recursive=True)]
    for role, p in procs:
        try:
            with p.oneshot():
                out[f"{role}_rss_mib"] += p.memory_info().rss / 2**20
                out[f"{role}_fds"] += p.num_fds()
                out[f"{role}_threads"] += p.num_threads()
        except psutil.Error:
            continue
    out["actors"] = float(len(procs) - 1)
    out["shm_used_mib"] = shm_state()[1]
    return out


def second_half_trend(t_s: np.ndarray, y: np.ndarray) -> dict[str, float]:
    """Least squares slope (per hour) over the second half of the samples, and the
    line's rise over that half relative to the half's mean."""
    half = len(t_s) // 2
    t, v = t_s[half:], y[half:]
    if len(t) < 2 or t[-1] == t[0]:
        return {"slope_per_hour": 0.0, "growth_second_half": 0.0}
    slope = float(np.polyfit(t, v, 1)[0])
    mean = float(np.mean(v))
    rise = slope * float(t[-1] - t[0])
    return {"slope_per_hour": slope * 3600.0,
            "growth_second_half": rise / mean if mean else 0.0}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--interval", type=float, default=30.0)
    parser.add_argument("--env", default="PongNoFrameskip-v4")
    parser.add_argument("--results_dir", default=None)
    parser.add_argument("extra", nargs="*", help="main.py flags, after --")
    args = parser.parse_args()
    results = args.results_dir or tempfile.mkdtemp(prefix="soak_")
    flags = [f"--env={args.env}", f"--results_dir={results}",
             "--environment_max_steps=10000000000", *args.extra]
    if not any(f.startswith("--replay_parameters") for f in args.extra):
        flags.append(f"--replay_parameters={MIX}")
    shm_names_before, shm_before = shm_state()
    log = open(os.path.join(tempfile.gettempdir(), f"soak_{os.getpid()}.log"), "w")
    proc = subprocess.Popen([sys.executable, os.path.join(ROOT, "main.py"), *flags], cwd=ROOT,
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    learner = psutil.Process(proc.pid)
    t0 = time.time()
    samples, seen = [], {proc.pid}
    while time.time() - t0 < args.minutes * 60 and proc.poll() is None:
        time.sleep(min(args.interval, max(0.0, t0 + args.minutes * 60 - time.time())))
        if proc.poll() is not None:
            break
        seen.update(c.pid for c in learner.children(recursive=True))
        samples.append({"t_s": round(time.time() - t0, 1), **sample(learner)})
    early_exit = proc.poll()
    if early_exit is None:
        proc.send_signal(signal.SIGINT)
    try:
        code = proc.wait(timeout=180)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        code = proc.wait()
    time.sleep(2)
    left = [pid for pid in seen if psutil.pid_exists(pid)
            and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
    shm_names_after, shm_after = shm_state()
    t = np.array([s["t_s"] for s in samples], dtype=float)
    trends = {k: {"first": samples[0][k] if samples else None,
                  "last": samples[-1][k] if samples else None,
                  **second_half_trend(t, np.array([s[k] for s in samples], dtype=float))}
              for k in SERIES}
    runs = [os.path.join(results, d) for d in os.listdir(results)] if os.path.isdir(results) else []
    checkpoint_ok = False
    summary = {}
    if runs:
        sys.path.insert(0, ROOT)
        from training.checkpoint import CheckpointError, load_checkpoint

        try:
            load_checkpoint(runs[0])
            checkpoint_ok = True
        except CheckpointError:
            pass
        try:
            with open(os.path.join(runs[0], "summary.json")) as f:
                summary = json.load(f)
        except (OSError, ValueError):
            pass
    rss_growth = max(trends["learner_rss_mib"]["growth_second_half"],
                     trends["actors_rss_mib"]["growth_second_half"])
    print(json.dumps({
        "minutes": round((time.time() - t0) / 60, 2), "samples": len(samples),
        "flags": flags, "run_dir": runs[0] if runs else None,
        "exit_code": code, "exited_before_the_end": early_exit is not None,
        "trends": trends,
        "goals": {
            "rss_growth_under_5pct": rss_growth < 0.05,
            "fds_flat": all(trends[k]["last"] == trends[k]["first"]
                            for k in ("learner_fds", "actors_fds")) if samples else None,
            "shm_back_to_start": abs(shm_after - shm_before) < 1.0,
            "no_new_shm_entries": sorted(shm_names_after - shm_names_before) == [],
            "no_process_left": left == [],
            "checkpoint_loads": checkpoint_ok,
        },
        "processes_left": left,
        "summary": {k: summary.get(k) for k in ("env_steps", "frames", "updates", "fps_mean",
                                                "actor_restarts", "mean_return_last100")},
        "samples_table": samples,
    }, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
