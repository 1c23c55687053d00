"""SAC's env steps/s at replay ratio 1 against CleanRL's `sac_continuous_action.py`,
side by side on this machine, as JSON.

    python -m bench.off_policy --cleanrl=DIR [--steps=50000] [--repeats=1]

DIR holds CleanRL's script and its `cleanrl_utils/` (github.com/vwxyzjn/cleanrl),
run as a peer, unchanged, with `--no-cuda`, on HalfCheetah-v4 (it needs gymnasium
0.29 and tyro: give their site directory with --peer_site; our run uses v5, the same
MuJoCo model). Both learn from 5,000 random env steps on, one update per env step,
batch 256, 256-wide MLPs. The rate is that of the `--steps` env steps after
learning_starts: ours from episodes.csv (the wall time of the episodes ending at the
first and the last 1,000 steps), CleanRL's from its "SPS" lines (global step over
elapsed seconds, every 100 steps). Each repeat runs ours, then CleanRL, back to back;
the medians and their ratio are printed. Name the CPU (`lscpu`) with the figures.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STARTS = 5000


def ours(steps: int, seed: int) -> float:
    """Our env steps/s after learning_starts."""
    with tempfile.TemporaryDirectory() as results:
        subprocess.run([sys.executable, os.path.join(ROOT, "main.py"), "--env=HalfCheetah-v5",
                        "--agent=sac", f"--seed={seed}", f"--results_dir={results}",
                        f"--environment_max_steps={STARTS + steps}", "--eval_interval=0",
                        "--status_interval=60"], check=True, capture_output=True, cwd=ROOT)
        (run,) = os.listdir(results)
        with open(os.path.join(results, run, "episodes.csv")) as f:
            rows = [(int(r["env_steps"]), float(r["wall_time"])) for r in csv.DictReader(f)]
    after = [r for r in rows if r[0] > STARTS]
    (s0, t0), (s1, t1) = after[0], after[-1]
    return (s1 - s0) / (t1 - t0)


def cleanrl(script_dir: str, peer_site: str, steps: int, seed: int) -> float:
    """CleanRL's env steps/s after learning_starts."""
    env = {**os.environ, "PYTHONPATH": f"{script_dir}:{peer_site}"}
    with tempfile.TemporaryDirectory() as cwd:
        out = subprocess.run(
            [sys.executable, os.path.join(script_dir, "sac_continuous_action.py"),
             "--env-id=HalfCheetah-v4", f"--total-timesteps={STARTS + steps}",
             f"--learning-starts={STARTS}", f"--seed={seed}", "--no-cuda"],
            check=True, capture_output=True, text=True, cwd=cwd, env=env).stdout
    sps = [int(x) for x in re.findall(r"^SPS: (\d+)$", out, re.M)]
    points = [(STARTS + 100 * (i + 1), s) for i, s in enumerate(sps)]  # every 100 steps
    elapsed = [(step, step / s) for step, s in points if s > 0]
    (s0, t0), (s1, t1) = elapsed[9], elapsed[-1]  # from 1,000 steps after learning_starts
    return (s1 - s0) / (t1 - t0)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--cleanrl", required=True, help="directory of sac_continuous_action.py")
    p.add_argument("--peer_site", default="", help="site directory with gymnasium 0.29, tyro")
    p.add_argument("--steps", type=int, default=50_000)
    p.add_argument("--repeats", type=int, default=1)
    args = p.parse_args()
    ours_sps, peer_sps = [], []
    for seed in range(args.repeats):
        ours_sps.append(ours(args.steps, seed))
        peer_sps.append(cleanrl(args.cleanrl, args.peer_site, args.steps, seed))
    a, b = statistics.median(ours_sps), statistics.median(peer_sps)
    print(json.dumps({"steps_after_learning_starts": args.steps, "ours_sps": ours_sps,
                      "cleanrl_sps": peer_sps, "ours_median": a, "cleanrl_median": b,
                      "ours_over_cleanrl": a / b}))


if __name__ == "__main__":
    main()
