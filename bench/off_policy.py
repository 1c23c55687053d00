"""SAC's env steps/s at replay ratio 1 against CleanRL's `sac_continuous_action.py`,
side by side on this machine, as one record of the suite
(`bench/results/half_cheetah_sac_vs_cleanrl/`) and JSON.

    python -m bench.off_policy --cleanrl=DIR --peer_site=SITE [--steps=10000] [--repeats=3]

DIR holds CleanRL's script and its `cleanrl_utils/` (github.com/vwxyzjn/cleanrl),
run as a peer, unchanged, with `--no-cuda`, on HalfCheetah-v4 (it needs gymnasium
0.29 and tyro: give their site directory with --peer_site; our run uses v5, the same
MuJoCo model). Both learn from 5,000 random env steps on, one update per env step,
batch 256, 256-wide MLPs. The rate is that of the `--steps` env steps after
learning_starts: ours from episodes.csv (the wall time of the episodes ending at the
first and the last 1,000 steps), CleanRL's from its "SPS" lines (global step over
elapsed seconds, every 100 steps). Each repeat runs ours, then CleanRL, back to back;
the record holds every pair, the medians and the median of the pairs' ratios, with
the machine (`bench.records.machine`), and our update alone on as many threads as
training takes (`bench.off_policy_update`, ms per update) with training's rate over it.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

from bench.records import ROOT, git_state, machine, save_side_by_side

STARTS = 5000
ROW = "half_cheetah_sac_vs_cleanrl"


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


def update_alone_ms(threads: int) -> float:
    """Our sac update alone, ms (bench.off_policy_update, the fused critics)."""
    out = subprocess.run([sys.executable, "-m", "bench.off_policy_update",
                          f"--threads={threads}"], check=True, capture_output=True,
                         text=True, cwd=ROOT).stdout
    return json.loads(out)["ms_per_update"]["fused"]


def main() -> None:
    from training.config import auto_learner_threads

    p = argparse.ArgumentParser()
    p.add_argument("--cleanrl", required=True, help="directory of sac_continuous_action.py")
    p.add_argument("--peer_site", default="", help="site directory with gymnasium 0.29, tyro")
    p.add_argument("--steps", type=int, default=10_000)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    pairs = []
    for seed in range(args.repeats):
        a, b = ours(args.steps, seed), cleanrl(args.cleanrl, args.peer_site, args.steps, seed)
        pairs.append({"ours_sps": round(a, 2), "cleanrl_sps": round(b, 2),
                      "ratio": round(a / b, 3)})
    threads = auto_learner_threads("sac", 1)
    alone = update_alone_ms(threads)
    commit, dirty = git_state()
    ours_sps = statistics.median(x["ours_sps"] for x in pairs)
    record = {"format": 1, "row": ROW, "commit": commit, "dirty": dirty, **machine(),
              "date": datetime.date.today().isoformat(), "env": "HalfCheetah-v5",
              "command": f"python -m bench.off_policy --cleanrl=DIR --peer_site=SITE "
                         f"--steps={args.steps} --repeats={args.repeats}",
              "cleanrl": "sac_continuous_action.py --env-id=HalfCheetah-v4 --no-cuda",
              "pairs": pairs, "ours_sps": ours_sps,
              "cleanrl_sps": statistics.median(x["cleanrl_sps"] for x in pairs),
              "ratio": statistics.median(x["ratio"] for x in pairs),
              "learner_threads": threads, "update_alone_ms": round(alone, 3),
              "ours_over_update_alone": round(ours_sps * alone / 1e3, 3)}
    path = save_side_by_side(record)
    print(json.dumps({**record, "record": path}, indent=1))


if __name__ == "__main__":
    main()
