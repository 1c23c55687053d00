"""Learning curves as PNG files: `python -m sweeps.plot <run or sweep dir>...`

For a run directory (one with episodes.csv), writes into it:
    curves.png       episode return vs frames (each episode, and the mean of the last 100)
    losses.png       policy loss, value loss, entropy, learning rate vs env steps
    throughput.png   fps vs frames, and policy lag / batch wait when learner.csv has them
For a sweep directory (one with sweep_summary.csv), runs are grouped by their
configuration minus the seed, and each group is drawn as the mean over its seeds
with the min-max spread shaded (curves interpolated on a common frame grid);
the same three files go into the sweep directory. Prints the paths written.
"""

from __future__ import annotations

import csv
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from sweeps.directory import RESULT_COLUMNS, SUMMARY, child_run_dir  # noqa: E402

SMOOTH = 100  # episodes in the running mean of returns
LOSSES = [("policy_loss", "policy loss"), ("value_loss", "value loss"),
          ("entropy", "entropy"), ("lr", "learning rate")]
GRID = 200  # points of the common frame grid of a sweep group


def read_columns(path: str) -> dict[str, np.ndarray]:
    """A CSV as float arrays by column (empty or unparsable cells are NaN)."""
    if not os.path.exists(path):
        return {}
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        return {}

    def num(x):
        try:
            return float(x)
        except (TypeError, ValueError):
            return np.nan

    return {k: np.array([num(r.get(k)) for r in rows]) for k in rows[0]}


def running_mean(x: np.ndarray, n: int = SMOOTH) -> np.ndarray:
    """Mean of the last up to `n` values at each point."""
    c = np.cumsum(np.insert(x, 0, 0.0))
    idx = np.arange(1, len(x) + 1)
    lo = np.maximum(idx - n, 0)
    return (c[idx] - c[lo]) / (idx - lo)


def _save(fig, path: str) -> str:
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def plot_run(run_dir: str) -> list[str]:
    ep = read_columns(os.path.join(run_dir, "episodes.csv"))
    ln = read_columns(os.path.join(run_dir, "learner.csv"))
    name = os.path.basename(os.path.normpath(run_dir))
    out = []
    fig, ax = plt.subplots(figsize=(8, 5))
    if ep:
        ax.plot(ep["frames"], ep["episode_return"], ".", ms=2, alpha=0.3, label="episode")
        ax.plot(ep["frames"], running_mean(ep["episode_return"]), label=f"mean of {SMOOTH}")
        ax.legend()
    ax.set(xlabel="frames", ylabel="episode return", title=name)
    out.append(_save(fig, os.path.join(run_dir, "curves.png")))

    fig, axes = plt.subplots(2, 2, figsize=(10, 7))
    for ax, (col, label) in zip(axes.flat, LOSSES, strict=True):
        if col in ln:
            ax.plot(ln["env_steps"], ln[col], lw=0.8)
        ax.set(xlabel="env steps", ylabel=label)
    fig.suptitle(name)
    out.append(_save(fig, os.path.join(run_dir, "losses.png")))

    extra = [c for c in ("policy_lag_mean", "batch_wait_s", "update_s") if c in ln]
    fig, axes = plt.subplots(1 + len(extra), 1, figsize=(8, 3 + 2.5 * len(extra)),
                             squeeze=False)
    if ln:
        axes[0, 0].plot(ln["frames"], ln["fps"], lw=0.8)
    axes[0, 0].set(xlabel="frames", ylabel="fps (frames/s)", title=name)
    for ax, col in zip(axes[1:, 0], extra, strict=True):
        ax.plot(ln["frames"], ln[col], lw=0.8)
        ax.set(xlabel="frames", ylabel=col)
    out.append(_save(fig, os.path.join(run_dir, "throughput.png")))
    return out


