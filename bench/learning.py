"""Learning speed through the real entry point, as JSON: what every learning claim cites.

    python -m bench.learning --task=pong --seeds=0,1,2 [--frames=4000000] [-- main.py flags]
    python -m bench.learning --task=minatar_breakout --seeds=0 -- --lr=1e-3
    python -m bench.learning --env=MinAtar/Asterix-v1 --thresholds=5,10 --frames=2e6

Each seed is one `python main.py --env=... --seed=S --environment_max_steps=...`
run (flags after `--` are passed through as they are), in its own run directory
under `--results_dir`. From its episodes.csv it reports, for each return
threshold, the frames, env steps and wall seconds at which the mean return over
the last `--window` (100) episodes first reached it (null if never), and the
final and best mean (the last `--final_window` episodes, default `--window`; the
top level counts the seeds whose final mean is at or above each threshold). The
top level holds the median over seeds of each figure (a seed that never reached a
threshold counts as infinitely late, so the median is null when half of the seeds
or more missed it). A PNG of the curves
(mean-100 against frames, one line per seed, thresholds dashed) goes next to
the runs; its path is in the JSON.

The evaluation curve (eval.csv: the mean of `--eval_episodes` whole games played
by the current weights, every `--eval_interval` env steps) gets the same figures
under `eval`: where its mean first reached each threshold, its last and best.
`lr_schedule` says what the learning rate did in each run: from `lr` to
`lr_end_value` over `environment_max_steps` env steps (equal values: constant,
so the budget did not change the run).

A run of several policies (`--num_policies`) reports its best policy by final mean,
its figures in that policy's own env steps, and every policy's under "policies".

Counting: frames = env steps x frameskip (4 on Atari, 1 elsewhere).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import statistics
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# name: (env id, thresholds, default budget in frames)
TASKS = {
    "pong": ("PongNoFrameskip-v4", (-15.0, 0.0, 18.0), 4_000_000),
    "breakout": ("BreakoutNoFrameskip-v4", (10.0, 50.0, 100.0), 10_000_000),
    "minatar_breakout": ("MinAtar/Breakout-v1", (2.0, 5.0, 10.0), 1_000_000),
    "minatar_asterix": ("MinAtar/Asterix-v1", (2.0, 5.0, 10.0), 2_000_000),
    "minatar_space_invaders": ("MinAtar/SpaceInvaders-v1", (5.0, 20.0, 40.0), 2_000_000),
    "cartpole": ("CartPole-v1", (200.0, 475.0), 500_000),
    # issue 19's continuous-control goals (and LunarLander's discrete twin)
    "pendulum": ("Pendulum-v1", (-1000.0, -500.0, -200.0), 300_000),
    "lunar_lander": ("LunarLander-v3", (0.0, 100.0, 200.0), 1_000_000),
    "lunar_lander_continuous": ("LunarLanderContinuous-v3", (0.0, 100.0, 200.0), 1_000_000),
    "bipedal_walker": ("BipedalWalker-v3", (0.0, 100.0, 300.0), 2_000_000),
    "half_cheetah": ("HalfCheetah-v5", (1000.0, 2000.0, 3000.0), 1_000_000),
    "hopper": ("Hopper-v5", (500.0, 1000.0, 2000.0), 1_000_000),
    # issue 35's off-policy goals: the last threshold of each is its goal at 1M env steps
    "half_cheetah_off_policy": ("HalfCheetah-v5", (3000.0, 6000.0, 9600.0), 1_000_000),
    "hopper_off_policy": ("Hopper-v5", (1000.0, 2000.0, 3100.0), 1_000_000),
    "walker2d_off_policy": ("Walker2d-v5", (1000.0, 2000.0, 4000.0), 1_000_000),
}


def running_mean(returns: np.ndarray, window: int) -> np.ndarray:
    """Per episode, the mean return of the last `window` episodes (NaN until `window`
    episodes are in)."""
    mean = np.full(len(returns), np.nan)
    if len(returns) >= window:
        c = np.cumsum(np.insert(returns, 0, 0.0))
        mean[window - 1:] = (c[window:] - c[:-window]) / window
    return mean


def curve(episodes_csv: str, window: int) -> dict[str, np.ndarray]:
    """Per finished episode: env_steps, frames, wall_time, episode_return,
    episode_length and `mean`, the running mean over `window` episodes."""
    with open(episodes_csv, newline="") as f:
        rows = list(csv.DictReader(f))
    cols = {k: np.array([float(r[k]) for r in rows])
            for k in ("env_steps", "frames", "wall_time", "episode_return", "episode_length")}
    cols["mean"] = running_mean(cols["episode_return"], window)
    return cols


def first_reached(cols: dict[str, np.ndarray], threshold: float) -> dict | None:
    """frames, env steps and wall seconds where the running mean first was >= threshold."""
    hit = np.flatnonzero(np.nan_to_num(cols["mean"], nan=-np.inf) >= threshold)
    if not len(hit):
        return None
    i = hit[0]
    return {"frames": int(cols["frames"][i]), "env_steps": int(cols["env_steps"][i]),
            "wall_s": round(float(cols["wall_time"][i]), 1)}


def eval_rows(run_dir: str) -> list[dict]:
    """eval.csv's rows (none without the file)."""
    path = os.path.join(run_dir, "eval.csv")
    if not os.path.exists(path):
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def eval_result(run_dir: str, thresholds) -> dict | None:
    """From eval.csv: per threshold, the first evaluation whose mean reached it (frames,
    env steps, wall seconds) or None; the last and best means. None without rows."""
    rows = eval_rows(run_dir)
    if not rows:
        return None
    means = [float(r["mean"]) for r in rows]
    reached = {}
    for t in thresholds:
        hit = next((r for r, m in zip(rows, means, strict=True) if m >= t), None)
        reached[str(t)] = hit and {"frames": int(hit["frames"]),
                                   "env_steps": int(hit["env_steps"]),
                                   "wall_s": round(float(hit["wall_time"]), 1)}
    return {"evaluations": len(rows), "episodes_each": int(rows[-1]["episodes"]),
            "final_mean": means[-1], "best_mean": max(means), "reached": reached}


