"""Running a sweep: one `main.py` subprocess per run, at most --parallel_runs at once.

`Sweep.run` skips runs already ok in sweep_summary.csv, continues interrupted runs from
their checkpoint (resume), starts the others (again), records each run as it starts and
finishes, and on SIGINT/SIGTERM stops the runs in flight (SIGINT, then SIGKILL after a
second signal or --stop_timeout). Used by multi_train.py; see its docstring.
"""

from __future__ import annotations

import ctypes
import dataclasses
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from sweeps.directory import (
    ATTEMPTS,
    LOGS,
    RESULT_COLUMNS,
    SUMMARY,
    Run,
    child_run_dir,
    classify,
    read_json,
    read_summary,
    run_dirs,
    write_summary,
)
from sweeps.spec import ROOT

MAIN = os.path.join(ROOT, "main.py")

ChangeArgs = Callable[[list[str], dict[str, Any]], list[str]]


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
                        else child_run_dir(folder))
            if previous and os.path.exists(os.path.join(previous, "checkpoint.pt")):
                flags_ = read_json(os.path.join(previous, "flags.json")) or {}
                if flags_.get("op_mode") in ("train", "train_w_load"):
                    resume_from = previous
        if resume_from is None and os.path.isdir(folder) and os.listdir(folder):
            self._set_aside(run, folder)  # starts again: the folder gets a fresh run dir
        before = run_dirs(folder)
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
        new = run_dirs(os.path.join(self.dir, run.name)) - child.dirs_before
        run_dir = max(new, key=os.path.getmtime) if new else child.resume_from
        run.status = classify(rc, child.signalled, run_dir)
        run.exit_code = rc
        run.wall_time_s = round(time.time() - child.started, 1)
        run.run_dir = os.path.relpath(run_dir, self.dir) if run_dir else ""
        summary = (read_json(os.path.join(run_dir, "summary.json")) if run_dir else None) or {}
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

