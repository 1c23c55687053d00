"""Hyperparameter sweeps: many runs of `main.py`, one subprocess and one run directory each.

Multiple experiments used to be executed in sequence with a python loop in this file
and a `change_args` function; they still are, with a grid, a list and seeds in place of
the hand-written loop, and with `change_args` kept as the hook that turns one run's
values into `main.py`'s command line.

    python multi_train.py --grid='{"lr": [0.001, 0.002], "batch_size": [8, 16]}' \\
        --seeds=0,1 --sweep_dir=results/sweeps/my_sweep \\
        -- --env=CartPole-v1 --environment_max_steps=200000
    python multi_train.py --sweep_file=sweep.json --parallel_runs=2
    python multi_train.py --resume=results/sweeps/my_sweep      # or: the same command again
    python multi_train.py --sweep_file=sweep.json --dry_run     # print the runs, start nothing

The sweep
    grid   {"flag": [values, ...], ...}: every combination of the values.
    list   [{"flag": value, ...}, ...]: hand-picked settings, combined with every grid
           combination (grid x list), so the two must name different flags.
    seeds  0,1,2 (or a JSON list): every configuration once per seed (`--seed`).
    base   flags of main.py that every run gets. Flags that multi_train does not know
           (before or after `--`) are base flags too, after those of the sweep file.
A sweep file is a JSON object with any of these keys:
    {"grid": {...}, "list": [{...}, ...], "seeds": [0, 1], "base": ["--env=CartPole-v1"]}
and `--grid`, `--list`, `--seeds` on the command line replace its entries. Flag names go
without `--`; a value is a number, a string, a boolean, a JSON list or object (passed as
JSON text, for --replay_parameters), or null: the run does not set the flag (base flags or
main.py's "auto" default apply). A run's own values come after the base flags, so they win.
Runs go seed by seed (every configuration at the first seed, then the next seed), in the
grid's key order within a seed.

Everything is checked before anything starts: bad JSON, unknown keys, empty grids or lists,
flags main.py does not have, values its flag parsers refuse, duplicate runs, --results_dir
(set per run). Problems are printed together and the exit status is 2; nothing is written.
(Values that only main.py's run-time checks refuse, an unknown env for instance, make that
run fail with main.py's exit status 2; the sweep records it and goes on.)

The sweep directory (`--sweep_dir`; default results/sweeps/sweep_<hash of the sweep>)
    sweep.json            the manifest: base flags and the expanded runs, in order
    sweep_summary.csv     one row per run, rewritten atomically as runs start and finish:
                          run, the varied flags, seed, status, exit_code, frames, env_steps,
                          wall_time_s, mean_return_last100, best_mean_return_100, attempts,
                          run_dir (relative to the sweep directory)
    <run>/<env>_<ts>/     the run directory of main.py (`--results_dir=<sweep_dir>/<run>`);
                          <run> is named after the run's values: lr=0.001,batch_size=8,seed=0
    _logs/<run>.log       the run's stdout and stderr, every attempt
    _attempts/<run>/<k>/  earlier attempts of runs that were started again from scratch
Status: ok (exit 0, run complete), failed (non-zero exit), interrupted (stopped by the sweep
or by a signal; main.py saved a checkpoint), pending (not started yet) or running.

`--parallel_runs` (default 1) bounds how many runs go at once; each run still uses
--worker_count actors (default: the core count), so lower that when running several.
A failed run is recorded and the sweep goes on. Ctrl+C (SIGINT) or SIGTERM stops the
sweep: no new run starts, the runs in flight get SIGINT (main.py saves a checkpoint and
exits), and they are recorded as interrupted; a second Ctrl+C kills them at once (their
last periodic checkpoint stays), as does --stop_timeout. Running the same command again,
or --resume=<sweep_dir>, goes on: runs with status ok are skipped, interrupted runs with a
checkpoint continue from it (--op_mode=train_w_load --load_model_url=<its run directory>,
--results_dir as before; main.py continues in that run directory, or makes a second one
next to it, and run_dir names the one that finished), the others start again.
Exit status: 0 every run ok, 1 some run failed, 130 the sweep was stopped, 2 bad input.

Custom command lines: `change_args(base_args, run_params)` below builds main.py's flags
for one run. To change it, write a script that passes your own function:

    import sys, multi_train
    def my_args(base_args, run_params):
        argv = multi_train.change_args(base_args, run_params)
        if run_params.get("env", "").startswith("ALE/"):
            argv.append("--worker_count=2")
        return argv
    sys.exit(multi_train.main(sys.argv[1:], change_args=my_args))
"""

