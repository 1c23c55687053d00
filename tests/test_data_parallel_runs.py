"""`--learner_count=2` through main.py: the serial mode learns CartPole (it repeats
bit for bit, and as ranks torchrun started: tests/test_torchrun.py); a SIGINT stops
both learners after the same update with one checkpoint, which resumes with one
learner; a killed rank stops the run with status 1 and a checkpoint that resumes; no
process or shared memory is left behind."""

from __future__ import annotations

import json
import os
import re
import signal
import time

import psutil

from tests.conftest import run_main
from tests.test_learning import solved_run
from tests.test_lifecycle import (
    learner_rows,
    run_dir,
    run_log,
    shm_entries,
    start_main,
    stop_and_check,
    wait_for,
)
from training.checkpoint import load_checkpoint

TWO = ("--env=CartPole-v1", "--learner_count=2", "--worker_count=2", "--eval_interval=0",
       "--status_interval=1", "--environment_max_steps=5000000")


def test_two_serial_learners_reach_475_on_cartpole(results):
    # each rank's batch half the default, so the group's batch is the default's 16
    solved = solved_run(results, "CartPole-v1 2 learners", 500_000, "--env=CartPole-v1",
                        "--learner_count=2", "--worker_count=2", "--batch_size=8")
    assert solved is not None and solved[0] <= 500_000


def _resume(results: str, *flags: str) -> dict:
    """Resume the run with one learner (actors inline: a short run's start-up is its
    cost) for 3,000 more env steps; its summary."""
    d = run_dir(results)
    steps = load_checkpoint(d)["counters"]["env_steps"]
    proc = run_main("--op_mode=train_w_load", f"--load_model_url={d}", "--learner_count=1",
                    "--serial", f"--environment_max_steps={steps + 3000}", *flags, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.load(open(os.path.join(d, "summary.json")))


def test_sigint_stops_both_learners_and_the_run_resumes_with_one(results):
    shm_before = shm_entries()
    proc = start_main(*TWO, "--serial", f"--results_dir={results}")  # the kill test has actors
    wait_for(lambda: learner_rows(results) >= 3, 120, "three learner updates", proc)
    out = stop_and_check(proc, [signal.SIGINT], results, shm_before)
    assert proc.returncode == 0, out
    ckpt = load_checkpoint(run_dir(results))
    assert len(ckpt["policies"][0]["rank_replays"]) == 1  # rank 1's replays, next to rank 0's
    assert "the largest parameter difference between the 2 learners is 0" in run_log(results)
    summary = _resume(results)
    assert summary["updates"] > ckpt["counters"]["updates"]
    assert "those of ranks 1..1 have no learner now and are dropped" in run_log(results)


def test_a_killed_rank_stops_the_run_with_status_1_and_a_checkpoint(results):
    shm_before = shm_entries()
    proc = start_main(*TWO, f"--results_dir={results}")
    wait_for(lambda: learner_rows(results) >= 3, 120, "three learner updates", proc)
    (pid,) = re.findall(r"learner rank 1 started \(pid (\d+)\)", run_log(results))
    children = psutil.Process(proc.pid).children(recursive=True)
    t0 = time.time()
    os.kill(int(pid), signal.SIGKILL)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 1, out
    assert time.time() - t0 < 30, "the run took more than 30 s to stop"
    _, alive = psutil.wait_procs(children, timeout=5)
    assert not alive, f"orphan processes: {alive}"
    assert shm_entries() <= shm_before
    assert "a collective with the other learners failed" in out
    ckpt = load_checkpoint(run_dir(results))
    assert ckpt["counters"]["updates"] >= 3
    assert _resume(results)["updates"] > ckpt["counters"]["updates"]