def sweep_groups(sweep_dir: str) -> dict[str, list[str]]:
    """Configuration label (the varied flags minus the seed) -> its runs' directories."""
    with open(os.path.join(sweep_dir, SUMMARY), newline="") as f:
        reader = csv.DictReader(f)
        varied = [c for c in (reader.fieldnames or []) if c != "run" and c not in RESULT_COLUMNS]
        rows = list(reader)
    groups: dict[str, list[str]] = {}
    for row in rows:
        label = ",".join(f"{k}={row[k]}" for k in varied if row.get(k)) or "default"
        rd = (os.path.join(sweep_dir, row["run_dir"]) if row.get("run_dir")
              else child_run_dir(os.path.join(sweep_dir, row["run"])))
        if rd and os.path.isfile(os.path.join(rd, "episodes.csv")):
            groups.setdefault(label, []).append(rd)
    return groups


def _band(ax, curves: list[tuple[np.ndarray, np.ndarray]], label: str) -> None:
    """Mean and min-max of curves (x, y) interpolated on a grid over their common x."""
    curves = [(x, y) for x, y in curves if len(x) > 0]
    if not curves:
        return
    lo, hi = max(x[0] for x, _ in curves), min(x[-1] for x, _ in curves)
    if hi <= lo:  # no common range: up to the longest
        lo, hi = min(x[0] for x, _ in curves), max(x[-1] for x, _ in curves)
    grid = np.linspace(lo, hi, GRID)
    ys = np.array([np.interp(grid, x, y) for x, y in curves])
    line, = ax.plot(grid, ys.mean(0), label=f"{label} ({len(curves)} seeds)")
    ax.fill_between(grid, ys.min(0), ys.max(0), color=line.get_color(), alpha=0.2)


def plot_sweep(sweep_dir: str) -> list[str]:
    groups = sweep_groups(sweep_dir)
    name = os.path.basename(os.path.normpath(sweep_dir))
    data = {g: [(read_columns(os.path.join(r, "episodes.csv")),
                 read_columns(os.path.join(r, "learner.csv"))) for r in runs]
            for g, runs in groups.items()}
    out = []
    fig, ax = plt.subplots(figsize=(9, 5.5))
    for g, runs in data.items():
        _band(ax, [(ep["frames"], running_mean(ep["episode_return"])) for ep, _ in runs if ep], g)
    ax.set(xlabel="frames", ylabel=f"episode return (mean of {SMOOTH})",
           title=f"{name}: mean over seeds, min-max shaded")
    if data:
        ax.legend(fontsize=8)
    out.append(_save(fig, os.path.join(sweep_dir, "curves.png")))

    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5))
    for ax, (col, label) in zip(axes.flat, LOSSES, strict=True):
        for g, runs in data.items():
            _band(ax, [(ln["env_steps"], ln[col]) for _, ln in runs if col in ln], g)
        ax.set(xlabel="env steps", ylabel=label)
    if data:
        axes[0, 0].legend(fontsize=7)
    fig.suptitle(name)
    out.append(_save(fig, os.path.join(sweep_dir, "losses.png")))

    fig, ax = plt.subplots(figsize=(9, 5))
    for g, runs in data.items():
        _band(ax, [(ln["frames"], ln["fps"]) for _, ln in runs if "fps" in ln], g)
    ax.set(xlabel="frames", ylabel="fps (frames/s)", title=name)
    if data:
        ax.legend(fontsize=8)
    out.append(_save(fig, os.path.join(sweep_dir, "throughput.png")))
    return out


def plot(path: str) -> list[str]:
    if os.path.isfile(os.path.join(path, SUMMARY)):
        return plot_sweep(path)
    if os.path.isfile(os.path.join(path, "episodes.csv")):
        return plot_run(path)
    raise ValueError(f"{path}: neither a run directory (episodes.csv) nor a sweep "
                     f"directory ({SUMMARY})")


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m sweeps.plot <run or sweep dir>...", file=sys.stderr)
        return 2
    status = 0
    for path in argv:
        try:
            for written in plot(path):
                print(written)
        except (ValueError, OSError) as e:
            print(f"error: {e}", file=sys.stderr)
            status = 2
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