from __future__ import annotations

import argparse
import copy
import csv
import ctypes
import dataclasses
import fcntl
import hashlib
import io
import itertools
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

ROOT = os.path.dirname(os.path.abspath(__file__))
MAIN = os.path.join(ROOT, "main.py")
SPEC_KEYS = ("grid", "list", "seeds", "base")
MANIFEST = "sweep.json"
SUMMARY = "sweep_summary.csv"
LOGS = "_logs"
ATTEMPTS = "_attempts"
LOCK = ".lock"
RESULT_COLUMNS = ["seed", "status", "exit_code", "frames", "env_steps", "wall_time_s",
                  "mean_return_last100", "best_mean_return_100", "attempts", "run_dir"]
MAX_NAME = 100

ChangeArgs = Callable[[list[str], dict[str, Any]], list[str]]


# --- one run's command line ------------------------------------------------------------
def flag_text(value: Any) -> str:
    """A sweep value as main.py's flag text: true/false, numbers, strings, JSON for the rest."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float | str):
        return str(value)
    return json.dumps(value, separators=(",", ":"))


def change_args(base_args: list[str], run_params: dict[str, Any]) -> list[str]:
    """main.py's flags for one run: the base flags, then the run's values, which win.

    `base_args` are flags as typed (["--env=CartPole-v1", ...]); `run_params` maps flag
    names (no dashes) to values, `seed` included when the sweep has seeds; a value of None
    leaves the flag out. multi_train appends --results_dir itself (and, to continue an
    interrupted run, --op_mode=train_w_load --load_model_url=...).
    """
    return [*base_args,
            *(f"--{name}={flag_text(v)}" for name, v in run_params.items() if v is not None)]


# --- the sweep spec --------------------------------------------------------------------
def expand(grid: dict[str, list] | None, runs: list[dict] | None,
           seeds: list[int] | None) -> list[dict[str, Any]]:
    """Every run's values: grid combinations x list entries x seeds, seed outermost.

    With no grid (or no list, or no seeds) that factor is left out; with none of them
    there is one run with no values of its own.
    """
    grid = grid or {}
    combos = [dict(zip(grid, values, strict=True))
              for values in itertools.product(*grid.values())]
    entries = runs if runs else [{}]
    out = []
    for seed in seeds if seeds else [None]:
        for combo in combos:
            for entry in entries:
                params = {**combo, **entry}
                if seed is not None:
                    params["seed"] = seed
                out.append(params)
    return out


def run_name(params: dict[str, Any]) -> str:
    """A file-system-safe folder name from a run's values: lr=0.001,batch_size=8,seed=0."""
    if not params:
        return "base"
    text = ",".join(f"{k}={'auto' if v is None else flag_text(v)}" for k, v in params.items())
    name = re.sub(r"[^A-Za-z0-9._=,+-]+", "-", text)
    if len(name) > MAX_NAME:
        name = f"{name[:MAX_NAME - 9]}_{_digest(params)}"
    return name


def _digest(obj: Any, n: int = 8) -> str:
    return hashlib.sha1(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:n]


def _main_flags():
    """main.py's absl flags (defined by importing option_flags; nothing is parsed)."""
    if ROOT not in sys.path:
        sys.path.insert(0, ROOT)
    import option_flags

    return option_flags.FLAGS


