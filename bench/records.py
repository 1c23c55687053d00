"""A benchmark run's record: a few KB of JSON kept in the repository, from which the
results pages are generated (`bench/report.py`).

    record = make_record(row, seed, run_dir, command)   # after main.py finished
    save_record(record)                                  # bench/results/<row>/seed<S>.json
    records = load_records()                             # {row name: [record, ...]}

A record holds where and how the run was made (the commit and whether the tree was
dirty, the CPU model and core count, torch's and Python's versions, the flags, the
command, the date) and what it measured: the training curve (the mean return of the
last `window` episodes at each finished episode) downsampled to at most `CURVE_POINTS`
points of (frames, env steps, wall seconds, mean), the evaluation curve (eval.csv),
the frames, env steps and wall seconds to each threshold, the final and best means,
the run's frames/s and updates, and learner.csv's policy lag and KL (between the
acting and the learning policy on the batches) over training. Counting: frames =
env steps x frameskip (4 on Atari).
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess

import numpy as np

from bench.learning import curve, eval_rows, first_reached

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "bench", "results")
CURVE_POINTS = 200
FORMAT = 1


def cpu_model() -> str:
    """The CPU as `lscpu` names it, with its family and model numbers (machines that
    share a name differ: "AMD EPYC 7B13 (family 25, model 1)")."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return platform.processor() or "unknown"
    fields = dict(line.split(":", 1) for line in out.splitlines() if ":" in line)
    fields = {k.strip(): v.strip() for k, v in fields.items()}
    name = fields.get("Model name", "unknown")
    if "CPU family" in fields and "Model" in fields:
        name += f" (family {fields['CPU family']}, model {fields['Model']})"
    return name


