"""The sweep directory: sweep_summary.csv, the manifest's file names, and how a run ended.

    sweep.json            the manifest: base flags and the expanded runs, in order
    sweep_summary.csv     one row per run (`Run.row`), rewritten atomically
    <run>/<env>_<ts>/     main.py's run directory for the run
    _logs/<run>.log       the run's stdout and stderr, every attempt
    _attempts/<run>/<k>/  earlier attempts of runs that were started again from scratch
`classify` reads a finished run's directory to tell ok from interrupted; `child_run_dir`
finds the run directory main.py made in a run's folder. Used by sweeps/runner.py,
sweeps/plot.py and multi_train.py.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import os
from typing import Any

from sweeps.spec import flag_text
from training.files import atomic_write_text

MANIFEST = "sweep.json"
SUMMARY = "sweep_summary.csv"
LOGS = "_logs"
ATTEMPTS = "_attempts"
LOCK = ".lock"
RESULT_COLUMNS = ["seed", "status", "exit_code", "frames", "env_steps", "wall_time_s",
                  "mean_return_last100", "best_mean_return_100", "attempts", "run_dir"]


@dataclasses.dataclass
class Run:
    index: int
    name: str
    params: dict[str, Any]
    status: str = "pending"
    exit_code: Any = ""
    frames: Any = ""
    env_steps: Any = ""
    wall_time_s: Any = ""
    mean_return_last100: Any = ""
    best_mean_return_100: Any = ""
    attempts: int = 0
    run_dir: str = ""  # relative to the sweep directory

    def row(self, varied: list[str]) -> dict[str, Any]:
        values = {k: ("" if self.params.get(k) is None else flag_text(self.params[k]))
                  for k in varied}
        seed = self.params.get("seed")
        return {"run": self.name, **values, "seed": "" if seed is None else seed,
                **{c: getattr(self, c) for c in RESULT_COLUMNS if c != "seed"}}


def write_summary(sweep_dir: str, runs: list[Run], varied: list[str]) -> None:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, ["run", *varied, *RESULT_COLUMNS])
    writer.writeheader()
    for run in runs:
        writer.writerow(run.row(varied))
    atomic_write_text(os.path.join(sweep_dir, SUMMARY), buf.getvalue())


def read_summary(sweep_dir: str) -> dict[str, dict[str, str]]:
    path = os.path.join(sweep_dir, SUMMARY)
    if not os.path.exists(path):
        return {}
    with open(path, newline="") as f:
        return {row["run"]: row for row in csv.DictReader(f) if row.get("run")}


def read_json(path: str) -> dict | None:
    """A JSON file's object; None when it is missing, unreadable or not an object."""
    try:
        with open(path) as f:
            data = json.load(f)
        return data if isinstance(data, dict) else None
    except (OSError, ValueError):
        return None


def run_dirs(folder: str) -> set[str]:
    """The directories in `folder` (none when it does not exist)."""
    if not os.path.isdir(folder):
        return set()
    return {os.path.join(folder, d) for d in os.listdir(folder)
            if os.path.isdir(os.path.join(folder, d))}


def child_run_dir(folder: str) -> str | None:
    """The run directory main.py made in `folder` (the newest, should there be several)."""
    dirs = run_dirs(folder)
    return max(dirs, key=os.path.getmtime) if dirs else None


def classify(exit_code: int, signalled: bool, run_dir: str | None) -> str:
    """ok | failed | interrupted. main.py exits 0 after an interrupt too, so an exit 0
    is ok only when the run reached --environment_max_steps (or, without the files that
    tell, when nobody interrupted it)."""
    if exit_code != 0:
        return "interrupted" if signalled else "failed"
    if run_dir is None:
        return "interrupted" if signalled else "ok"
    flags_ = read_json(os.path.join(run_dir, "flags.json")) or {}
    summary = read_json(os.path.join(run_dir, "summary.json"))
    if flags_.get("op_mode") in ("train", "train_w_load") and summary is not None:
        target = flags_.get("environment_max_steps")
        done = summary.get("env_steps")
        if isinstance(target, int) and isinstance(done, int):
            return "ok" if done >= target else "interrupted"
    try:
        with open(os.path.join(run_dir, "run.log")) as f:
            text = f.read()
        interrupted_in_log = "interrupted" in text or "stop requested" in text
    except OSError:
        interrupted_in_log = False
    return "interrupted" if signalled or interrupted_in_log else "ok"

