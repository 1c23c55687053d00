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

The work is done in sweeps/: spec.py (checking and expanding the sweep, run names),
directory.py (the sweep directory, sweep_summary.csv) and runner.py (starting, watching
and stopping the runs, resume); sweep.json and sweep_summary.csv are written with
training/files.py's atomic_write_text; `python -m sweeps.plot <sweep_dir>` draws the
curves. This file is the command line.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import sys
import time
from typing import Any

from sweeps.directory import (
    ATTEMPTS,
    LOCK,
    LOGS,
    MANIFEST,
    RESULT_COLUMNS,
    SUMMARY,
    Run,
    classify,
    read_json,
    read_summary,
    write_summary,
)
from sweeps.runner import MAIN, ChangeArgs, Child, Sweep
from sweeps.spec import (
    MAX_NAME,
    ROOT,
    SPEC_KEYS,
    build_spec,
    digest,
    expand,
    flag_text,
    parse_json,
    run_name,
)
from training.files import atomic_write_text

__all__ = [
    "ATTEMPTS", "LOCK", "LOGS", "MAIN", "MANIFEST", "MAX_NAME", "RESULT_COLUMNS", "ROOT",
    "SPEC_KEYS", "SUMMARY", "ChangeArgs", "Child", "Run", "Sweep", "build_spec",
    "change_args", "classify", "expand", "flag_text", "main", "read_summary", "run_name",
    "write_summary",
]


def change_args(base_args: list[str], run_params: dict[str, Any]) -> list[str]:
    """main.py's flags for one run: the base flags, then the run's values, which win.

    `base_args` are flags as typed (["--env=CartPole-v1", ...]); `run_params` maps flag
    names (no dashes) to values, `seed` included when the sweep has seeds; a value of None
    leaves the flag out. multi_train appends --results_dir itself (and, to continue an
    interrupted run, --op_mode=train_w_load --load_model_url=...).
    """
    return [*base_args,
            *(f"--{name}={flag_text(v)}" for name, v in run_params.items() if v is not None)]


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
        manifest = read_json(os.path.join(args.resume, MANIFEST))
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
                    file_spec = parse_json(f.read(), f"--sweep_file={args.sweep_file}",
                                           problems)
            except OSError as e:
                problems.append(f"--sweep_file: cannot read {args.sweep_file}: {e.strerror}")
            if file_spec is not None and not isinstance(file_spec, dict):
                problems.append(f"--sweep_file: must hold a JSON object with keys "
                                f"{list(SPEC_KEYS)}")
                file_spec = None
        grid = None if args.grid is None else parse_json(args.grid, "--grid", problems)
        runs_list = (None if args.runs_list is None
                     else parse_json(args.runs_list, "--list", problems))
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
            "results", "sweeps", f"sweep_{digest([spec['base'], spec['runs']])}")
        existing_path = os.path.join(sweep_dir, MANIFEST)
        if os.path.exists(existing_path):
            existing = read_json(existing_path) or {}
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
            atomic_write_text(manifest_path, json.dumps(
                {**manifest, "created": time.strftime("%Y-%m-%d %H:%M:%S"),
                 "command": command}, indent=2))
        sweep = Sweep(sweep_dir, manifest, args.parallel_runs, args.stop_timeout, change_args)
        sweep.lock_fd = lock_fd
        return sweep.run()
    finally:
        os.close(lock_fd)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