def seed_result(run_dir: str, thresholds, window: int, final_window: int) -> dict:
    cols = curve(os.path.join(run_dir, "episodes.csv"), window)
    final = running_mean(cols["episode_return"], final_window)
    means = final[~np.isnan(final)]
    with open(os.path.join(run_dir, "summary.json")) as f:
        summary = json.load(f)
    with open(os.path.join(run_dir, "flags.json")) as f:
        flags = json.load(f)
    return {
        "run_dir": run_dir,
        "frames": summary["frames"], "env_steps": summary["env_steps"],
        "wall_s": summary["wall_time_s"], "fps_mean": summary["fps_mean"],
        "episodes": len(cols["episode_return"]),
        "final_mean": round(float(means[-1]), 3) if len(means) else None,
        "best_mean": round(float(means.max()), 3) if len(means) else None,
        "reached": {str(t): first_reached(cols, t) for t in thresholds},
        "eval": eval_result(run_dir, thresholds),
        "agent": flags.get("agent"),
        "lr_schedule": {k: flags.get(k) for k in ("lr", "lr_end_value",
                                                   "environment_max_steps")},
    }


def run_result(run_dir: str, thresholds, window: int, final_window: int) -> dict:
    """`seed_result` of a run; of a run of several policies (--num_policies), the best
    policy's (by its final mean; its figures count its own env steps) with every
    policy's under "policies"."""
    folders = sorted((d for d in os.listdir(run_dir) if d.startswith("policy_")),
                     key=lambda d: int(d.split("_")[1]))
    if not folders:
        return seed_result(run_dir, thresholds, window, final_window)
    results = [seed_result(os.path.join(run_dir, d), thresholds, window, final_window)
               for d in folders]
    finals = [-math.inf if r["final_mean"] is None else r["final_mean"] for r in results]
    best = int(np.argmax(finals))
    return {**results[best], "policy": best,
            "policies": [{"policy": k, "final_mean": r["final_mean"], "best_mean": r["best_mean"],
                          "reached": r["reached"]} for k, r in enumerate(results)]}


def median_or_none(values: list[float | None]) -> float | None:
    """Median where a None is later than everything; None if the median is one."""
    m = statistics.median([math.inf if v is None else v for v in values])
    return None if math.isinf(m) else m


def aggregate(seeds: list[dict], thresholds) -> dict:
    out = {}
    for t in thresholds:
        hits = [s["reached"][str(t)] for s in seeds]
        out[str(t)] = {k: median_or_none([h and h[k] for h in hits])
                       for k in ("frames", "env_steps", "wall_s")}
        out[str(t)]["seeds_reached"] = sum(h is not None for h in hits)
    finals = [s["final_mean"] for s in seeds if s["final_mean"] is not None]
    bests = [s["best_mean"] for s in seeds if s["best_mean"] is not None]
    evals = [s["eval"] for s in seeds if s.get("eval")]
    eval_out = None
    if evals:
        eval_out = {str(t): {k: median_or_none([e["reached"][str(t)] and
                                                e["reached"][str(t)][k] for e in evals])
                             for k in ("frames", "env_steps", "wall_s")}
                    for t in thresholds}
        eval_out = {"reached": eval_out,
                    "final_mean": statistics.median(e["final_mean"] for e in evals),
                    "best_mean": statistics.median(e["best_mean"] for e in evals)}
    return {"reached": out,
            "final_at_least": {str(t): sum(f >= t for f in finals) for t in thresholds},
            "final_mean": statistics.median(finals) if finals else None,
            "best_mean": statistics.median(bests) if bests else None,
            "eval": eval_out}


