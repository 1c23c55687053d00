"""Replay mixes compared on MinAtar: a matrix of rows x tasks x seeds, as JSON,
Markdown tables and curves (issue 20).

    python -m bench.replays [--tasks=breakout,seaquest,asterix] [--rows=queue,elite3]
        [--seeds=0,1,2] [--steps=200000] [--parallel=1] [--best=standard] [-- flags]

Each cell is one `python main.py` run (`bench.learning.run_seed`) with the defaults
of the default agent (impala on MinAtar), `--serial` (the same seed gives the same
run bit for bit, whatever else the machine is doing; `--asynchronous` drops it)
and no evaluation worker, plus the row's flags (a `--replays` preset of
replay/presets.py, and for some rows CLEAR, the KL mask or another agent) and the
flags after `--`. A cell writes `cell.json` in `<results_dir>/<task>/<row>/seed<S>/`
when its run ends; a cell that has one is not run again, so an interrupted matrix
resumes where it stopped. `--parallel=N` runs N cells at once (default one at a
time: updates/s are only comparable between cells that ran alone), with
OMP_WAIT_POLICY=PASSIVE: with torch's OpenMP threads spinning, two cells at once on
2 cores ran at 1/30 of their speed.

Per task it writes `<task>.png` (per row the median over seeds of the mean-100 curve
on a common env-step grid, the seeds' range shaded) and a Markdown table
(`replays.md`, also in the JSON): env steps to each threshold (median over seeds;
a seed that missed counts as infinitely late, so "-" when half missed), `auc` the
mean of the mean-100 curve over the budget (the area normalised by the budget, the
mean of the episodes so far before 100 are in), final and best mean-100, learner
updates per second and the replay ratio (learner samples per env sample:
updates x batch_size x T / env steps).

Over tasks and seeds, `rliable` (Agarwal et al., 2021) aggregates each row's `auc`
and final mean-100, min-max normalised per task over every cell of the matrix:
interquartile means with 95% stratified-bootstrap confidence intervals, and
performance profiles (`aggregate.png`, `profiles.png`).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import statistics
import sys
import time

import numpy as np

from bench.learning import curve, first_reached, median_or_none, run_seed, seed_result

# name: (env id, thresholds of the mean-100 return), chosen from queue-only runs of
# seed 0 (the middle one about where the queue alone was at half the budget or later)
TASKS = {
    "breakout": ("MinAtar/Breakout-v1", (2.0, 3.0, 4.0)),
    "seaquest": ("MinAtar/Seaquest-v1", (0.5, 0.75, 1.0)),
    "asterix": ("MinAtar/Asterix-v1", (0.6, 0.8, 1.0)),
}
BASE_FLAGS = ("--serial", "--eval_interval=0")
CLEAR = ("--clear_policy_cloning_weight=0.01", "--clear_value_cloning_weight=0.005")


def rows(best: str, kl_mask: float) -> dict[str, tuple[str, ...]]:
    """Row name -> main.py flags. CLEAR (Rolnick et al., 2019: cloning weights 0.01
    and 0.005), the KL mask, ppo and impact ride on the `best` preset; ppo and
    impact share their auto values, so they differ only in the ratio's
    denominator (mu against the target network)."""
    mixes = ("queue", "standard", "elite1", "elite2", "elite3", "elite4", "elite_cos",
             "elite_kl", "attentive", "elite_insertion")
    out = {m: (f"--replays={m}",) for m in mixes}
    out[f"{best}+clear"] = (f"--replays={best}", *CLEAR)
    out[f"{best}+kl_mask"] = (f"--replays={best}", f"--kl_div_threshold={kl_mask:g}")
    out[f"ppo {best}"] = ("--agent=ppo", f"--replays={best}")
    out[f"impact {best}"] = ("--agent=impact", f"--replays={best}")
    return out


def auc(cols: dict[str, np.ndarray], budget: int) -> float:
    """Mean over env steps 0..budget of the running mean (the episodes so far while
    fewer than the window are in; 0 before the first episode)."""
    returns = cols["episode_return"]
    n = np.arange(1, len(returns) + 1)
    c = np.cumsum(returns)
    early = c / n
    mean = np.where(np.isnan(cols["mean"]), early, cols["mean"])
    steps = np.minimum(cols["env_steps"], budget)
    widths = np.diff(np.append(steps, budget))
    return float((mean * widths).sum() / budget)


def run_cell(task: str, row: str, flags: tuple[str, ...], seed: int, steps: int,
             root: str) -> dict:
    """The cell's result, from its cell.json, or by running it."""
    cell_dir = os.path.join(root, task, row.replace(" ", "_"), f"seed{seed}")
    path = os.path.join(cell_dir, "cell.json")
    if os.path.exists(path):
        with open(path) as f:
            done = json.load(f)
        ran = (done.get("flags"), (done.get("lr_schedule") or {}).get("environment_max_steps"))
        if "error" not in done and ran != (list(flags), steps):
            raise SystemExit(f"{path} ran with flags {ran[0]} and {ran[1]} env steps, not "
                             f"{list(flags)} and {steps}: give another --results_dir")
        if "error" not in done:  # the thresholds may have changed since it ran
            cols = curve(os.path.join(done["run_dir"], "episodes.csv"), 100)
            done["reached"] = {str(t): first_reached(cols, t) for t in TASKS[task][1]}
        return done
    os.makedirs(cell_dir, exist_ok=True)
    env, thresholds = TASKS[task]
    with open(os.path.join(cell_dir, "log.txt"), "a") as log:
        status, run_dir = run_seed(env, seed, steps, cell_dir, list(flags), log)
    if status != 0 or run_dir is None:
        return {"task": task, "row": row, "seed": seed, "error": f"main.py exited {status}",
                "log": os.path.join(cell_dir, "log.txt")}
    result = seed_result(run_dir, thresholds, 100, 100)
    with open(os.path.join(run_dir, "summary.json")) as f:
        summary = json.load(f)
    with open(os.path.join(run_dir, "flags.json")) as f:
        used = json.load(f)
    updates = summary["updates"]
    result.update(
        task=task, row=row, seed=seed, flags=list(flags), updates=updates,
        auc=round(auc(curve(os.path.join(run_dir, "episodes.csv"), 100), steps), 4),
        updates_per_s=round(updates / summary["wall_time_s"], 2),
        replay_ratio=round(updates * used["batch_size"] * used["r_f_steps"]
                           / max(summary["env_steps"], 1), 3))
    with open(path + ".tmp", "w") as f:
        json.dump(result, f, indent=1)
    os.replace(path + ".tmp", path)
    return result