def git_state() -> tuple[str, bool]:
    """(HEAD's commit, whether the tracked files differ from it)."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
    try:
        return git("rev-parse", "HEAD"), bool(git("status", "--porcelain",
                                                  "--untracked-files=no"))
    except (OSError, subprocess.CalledProcessError):
        return "unknown", True


def machine() -> dict:
    """Where a run is made: CPU model, cores, torch, Python."""
    import torch

    return {"cpu": cpu_model(), "cores": os.cpu_count(), "torch": torch.__version__,
            "python": platform.python_version()}


def downsample(n: int, points: int = CURVE_POINTS) -> np.ndarray:
    """At most `points` indices into n rows, evenly spread, the first and last kept."""
    if n <= points:
        return np.arange(n)
    return np.unique(np.linspace(0, n - 1, points).round().astype(int))


def _rounded(values: np.ndarray, digits: int) -> list:
    return [None if np.isnan(v) else round(float(v), digits) for v in values]


def training_curve(cols: dict[str, np.ndarray]) -> dict:
    """A run's curve (`bench.learning.curve`'s columns) downsampled: frames, env_steps,
    wall_s, mean (null until the window's episodes are in)."""
    keep = downsample(len(cols["mean"]))
    return {"frames": [int(x) for x in cols["frames"][keep]],
            "env_steps": [int(x) for x in cols["env_steps"][keep]],
            "wall_s": _rounded(cols["wall_time"][keep], 1),
            "mean": _rounded(cols["mean"][keep], 3)}


def eval_curve(run_dir: str) -> dict | None:
    """eval.csv's means: frames, env_steps, mean; None without evaluations."""
    rows = eval_rows(run_dir)
    if not rows:
        return None
    return {"frames": [int(r["frames"]) for r in rows],
            "env_steps": [int(r["env_steps"]) for r in rows],
            "mean": [round(float(r["mean"]), 3) for r in rows],
            "episodes_each": int(rows[-1]["episodes"])}


# learner.csv's columns a record keeps: what the policy lag and the gap between the
# acting and the learning policy were over training (docs/run-directory.md)
LEARNER_COLUMNS = ("policy_lag_mean", "kl")


def learner_curve(run_dir: str) -> dict | None:
    """learner.csv downsampled: updates, frames and `LEARNER_COLUMNS` (null where a
    row has none); None without learner.csv."""
    import csv

    path = os.path.join(run_dir, "learner.csv")
    if not os.path.exists(path):
        return None
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        return None

    def column(name: str) -> np.ndarray:
        return np.array([float(r[name]) if r.get(name) not in (None, "") else np.nan
                         for r in rows])

    keep = downsample(len(rows))
    return {"updates": [int(x) for x in column("updates")[keep]],
            "frames": [int(x) for x in column("frames")[keep]],
            **{name: _rounded(column(name)[keep], 5) for name in LEARNER_COLUMNS}}


def measure(run_dir: str, thresholds, window: int) -> dict:
    """What a finished run measured (see the module docstring)."""
    cols = curve(os.path.join(run_dir, "episodes.csv"), window)
    means = cols["mean"][~np.isnan(cols["mean"])]
    with open(os.path.join(run_dir, "summary.json")) as f:
        summary = json.load(f)
    return {
        "frames": summary["frames"], "env_steps": summary["env_steps"],
        "wall_s": summary["wall_time_s"], "fps": summary["fps_mean"],
        "episodes": len(cols["episode_return"]),
        "final_mean": round(float(means[-1]), 3) if len(means) else None,
        "best_mean": round(float(means.max()), 3) if len(means) else None,
        "reached": {str(t): first_reached(cols, t) for t in thresholds},
        "curve": training_curve(cols),
        "eval": eval_curve(run_dir),
        "updates": summary.get("updates"),
        "learner": learner_curve(run_dir),
    }


def make_record(row, seed: int, run_dir: str, command: str, tree: tuple[str, bool]) -> dict:
    """The record of `row`'s (a `bench.suite.Row`) run of `seed` in `run_dir`; of a run
    of several policies, policy 0's figures, and every policy's under "policies".
    `tree`: `git_state()` when the run started."""
    commit, dirty = tree
    with open(os.path.join(run_dir, "flags.json")) as f:
        flags = json.load(f)
    folders = sorted((d for d in os.listdir(run_dir) if d.startswith("policy_")),
                     key=lambda d: int(d.split("_")[1]))
    parts = [measure(os.path.join(run_dir, d), row.thresholds, row.window) for d in folders]
    return {"format": FORMAT, "row": row.name, "seed": seed, "commit": commit,
            "dirty": dirty, **machine(),
            "date": datetime.date.today().isoformat(),
            "command": command, "flags": flags, "window": row.window,
            "thresholds": list(row.thresholds),
            **(parts[0] if parts else measure(run_dir, row.thresholds, row.window)),
            **({"policies": parts} if parts else {})}


def with_section(text: str, page: str, begin: str, end: str, section: str) -> str:
    """`text` (of `page`) with `section` in place of what stands between its generated
    section's markers `begin` and `end`; ValueError if it lacks them."""
    if begin not in text or end not in text:
        raise ValueError(f"{page} lacks the markers {begin} and {end}")
    head, rest = text.split(begin, 1)
    return f"{head}{begin}\n{section}{end}{rest.split(end, 1)[1]}"


def record_path(row: str, seed: int) -> str:
    return os.path.join(RESULTS, row, f"seed{seed}.json")


def save_record(record: dict) -> str:
    """Write `record` to bench/results/<row>/seed<S>.json (replacing an older one)."""
    path = record_path(record["row"], record["seed"])
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".tmp", "w") as f:  # a key a line, its value on it (curves too)
        f.write("{\n" + ",\n".join(f" {json.dumps(k)}: {json.dumps(v)}"
                                    for k, v in record.items()) + "\n}\n")
    os.replace(path + ".tmp", path)
    return path


def save_side_by_side(record: dict) -> str:
    """Write a side-by-side `record` (ours against a peer, on one machine) to
    bench/results/<row>/<date>_<commit>.json; returns its path."""
    folder = os.path.join(RESULTS, record["row"])
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"{record['date']}_{record['commit'][:10]}.json")
    with open(path, "w") as f:
        json.dump(record, f, indent=1)
        f.write("\n")
    return path


def load_records(root: str = RESULTS) -> dict[str, list[dict]]:
    """Every record under `root`, by row name, in seed order."""
    out: dict[str, list[dict]] = {}
    if not os.path.isdir(root):
        return out
    for row in sorted(os.listdir(root)):
        folder = os.path.join(root, row)
        if not os.path.isdir(folder):
            continue
        records = []
        for name in os.listdir(folder):
            if name.endswith(".json"):
                with open(os.path.join(folder, name)) as f:
                    records.append(json.load(f))
        out[row] = sorted(records, key=lambda r: r.get("seed", 0))
    return out
