"""`--serial` (workers/serial_pool.py): a run with a seed repeats bit for bit on the
same machine (its updates, episodes and evaluations), and a different seed gives a
different run. What every learning test
with a fixed threshold stands on (tests/test_learning.py)."""

from __future__ import annotations

import csv
import glob
import os

import torch

from tests.pair_runs import run_inline
from workers.weights import SharedWeights

# columns that measure time, not learning
TIMING = {"fps", "wall_time", "batch_wait_s", "update_s", "actor_wait_s", "learner_wait_s"}


def _rows(results: str, name: str) -> list[dict]:
    (run,) = glob.glob(os.path.join(results, "*"))
    with open(os.path.join(run, name), newline="") as f:
        return [{k: v for k, v in r.items() if k not in TIMING} for r in csv.DictReader(f)]


def _run(results: str, seed: int, *flags: str) -> None:
    proc = run_inline("--serial", "--learner_threads=1", f"--seed={seed}", "--worker_count=2",
                    "--environment_max_steps=3200",
                    "--eval_interval=1000", "--eval_episodes=3", f"--results_dir={results}", *flags)
    assert proc.returncode == 0, proc.stderr


def test_the_same_seed_repeats_bit_for_bit(tmp_path):
    # ppo on MinAtar: pixels, minibatch shuffling, input and return normalisation
    flags = ("--env=MinAtar/Breakout-v1", "--agent=ppo", "--batch_size=8",
             "--normalize_input=true", "--normalize_returns=true",
             "--environment_max_steps=2400")
    for k in ("a", "b"):
        _run(str(tmp_path / k), 7, *flags)
    _run(str(tmp_path / "c"), 8, *flags, "--environment_max_steps=800")  # a shorter one
    for name, rows in (("learner.csv", 10), ("episodes.csv", 10), ("eval.csv", 2)):
        a, b, c = (_rows(str(tmp_path / k), name) for k in "abc")
        assert len(a) > rows and c
        assert a == b, f"{name} differs between two runs with --seed=7"
        assert a[:len(c)] != c, f"{name} starts the same with --seed=8"


def test_sac_repeats_bit_for_bit(tmp_path):
    # the replay's uniform draws, the transitions' rows, the policy's noise, the rate
    # limiter's schedule, the random actions before --learning_starts; a learner.csv
    # row per update
    flags = ("--env=Pendulum-v1", "--agent=sac", "--learning_starts=300", "--hidden_size=32",
             "--batch_size=32", "--environment_max_steps=600", "--eval_interval=300",
             "--learner_csv_interval=1")
    for k in ("a", "b"):
        _run(str(tmp_path / k), 7, *flags)
    for name, rows in (("learner.csv", 250), ("episodes.csv", 2), ("eval.csv", 2)):
        a, b = (_rows(str(tmp_path / k), name) for k in "ab")
        assert len(a) >= rows
        assert a == b, f"{name} differs between two runs with --seed=7"


def test_a_fixed_policy_lag_is_the_lag_the_learner_sees(tmp_path):
    # --serial_policy_lag=k: every batch was acted by weights k updates old (the
    # learner's own count), still the same run for the same seed
    runs = {"zero": 0, "lag_a": 2, "lag_b": 2}
    for name, k in runs.items():
        _run(str(tmp_path / name), 3, "--env=CartPole-v1", f"--serial_policy_lag={k}")
    zero, lag_a, lag_b = (_rows(str(tmp_path / name), "learner.csv") for name in runs)
    assert lag_a == lag_b
    # after the first k updates, the lag is k (and 0.05 more, as with no lag: the
    # first rollout of each round is acted before the round's update)
    shift = [float(b["policy_lag_mean"]) - float(a["policy_lag_mean"])
             for a, b in zip(zero[3:], lag_a[3:], strict=True)]
    assert len(shift) > 5 and all(abs(d - 2) < 1e-9 for d in shift), shift
    kl = [sorted(float(r["kl"]) for r in rows[3:]) for rows in (zero, lag_a)]
    assert kl[1][len(kl[1]) // 2] > 5 * kl[0][len(kl[0]) // 2], kl


def test_shared_weights_with_a_lag_offer_the_publication_lag_before():
    model = torch.nn.Linear(1, 1, bias=False)
    weights = SharedWeights(model, lag=2)
    reader = torch.nn.Linear(1, 1, bias=False)
    held = -1
    for version in range(5):
        with torch.no_grad():
            model.weight.fill_(float(version))
        weights.publish(model, version)
        held = weights.pull(reader, held)
        assert held == max(0, version - 2)
        assert reader.weight.item() == float(max(0, version - 2))