def median_of_present(values: list[float | None]) -> float | None:
    """The median of the values that exist (a run too short for a mean-100 has
    none); None when half of them or more are missing."""
    present = [v for v in values if v is not None]
    return statistics.median(present) if 2 * len(present) > len(values) else None


def row_summary(cells: list[dict], thresholds) -> dict:
    """Medians over a row's seeds."""
    med = lambda k: median_of_present([c[k] for c in cells])  # noqa: E731
    return {
        "seeds": len(cells),
        "reached": {str(t): median_or_none([(c["reached"][str(t)] or {}).get("env_steps")
                                            for c in cells]) for t in thresholds},
        "seeds_reached": {str(t): sum(c["reached"][str(t)] is not None for c in cells)
                          for t in thresholds},
        "auc": med("auc"), "final_mean": med("final_mean"), "best_mean": med("best_mean"),
        "updates_per_s": med("updates_per_s"), "replay_ratio": med("replay_ratio"),
    }


def table(task: str, summaries: dict[str, dict], thresholds) -> str:
    """A Markdown table of one task's rows."""
    def k(x):
        return "-" if x is None else f"{x / 1000:,.0f}k"

    def f(x, digits=2):
        return "-" if x is None else f"{x:.{digits}f}"
    head = (f"**{TASKS[task][0]}** (env steps to mean-100 "
            f"{' / '.join(f'{t:g}' for t in thresholds)}, median of seeds)\n\n"
            "| row | to " + " / ".join(f"{t:g}" for t in thresholds)
            + " | auc | final | best | updates/s | replay ratio |\n|---|---|---|---|---|---|---|")
    lines = [head]
    for row, s in summaries.items():
        reached = " / ".join(k(s["reached"][str(t)]) for t in thresholds)
        lines.append(f"| {row} | {reached} | {f(s['auc'])} | {f(s['final_mean'])} | "
                     f"{f(s['best_mean'])} | {f(s['updates_per_s'], 1)} | "
                     f"{f(s['replay_ratio'])} |")
    return "\n".join(lines)


