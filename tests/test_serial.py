"""`--serial` (workers/serial_pool.py): a run with a seed repeats bit for bit on the
same machine (its updates, episodes and evaluations), and a different seed gives a
different run. What every learning test
with a fixed threshold stands on (tests/test_learning.py)."""

from __future__ import annotations

import csv
import glob
import os

from tests.conftest import run_main

# columns that measure time, not learning
TIMING = {"fps", "wall_time", "batch_wait_s", "update_s"}


def _rows(results: str, name: str) -> list[dict]:
    (run,) = glob.glob(os.path.join(results, "*"))
    with open(os.path.join(run, name), newline="") as f:
        return [{k: v for k, v in r.items() if k not in TIMING} for r in csv.DictReader(f)]


def _run(results: str, seed: int, *flags: str) -> None:
    proc = run_main("--serial", "--learner_threads=1", f"--seed={seed}", "--worker_count=2",
                    "--environment_max_steps=3200",
                    "--eval_interval=1000", "--eval_episodes=3", f"--results_dir={results}", *flags)
    assert proc.returncode == 0, proc.stderr


def test_the_same_seed_repeats_bit_for_bit(tmp_path):
    # ppo on MinAtar: pixels, minibatch shuffling, input and return normalisation
    flags = ("--env=MinAtar/Breakout-v1", "--agent=ppo", "--batch_size=8",
             "--normalize_input=true", "--normalize_returns=true")
    for k in ("a", "b"):
        _run(str(tmp_path / k), 7, *flags)
    _run(str(tmp_path / "c"), 8, *flags)
    for name, rows in (("learner.csv", 10), ("episodes.csv", 10), ("eval.csv", 2)):
        a, b, c = (_rows(str(tmp_path / k), name) for k in "abc")
        assert len(a) > rows
        assert a == b, f"{name} differs between two runs with --seed=7"
        assert a != c, f"{name} is the same with --seed=8"