def _check_flag(flag_defs, where: str, name: Any, problems: list[str]) -> str | None:
    if not isinstance(name, str) or not name.strip("-"):
        problems.append(f"{where}: flag names are strings, got {name!r}")
        return None
    name = name.lstrip("-")
    if name not in flag_defs:
        problems.append(f"{where}: main.py has no flag --{name} (see python main.py --help)")
        return None
    if name == "results_dir":
        problems.append(f"{where}: --results_dir is set per run by multi_train; "
                        "use --sweep_dir")
        return None
    return name


def _check_value(flag_defs, where: str, name: str, value: Any, problems: list[str]) -> None:
    if value is None:
        return
    text = flag_text(value)
    try:
        flag_defs[name].parser.parse(text)
    except Exception as e:  # absl raises ValueError or flags.Error subclasses
        problems.append(f"{where}: --{name}={text}: {e}")


def _parse_seeds(raw: Any, where: str, problems: list[str]) -> list[int] | None:
    if isinstance(raw, str):
        text = raw.strip()
        try:
            raw = json.loads(text) if text.startswith("[") else [
                int(s) for s in text.split(",") if s.strip()]
        except ValueError:
            problems.append(f"{where}: seeds are integers like 0,1,2 or [0, 1, 2], got {text!r}")
            return None
    if isinstance(raw, int) and not isinstance(raw, bool):
        raw = [raw]
    if (not isinstance(raw, list) or not raw
            or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in raw)):
        problems.append(f"{where}: seeds must be a non-empty list of integers >= 0, got {raw!r}")
        return None
    if len(set(raw)) != len(raw):
        problems.append(f"{where}: duplicate seeds in {raw}")
        return None
    return raw


def _parse_json(text: str, where: str, problems: list[str]) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        problems.append(f"{where}: not valid JSON ({e})")
        return None


def build_spec(file_spec: dict | None, grid: Any, runs_list: Any, seeds: Any,
               cli_base: list[str]) -> tuple[dict, list[str]]:
    """Check a sweep, given as a file's object and/or command-line pieces (None: absent).

    Returns ({"base": [...], "runs": [{"name", "params"}, ...], "varied": [...]}, problems).
    """
    problems: list[str] = []
    spec = dict(file_spec or {})
    if grid is not None:
        spec["grid"] = grid
    if runs_list is not None:
        spec["list"] = runs_list
    if seeds is not None:
        spec["seeds"] = seeds
    unknown = sorted(set(spec) - set(SPEC_KEYS))
    if unknown:
        problems.append(f"sweep: unknown keys {unknown}; a sweep has {list(SPEC_KEYS)}")
    flag_defs = _main_flags()

    g = spec.get("grid")
    clean_grid: dict[str, list] = {}
    if g is not None:
        if not isinstance(g, dict) or not g:
            problems.append(f"grid: must be a non-empty object of flag: [values], got {g!r}")
        else:
            for key, values in g.items():
                name = _check_flag(flag_defs, f"grid.{key}", key, problems)
                if not isinstance(values, list) or not values:
                    problems.append(f"grid.{key}: must be a non-empty list of values, "
                                    f"got {values!r}")
                    continue
                if name is None:
                    continue
                for v in values:
                    _check_value(flag_defs, f"grid.{key}", name, v, problems)
                texts = [None if v is None else flag_text(v) for v in values]
                if len(set(texts)) != len(texts):
                    problems.append(f"grid.{key}: duplicate values in {values!r}")
                if name in clean_grid:
                    problems.append(f"grid.{key}: --{name} is named twice")
                clean_grid[name] = values

    lst = spec.get("list")
    clean_list: list[dict] = []
    if lst is not None:
        if not isinstance(lst, list) or not lst:
            problems.append(f"list: must be a non-empty list of objects, got {lst!r}")
        else:
            for i, entry in enumerate(lst):
                if not isinstance(entry, dict):
                    problems.append(f"list[{i}]: must be an object of flag: value, got {entry!r}")
                    continue
                clean = {}
                for key, v in entry.items():
                    name = _check_flag(flag_defs, f"list[{i}].{key}", key, problems)
                    if name is None:
                        continue
                    _check_value(flag_defs, f"list[{i}].{key}", name, v, problems)
                    if name in clean_grid:
                        problems.append(f"list[{i}].{key}: --{name} is in the grid too; "
                                        "grid and list entries are combined, so they must "
                                        "name different flags")
                    clean[name] = v
                clean_list.append(clean)

    clean_seeds = None
    if spec.get("seeds") is not None:
        clean_seeds = _parse_seeds(spec["seeds"], "seeds", problems)
        if clean_seeds and ("seed" in clean_grid or any("seed" in e for e in clean_list)):
            problems.append("seeds: --seed is also in the grid or the list; give it once")

    base = spec.get("base", [])
    if not isinstance(base, list) or not all(isinstance(a, str) for a in base):
        problems.append(f"base: must be a list of flags like \"--env=CartPole-v1\", got {base!r}")
        base = []
    base = [*base, *cli_base]
    _check_base(flag_defs, base, problems)

    if problems:
        return {}, problems
    params_list = expand(clean_grid, clean_list, clean_seeds)
    seen: dict[str, dict] = {}
    for params in params_list:
        key = json.dumps({k: None if v is None else flag_text(v) for k, v in params.items()},
                         sort_keys=True)
        if key in seen:
            problems.append(f"sweep: the run {params} appears twice")
        seen[key] = params
    names = [run_name(p) for p in params_list]
    for i, name in enumerate(names):  # different values that read the same once made safe
        if names.count(name) > 1:
            names[i] = f"{name}_{_digest(params_list[i])}"
    varied = []
    for params in params_list:
        varied += [k for k in params if k != "seed" and k not in varied]
    runs = [{"name": n, "params": p} for n, p in zip(names, params_list, strict=True)]
    return {"base": base, "runs": runs, "varied": varied}, problems