def plot_task(task: str, cells: dict[str, list[dict]], steps: int, path: str) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    grid = np.linspace(0, steps, 101)[1:]
    fig, ax = plt.subplots(figsize=(10, 6))
    colours = plt.get_cmap("tab20")
    for i, (row, seeds) in enumerate(cells.items()):
        curves = []
        for c in seeds:
            cols = curve(os.path.join(c["run_dir"], "episodes.csv"), 100)
            idx = np.searchsorted(cols["env_steps"], grid, side="right") - 1
            curves.append(np.where(idx >= 0, cols["mean"][np.maximum(idx, 0)], np.nan))
        curves = np.array(curves)
        colour = colours(i % 20)
        with np.errstate(all="ignore"):
            ax.plot(grid, np.nanmedian(curves, axis=0), color=colour, label=row,
                    ls="-" if i < 10 else "--")
            ax.fill_between(grid, np.nanmin(curves, axis=0), np.nanmax(curves, axis=0),
                            color=colour, alpha=0.12)
    for t in TASKS[task][1]:
        ax.axhline(t, ls=":", lw=0.8, color="gray")
    ax.set(xlabel="env steps (= frames)", ylabel="mean return of the last 100 episodes",
           title=f"{TASKS[task][0]}: median of seeds, range shaded")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def aggregate(cells: dict[str, dict[str, list[dict]]], root: str) -> dict:
    """rliable's interquartile means (95% stratified-bootstrap CIs, a fixed bootstrap
    seed) and performance profiles of each row's auc and final mean-100, min-max
    normalised per task over all cells. Only rows and seeds with a cell in every
    task enter."""
    from rliable import library as rly
    from rliable import metrics

    tasks = sorted(cells)
    rows_all = [r for r in cells[tasks[0]] if all(r in cells[t] for t in tasks)]
    by_seed = {t: {r: {c["seed"]: c for c in cells[t][r]} for r in rows_all} for t in tasks}
    seeds = sorted(set.intersection(*[set(by_seed[t][r]) for t in tasks for r in rows_all])) \
        if rows_all else []
    if not seeds:
        return {"skipped": "no row has a cell for one seed in every task"}
    out: dict = {"seeds": seeds, "tasks": tasks}
    iqm = lambda x: np.array([metrics.aggregate_iqm(x)])  # noqa: E731
    scores = {}
    for metric in ("auc", "final_mean"):
        raw = {t: np.array([[by_seed[t][r][s][metric] for s in seeds] for r in rows_all],
                           dtype=float) for t in tasks}  # [rows, seeds]; NaN: too short
        if any(np.isnan(v).any() for v in raw.values()):
            out[metric] = "a run with fewer than 100 episodes"
            continue
        norm = {t: (v - v.min()) / max(v.max() - v.min(), 1e-12) for t, v in raw.items()}
        scores[metric] = {r: np.stack([norm[t][i] for t in tasks], axis=1)  # [seeds, tasks]
                          for i, r in enumerate(rows_all)}
        point, ci = rly.get_interval_estimates(scores[metric], iqm, reps=2000,
                                               random_state=np.random.RandomState(0))
        out[metric] = {r: {"iqm": round(float(point[r][0]), 3),
                           "ci95": [round(float(ci[r][0, 0]), 3), round(float(ci[r][1, 0]), 3)]}
                       for r in rows_all}
        if metric == "auc":
            out["aggregate_png"] = plot_aggregate(point, ci, rows_all, scores[metric], root)
    return out