def plot(seeds: list[dict], thresholds, window: int, title: str, path: str) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    for s in seeds:
        cols = curve(os.path.join(s["run_dir"], "episodes.csv"), window)
        line, = ax.plot(cols["frames"], cols["mean"], label=os.path.basename(s["run_dir"]))
        eval_csv = os.path.join(s["run_dir"], "eval.csv")
        if os.path.exists(eval_csv):
            with open(eval_csv, newline="") as f:
                rows = list(csv.DictReader(f))
            if rows:
                ax.plot([int(r["frames"]) for r in rows], [float(r["mean"]) for r in rows],
                        "o:", color=line.get_color(), ms=3, label="  evaluation (whole games)")
    for t in thresholds:
        ax.axhline(t, ls="--", lw=0.8, color="gray")
    ax.set(xlabel="frames", ylabel=f"mean return of the last {window} episodes", title=title)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def run_seed(env: str, seed: int, env_steps: int, results_dir: str, extra: list[str],
             log) -> tuple[int, str | None]:
    """One main.py run; (exit status, its run directory).

    The run directory is the new one under `results_dir` that the run's own output
    names ("run directory <path>: ..."), so another run writing into the same
    `results_dir` meanwhile (a second bench) cannot be taken for it."""
    before = set(os.listdir(results_dir)) if os.path.isdir(results_dir) else set()
    cmd = [sys.executable, os.path.join(ROOT, "main.py"), f"--env={env}", f"--seed={seed}",
           f"--environment_max_steps={env_steps}", f"--results_dir={results_dir}", *extra]
    print("running:", " ".join(cmd), file=log, flush=True)
    named = set()
    with subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, bufsize=1) as proc:
        for line in proc.stdout:
            log.write(line)
            log.flush()  # the log is followed while the run goes on
            if "run directory " in line:
                named.add(line.split("run directory ", 1)[1].split(": ", 1)[0].strip())
    new = set(os.listdir(results_dir)) - before if os.path.isdir(results_dir) else set()
    ours = [os.path.join(results_dir, d) for d in sorted(new)
            if os.path.join(results_dir, d) in named]
    return proc.returncode, ours[0] if len(ours) == 1 else None


def frames_per_step(env: str, extra: list[str]) -> int:
    from wrappers.envs import family_of

    if not family_of(env).skips_frames:
        return 1
    given = [a.split("=", 1)[1] for a in extra if a.startswith("--skipped_frames=")]
    return int(given[-1]) if given else 4


def main(argv: list[str]) -> int:
    ours, extra = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) \
        if "--" in argv else (argv, [])
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--task", choices=sorted(TASKS), help="a named task (env, thresholds)")
    p.add_argument("--env", help="any env id main.py takes (needs --thresholds)")
    p.add_argument("--thresholds", help="comma-separated mean-return thresholds")
    p.add_argument("--frames", type=float, help="budget per seed in frames (default: the "
                   "task's)")
    p.add_argument("--seeds", default="0", help="comma-separated seeds, run one after another")
    p.add_argument("--window", type=int, default=100, help="episodes in the running mean")
    p.add_argument("--final_window", type=int, help="episodes in the final and best means "
                   "(default: --window)")
    p.add_argument("--results_dir", default=os.path.join("results", "bench_learning"))
    p.add_argument("--log", help="file for the runs' output (default: stderr)")
    args = p.parse_args(ours)
    if args.task:
        env, thresholds, budget = TASKS[args.task]
    elif args.env and args.thresholds:
        env, thresholds, budget = args.env, (), None
    else:
        p.error("give --task, or --env with --thresholds")
    if args.thresholds:
        thresholds = tuple(float(x) for x in args.thresholds.split(","))
    if args.env:
        env = args.env
    budget = args.frames or budget
    final_window = args.final_window or args.window
    if not budget:
        p.error("give --frames")
    fps = frames_per_step(env, extra)
    env_steps = int(budget) // fps
    seeds = [int(s) for s in args.seeds.split(",")]
    results_dir = os.path.abspath(args.results_dir)
    os.makedirs(results_dir, exist_ok=True)
    log = open(args.log, "a") if args.log else sys.stderr
    t0 = time.time()
    per_seed = []
    for seed in seeds:
        status, run_dir = run_seed(env, seed, env_steps, results_dir, extra, log)
        if status != 0 or run_dir is None:
            print(json.dumps({"env": env, "seed": seed, "error": f"main.py exited {status}",
                              "run_dir": run_dir}))
            return 1
        per_seed.append({"seed": seed, **run_result(run_dir, thresholds, args.window,
                                                        final_window)})
    name = args.task or env.replace("/", "-")
    png = os.path.join(results_dir, f"{name}_{int(t0)}.png")
    result = {
        "task": args.task, "env": env, "flags": extra, "seeds": seeds,
        "budget_frames": env_steps * fps, "budget_env_steps": env_steps,
        "window": args.window,
        "final_window": final_window, "thresholds": list(thresholds),
        "median": aggregate(per_seed, thresholds), "per_seed": per_seed,
        "curve_png": plot(per_seed, thresholds, args.window,
                          f"{env} {' '.join(extra)}".strip(), png),
        "bench_wall_s": round(time.time() - t0, 1),
    }
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