def _check_base(flag_defs, base: list[str], problems: list[str]) -> None:
    """Base flags must parse as main.py's flags (in a copy: the global flags stay as
    they are)."""
    if not base:
        return
    flag_defs = copy.deepcopy(flag_defs)
    try:
        rest = flag_defs(["main.py", *base])
    except Exception as e:  # absl's flags.Error
        problems.append(f"base flags (for main.py): {e}")
        return
    if len(rest) > 1:
        problems.append(f"base flags (for main.py): unexpected arguments {rest[1:]}; "
                        "flags look like --name=value")
    if flag_defs["results_dir"].present:
        problems.append("base flags (for main.py): --results_dir is set per run by "
                        "multi_train; use --sweep_dir")


# --- the sweep directory ---------------------------------------------------------------
def _atomic_write(path: str, text: str) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w", newline="") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


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
    _atomic_write(os.path.join(sweep_dir, SUMMARY), buf.getvalue())


def read_summary(sweep_dir: str) -> dict[str, dict[str, str]]:
    path = os.path.join(sweep_dir, SUMMARY)
    if not os.path.exists(path):
        return {}
    with open(path, newline="") as f:
        return {row["run"]: row for row in csv.DictReader(f) if row.get("run")}


def _read_json(path: str) -> dict | None:
    try:
        with open(path) as f:
            data = json.load(f)
        return data if isinstance(data, dict) else None
    except (OSError, ValueError):
        return None


def _run_dirs(folder: str) -> set[str]:
    if not os.path.isdir(folder):
        return set()
    return {os.path.join(folder, d) for d in os.listdir(folder)
            if os.path.isdir(os.path.join(folder, d))}


def _child_run_dir(folder: str) -> str | None:
    """The run directory main.py made in `folder` (the newest, should there be several)."""
    dirs = _run_dirs(folder)
    return max(dirs, key=os.path.getmtime) if dirs else None


def classify(exit_code: int, signalled: bool, run_dir: str | None) -> str:
    """ok | failed | interrupted. main.py exits 0 after an interrupt too, so an exit 0
    is ok only when the run reached --environment_max_steps (or, without the files that
    tell, when nobody interrupted it)."""
    if exit_code != 0:
        return "interrupted" if signalled else "failed"
    if run_dir is None:
        return "interrupted" if signalled else "ok"
    flags_ = _read_json(os.path.join(run_dir, "flags.json")) or {}
    summary = _read_json(os.path.join(run_dir, "summary.json"))
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