def plot_aggregate(point, ci, rows_all, scores, root: str) -> str:
    """The IQM intervals (aggregate.png) and the performance profiles (profiles.png) of
    normalised auc; returns the first path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from rliable import library as rly
    from rliable import plot_utils

    path = os.path.join(root, "aggregate.png")
    fig, _ = plot_utils.plot_interval_estimates(point, ci, metric_names=["IQM of auc"],
                                                algorithms=rows_all, xlabel="normalised")
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)
    taus = np.linspace(0.0, 1.0, 51)
    profiles, profile_cis = rly.create_performance_profile(scores, taus)
    fig, ax = plt.subplots(figsize=(8, 5))
    plot_utils.plot_performance_profiles(profiles, taus, performance_profile_cis=profile_cis,
                                         xlabel=r"normalised auc $(\tau)$", ax=ax)
    ax.legend(fontsize=7)
    fig.savefig(os.path.join(root, "profiles.png"), dpi=100, bbox_inches="tight")
    plt.close(fig)
    return path


def main(argv: list[str]) -> int:
    ours, extra = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) \
        if "--" in argv else (argv, [])
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", default=",".join(TASKS))
    p.add_argument("--rows", help="comma-separated row names (default: all)")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--steps", type=int, default=200_000, help="env steps per cell")
    p.add_argument("--parallel", type=int, default=1, help="cells run at once")
    p.add_argument("--best", default="standard", help="the preset CLEAR, the KL mask, ppo "
                   "and impact ride on")
    p.add_argument("--kl_mask", type=float, default=0.3, help="--kl_div_threshold of the "
                   "KL-mask row")
    p.add_argument("--asynchronous", action="store_true", help="run cells without --serial")
    p.add_argument("--results_dir", default=os.path.join("results", "bench_replays"))
    args = p.parse_args(ours)
    matrix = rows(args.best, args.kl_mask)
    chosen = args.rows.split(",") if args.rows else list(matrix)
    tasks = args.tasks.split(",")
    bad = [r for r in chosen if r not in matrix] + [t for t in tasks if t not in TASKS]
    if bad:
        p.error(f"unknown rows or tasks {bad}; rows: {', '.join(matrix)}; "
                f"tasks: {', '.join(TASKS)}")
    seeds = [int(s) for s in args.seeds.split(",")]
    base = [f for f in BASE_FLAGS if not (args.asynchronous and f == "--serial")]
    root = os.path.abspath(args.results_dir)
    if args.parallel > 1:  # OpenMP threads that spin while waiting: two cells ran at 1/30
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # speed; numerics unchanged
    t0 = time.time()
    jobs = [(t, r, (*base, *matrix[r], *extra), s) for s in seeds for t in tasks
            for r in chosen]
    with concurrent.futures.ThreadPoolExecutor(args.parallel) as pool:
        done = list(pool.map(lambda j: run_cell(*j, args.steps, root), jobs))
    errors = [c for c in done if "error" in c]
    cells: dict[str, dict[str, list[dict]]] = {}
    for c in done:
        if "error" not in c:
            cells.setdefault(c["task"], {}).setdefault(c["row"], []).append(c)
    result = {"steps": args.steps, "seeds": seeds, "flags": base + extra, "tasks": {},
              "errors": errors}
    md = []
    for t in tasks:
        if t not in cells:
            continue
        summaries = {r: row_summary(cells[t][r], TASKS[t][1]) for r in chosen
                     if r in cells[t]}
        md.append(table(t, summaries, TASKS[t][1]))
        result["tasks"][t] = {"env": TASKS[t][0], "thresholds": TASKS[t][1], "rows": summaries,
                              "curves_png": plot_task(t, cells[t], args.steps,
                                                      os.path.join(root, f"{t}.png"))}
    with open(os.path.join(root, "replays.md"), "w") as f:
        f.write("\n\n".join(md) + "\n")
    if cells and len(chosen) > 1:
        result["rliable"] = aggregate(cells, root)
    result.update(markdown=os.path.join(root, "replays.md"),
                  bench_wall_s=round(time.time() - t0, 1))
    print(json.dumps(result, indent=1))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