# --- running ---------------------------------------------------------------------------
@dataclasses.dataclass
class Child:
    run: Run
    proc: subprocess.Popen
    started: float
    log_path: str
    log_offset: int
    dirs_before: set[str]  # run directories in the run's folder before it started
    resume_from: str | None
    signalled: bool = False


def _death_signal() -> Callable[[], None] | None:
    """For Popen's preexec_fn: the run gets SIGINT (and saves a checkpoint) should
    multi_train die without stopping it (Linux; elsewhere None)."""
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl  # loaded here, not after the fork
    except (OSError, AttributeError):
        return None

    def preexec() -> None:
        prctl(1, signal.SIGINT)  # PR_SET_PDEATHSIG

    return preexec


class Sweep:
    def __init__(self, sweep_dir: str, manifest: dict, parallel_runs: int,
                 stop_timeout: float, change_args_fn: ChangeArgs):
        self.dir = sweep_dir
        self.base = manifest["base"]
        self.varied = manifest["varied"]
        self.runs = [Run(i + 1, r["name"], r["params"]) for i, r in enumerate(manifest["runs"])]
        self.parallel = parallel_runs
        self.stop_timeout = stop_timeout
        self.change_args = change_args_fn
        self.children: list[Child] = []
        self.signals = 0
        self.stop_at: float | None = None
        self.killed = False
        self.lock_fd = -1
        self.preexec = _death_signal()

    # -- signals
    def _on_signal(self, signum, frame) -> None:  # only counts; the loop acts on it
        self.signals += 1

    def _handle_signals(self) -> None:
        if self.signals and self.stop_at is None:
            self.stop_at = time.time()
            print(f"\nstopping the sweep: no new runs; {len(self.children)} run(s) in flight "
                  "get SIGINT and save a checkpoint (Ctrl+C again kills them)", flush=True)
        if self.stop_at is not None:
            for child in self.children:
                if not child.signalled:
                    child.signalled = True
                    _send(child.proc.pid, signal.SIGINT, group=False)
            late = time.time() - self.stop_at > self.stop_timeout
            if (self.signals > 1 or late) and not self.killed and self.children:
                self.killed = True
                why = "second signal" if self.signals > 1 else f"--stop_timeout={self.stop_timeout}"
                print(f"{why}: killing {len(self.children)} run(s)", flush=True)
                for child in self.children:
                    _send(child.proc.pid, signal.SIGKILL, group=True)

    # -- one run
    def _start(self, run: Run) -> None:
        folder = os.path.join(self.dir, run.name)
        resume_from = None
        if run.status in ("interrupted", "running"):  # continue from its checkpoint, if any
            previous = (os.path.join(self.dir, run.run_dir) if run.run_dir
                        else _child_run_dir(folder))
            if previous and os.path.exists(os.path.join(previous, "checkpoint.pt")):
                flags_ = _read_json(os.path.join(previous, "flags.json")) or {}
                if flags_.get("op_mode") in ("train", "train_w_load"):
                    resume_from = previous
        if resume_from is None and os.path.isdir(folder) and os.listdir(folder):
            self._set_aside(run, folder)  # starts again: the folder gets a fresh run dir
        before = _run_dirs(folder)
        argv = list(self.change_args(list(self.base), dict(run.params)))
        if resume_from:
            argv += ["--op_mode=train_w_load", f"--load_model_url={resume_from}"]
        argv.append(f"--results_dir={folder}")
        run.attempts = int(run.attempts or 0) + 1
        run.status = "running"
        for field in ("exit_code", "frames", "env_steps", "wall_time_s",
                      "mean_return_last100", "best_mean_return_100", "run_dir"):
            setattr(run, field, "")
        log_path = os.path.join(self.dir, LOGS, f"{run.name}.log")
        with open(log_path, "a") as log:
            log.write(f"=== attempt {run.attempts}, {time.strftime('%Y-%m-%d %H:%M:%S')}: "
                      f"{' '.join([sys.executable, MAIN, *argv])}\n")
            offset = log.tell()
            proc = subprocess.Popen(
                [sys.executable, MAIN, *argv], stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True, pass_fds=(self.lock_fd,),
                preexec_fn=self.preexec, env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        self.children.append(Child(run, proc, time.time(), log_path, offset, before,
                                   resume_from))
        note = f" (attempt {run.attempts})" if run.attempts > 1 else ""
        if resume_from:
            note += f", resuming from {os.path.relpath(resume_from, self.dir)}"
        print(f"[{run.index}/{len(self.runs)}] {'start':<11} {run.name}{note}", flush=True)
        write_summary(self.dir, self.runs, self.varied)

    def _set_aside(self, run: Run, folder: str) -> None:
        """Moves an earlier attempt to _attempts/<run>/<k>/."""
        parent = os.path.join(self.dir, ATTEMPTS, run.name)
        os.makedirs(parent, exist_ok=True)
        k = 1
        while os.path.exists(os.path.join(parent, str(k))):
            k += 1
        dest = os.path.join(parent, str(k))
        os.rename(folder, dest)

    def _finish(self, child: Child) -> None:
        run, rc = child.run, child.proc.returncode
        # main.py makes a new run directory in the folder; a resumed run may instead go on
        # in the directory it resumes (both have been main.py's way)
        new = _run_dirs(os.path.join(self.dir, run.name)) - child.dirs_before
        run_dir = max(new, key=os.path.getmtime) if new else child.resume_from
        run.status = classify(rc, child.signalled, run_dir)
        run.exit_code = rc
        run.wall_time_s = round(time.time() - child.started, 1)
        run.run_dir = os.path.relpath(run_dir, self.dir) if run_dir else ""
        summary = (_read_json(os.path.join(run_dir, "summary.json")) if run_dir else None) or {}
        for field in ("frames", "env_steps", "mean_return_last100", "best_mean_return_100"):
            value = summary.get(field)
            setattr(run, field, "" if value is None else value)
        line = (f"[{run.index}/{len(self.runs)}] {run.status:<11} {run.name}: exit {rc}, "
                f"{run.wall_time_s} s")
        if run.env_steps != "":
            line += f", env steps {run.env_steps:,}"
        if run.mean_return_last100 != "":
            line += f", return(100) {run.mean_return_last100:.2f}"
        print(line, flush=True)
        if run.status == "failed":
            for line in _tail(child.log_path, child.log_offset, 6):
                print(f"    | {line}", flush=True)
        write_summary(self.dir, self.runs, self.varied)

    # -- the loop
    def run(self) -> int:
        previous = read_summary(self.dir)
        for run in self.runs:
            row = previous.get(run.name)
            if row is None:
                continue
            for field in RESULT_COLUMNS:
                if field != "seed" and field in row:
                    setattr(run, field, row[field])
            run.attempts = int(row.get("attempts") or 0)
        todo = []
        for run in self.runs:
            if run.status == "ok" and run.run_dir and os.path.isdir(
                    os.path.join(self.dir, run.run_dir)):
                continue
            todo.append(run)
        done = len(self.runs) - len(todo)
        print(f"sweep {self.dir}: {len(self.runs)} runs, {done} done already"
              f"{' (skipped)' if done else ''}, {len(todo)} to run, {self.parallel} at a time; "
              f"output of each run in {os.path.join(self.dir, LOGS)}/", flush=True)
        for run in self.runs:
            if run not in todo:
                print(f"[{run.index}/{len(self.runs)}] {'skip':<11} {run.name}: ok in "
                      f"{run.run_dir}", flush=True)
        write_summary(self.dir, self.runs, self.varied)

        old = {s: signal.signal(s, self._on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            while self.children or (todo and self.stop_at is None):
                self._handle_signals()
                while todo and self.stop_at is None and len(self.children) < self.parallel:
                    self._start(todo.pop(0))
                self._handle_signals()  # a signal during a start reaches the new run too
                time.sleep(0.1)
                for child in list(self.children):
                    if child.proc.poll() is not None:
                        self.children.remove(child)
                        self._finish(child)
        finally:
            for child in self.children:  # only on an error in this loop: do not orphan runs
                _send(child.proc.pid, signal.SIGINT, group=False)
            for s, handler in old.items():
                signal.signal(s, handler)
        self._print_table()
        counts = {s: sum(r.status == s for r in self.runs)
                  for s in ("ok", "failed", "interrupted", "pending")}
        print(", ".join(f"{n} {s}" for s, n in counts.items() if n) + f"; {SUMMARY} in {self.dir}")
        if self.stop_at is not None:
            print("the sweep was stopped; run the same command again (or multi_train.py "
                  f"--resume={self.dir}) to finish it")
            return 130
        return 0 if counts["ok"] == len(self.runs) else 1

    def _print_table(self) -> None:
        header = ["#", "run", "status", "exit", "env_steps", "return(100)", "best(100)", "wall_s"]
        rows = [header]
        for r in self.runs:
            rows.append([str(r.index), r.name, r.status, str(r.exit_code), str(r.env_steps),
                         _fmt(r.mean_return_last100), _fmt(r.best_mean_return_100),
                         str(r.wall_time_s)])
        widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
        print()
        for row in rows:
            print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())


def _fmt(value: Any) -> str:
    try:
        return f"{float(value):.2f}"
    except (TypeError, ValueError):
        return str(value)


def _tail(path: str, offset: int, n: int) -> list[str]:
    try:
        with open(path, errors="replace") as f:
            f.seek(offset)
            return [line.rstrip() for line in f.read().splitlines() if line.strip()][-n:]
    except OSError:
        return []


def _send(pid: int, sig: int, group: bool) -> None:
    try:
        if group:
            os.killpg(pid, sig)  # the run's own session: main.py and its actors
        else:
            os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


# --- command line ----------------------------------------------------------------------
def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="multi_train.py", allow_abbrev=False,
        description="Run a grid/list of main.py flag values x seeds, one subprocess per run. "
                    "Arguments it does not know, and all after --, are base flags for main.py.",
        epilog="See the docstring of multi_train.py and the Sweeps section of README.md.")
    p.add_argument("--grid", help='JSON object {"flag": [values, ...]}: every combination')
    p.add_argument("--list", dest="runs_list", metavar="LIST",
                   help='JSON list [{"flag": value, ...}, ...], combined with the grid')
    p.add_argument("--seeds", help="seeds, e.g. 0,1,2 or [0,1,2]: every configuration per seed")
    p.add_argument("--sweep_file", help='JSON file {"grid", "list", "seeds", "base"}')
    p.add_argument("--sweep_dir", help="where the runs go; default results/sweeps/sweep_<hash>")
    p.add_argument("--resume", metavar="SWEEP_DIR",
                   help="go on with the sweep in SWEEP_DIR (its sweep.json)")
    p.add_argument("--parallel_runs", type=int, default=1, help="runs at once (default 1)")
    p.add_argument("--stop_timeout", type=float, default=120.0,
                   help="seconds runs get to save a checkpoint after a stop before they are "
                        "killed (default 120)")
    p.add_argument("--dry_run", action="store_true", help="print the runs, start nothing")
    return p


def _error(problems: list[str]) -> int:
    print("error: bad sweep, nothing was started:", file=sys.stderr)
    for problem in problems:
        print(f"  {problem}", file=sys.stderr)
    return 2


def main(argv: list[str], change_args: ChangeArgs = change_args) -> int:
    """The command line (without the program name); returns the exit status."""
    command = ["multi_train.py", *argv]
    if "--" in argv:
        cut = argv.index("--")
        argv, after = argv[:cut], argv[cut + 1:]
    else:
        after = []
    args, unknown = _parser().parse_known_args(argv)
    cli_base = [*unknown, *after]
    problems: list[str] = []
    if args.parallel_runs < 1:
        problems.append(f"--parallel_runs: must be >= 1, got {args.parallel_runs}")
    if not args.stop_timeout > 0:
        problems.append(f"--stop_timeout: must be > 0, got {args.stop_timeout}")

    if args.resume:
        given = [f"--{n}" for n in ("grid", "runs_list", "seeds", "sweep_file", "sweep_dir")
                 if getattr(args, n) is not None]
        if given or cli_base:
            problems.append(f"--resume: the sweep comes from {MANIFEST}; drop "
                            f"{' '.join(given + cli_base)}")
        manifest = _read_json(os.path.join(args.resume, MANIFEST))
        if manifest is None or not {"base", "runs", "varied"} <= set(manifest):
            problems.append(f"--resume: {os.path.join(args.resume, MANIFEST)} is missing or "
                            "not a sweep manifest")
        if problems:
            return _error(problems)
        sweep_dir = args.resume
    else:
        file_spec = None
        if args.sweep_file is not None:
            try:
                with open(args.sweep_file) as f:
                    file_spec = _parse_json(f.read(), f"--sweep_file={args.sweep_file}",
                                            problems)
            except OSError as e:
                problems.append(f"--sweep_file: cannot read {args.sweep_file}: {e.strerror}")
            if file_spec is not None and not isinstance(file_spec, dict):
                problems.append(f"--sweep_file: must hold a JSON object with keys "
                                f"{list(SPEC_KEYS)}")
                file_spec = None
        grid = None if args.grid is None else _parse_json(args.grid, "--grid", problems)
        runs_list = (None if args.runs_list is None
                     else _parse_json(args.runs_list, "--list", problems))
        if problems:
            return _error(problems)
        if args.grid is None and args.runs_list is None and args.seeds is None and not (
                file_spec and set(file_spec) & {"grid", "list", "seeds"}):
            return _error(["sweep: give --grid, --list, --seeds or a --sweep_file with them"])
        spec, problems = build_spec(file_spec, grid, runs_list, args.seeds, cli_base)
        if problems:
            return _error(problems)
        manifest = {"format": 1, **spec}
        sweep_dir = args.sweep_dir or os.path.join(
            "results", "sweeps", f"sweep_{_digest([spec['base'], spec['runs']])}")
        existing_path = os.path.join(sweep_dir, MANIFEST)
        if os.path.exists(existing_path):
            existing = _read_json(existing_path) or {}
            if (existing.get("base"), existing.get("runs")) != (spec["base"], spec["runs"]):
                return _error([f"--sweep_dir: {sweep_dir} holds a different sweep; give a new "
                               f"--sweep_dir, or --resume={sweep_dir} to finish that one"])
        elif os.path.isdir(sweep_dir) and os.listdir(sweep_dir):
            return _error([f"--sweep_dir: {sweep_dir} exists and is not a sweep directory "
                           f"(no {MANIFEST})"])

    if args.dry_run:
        print(f"sweep {sweep_dir}: {len(manifest['runs'])} runs")
        for i, r in enumerate(manifest["runs"], 1):
            argv_ = change_args(list(manifest["base"]), dict(r["params"]))
            print(f"[{i}] {r['name']}: main.py {' '.join(argv_)} "
                  f"--results_dir={os.path.join(sweep_dir, r['name'])}")
        return 0

    os.makedirs(os.path.join(sweep_dir, LOGS), exist_ok=True)
    lock_fd = os.open(os.path.join(sweep_dir, LOCK), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(lock_fd)
        print(f"error: another multi_train.py is running the sweep in {sweep_dir} (or its "
              "runs are still stopping)", file=sys.stderr)
        return 2
    try:
        manifest_path = os.path.join(sweep_dir, MANIFEST)
        if not os.path.exists(manifest_path):
            _atomic_write(manifest_path, json.dumps(
                {**manifest, "created": time.strftime("%Y-%m-%d %H:%M:%S"),
                 "command": command}, indent=2))
        sweep = Sweep(sweep_dir, manifest, args.parallel_runs, args.stop_timeout, change_args)
        sweep.lock_fd = lock_fd
        return sweep.run()
    finally:
        os.close(lock_fd)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
