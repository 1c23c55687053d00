"""The run lifecycle with real subprocesses and real signals: a clean stop on the
first SIGINT / SIGTERM, an immediate exit on the second, resume, actor faults."""

from __future__ import annotations

import csv
import glob
import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest
import torch

from tests.conftest import ROOT
from training.checkpoint import load_checkpoint


def start_main(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, os.path.join(ROOT, "main.py"), *args], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def shm_entries() -> set[str]:
    return set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()


def wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def run_dir(results: str) -> str | None:
    runs = glob.glob(os.path.join(results, "*"))
    return runs[0] if runs else None


def learner_rows(results: str) -> int:
    d = run_dir(results)
    if not d or not os.path.exists(os.path.join(d, "learner.csv")):
        return 0
    with open(os.path.join(d, "learner.csv")) as f:
        return max(0, sum(1 for _ in f) - 1)


def stop_and_check(proc: subprocess.Popen, signals: list[int], results: str,
                   shm_before: set[str], timeout: float = 30.0) -> str:
    """Send `signals`, require exit within `timeout`, no child left, no shm leaked."""
    children = psutil.Process(proc.pid).children(recursive=True)
    t0 = time.time()
    for sig in signals:
        proc.send_signal(sig)
        time.sleep(0.3)
    out, _ = proc.communicate(timeout=timeout)
    elapsed = time.time() - t0
    assert elapsed < timeout, f"took {elapsed:.1f} s"
    gone, alive = psutil.wait_procs(children, timeout=5)
    assert not alive, f"orphan processes: {alive}"
    assert shm_entries() <= shm_before, f"leaked /dev/shm entries: {shm_entries() - shm_before}"
    return out


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_first_signal_mid_training_checkpoints_and_exits_0(results, sig):
    shm_before = shm_entries()
    proc = start_main("--env=PongNoFrameskip-v4", "--worker_count=2", "--envs_per_worker=4",
                      "--batch_size=8", f"--results_dir={results}", "--status_interval=1")
    wait_for(lambda: learner_rows(results) >= 2, 120, "two learner updates")
    out = stop_and_check(proc, [sig], results, shm_before)
    assert proc.returncode == 0, out
    d = run_dir(results)
    assert "checkpoint saved" in out and os.path.abspath(d) in out
    ckpt = load_checkpoint(d)
    summary = json.load(open(os.path.join(d, "summary.json")))
    assert ckpt["counters"]["updates"] == summary["updates"] >= 2
    assert ckpt["counters"]["env_steps"] == summary["env_steps"]


def test_signal_during_startup_still_leaves_a_loadable_checkpoint(results):
    shm_before = shm_entries()
    proc = start_main("--env=PongNoFrameskip-v4", "--worker_count=2", "--envs_per_worker=4",
                      f"--results_dir={results}")
    wait_for(lambda: run_dir(results) is not None, 60, "the run directory")
    out = stop_and_check(proc, [signal.SIGINT], results, shm_before)
    assert proc.returncode == 0, out
    assert load_checkpoint(run_dir(results))["counters"]["updates"] >= 0


def test_second_signal_exits_at_once_without_damaging_checkpoints(results):
    shm_before = shm_entries()
    proc = start_main("--env=CartPole-v1", "--worker_count=2", "--save_model_period=1",
                      "--keep_checkpoints=2", f"--results_dir={results}")
    wait_for(lambda: learner_rows(results) >= 20, 60, "20 updates")
    stop_and_check(proc, [signal.SIGINT, signal.SIGINT], results, shm_before, timeout=10)
    assert proc.returncode in (0, 128 + signal.SIGINT)
    d = run_dir(results)
    ckpt = load_checkpoint(d)  # checkpoint.pt is complete
    assert ckpt["counters"]["updates"] >= 1
    for path in glob.glob(os.path.join(d, "checkpoint_*.pt")):
        load_checkpoint(path)
    assert len(glob.glob(os.path.join(d, "checkpoint_*.pt"))) <= 2


def test_resume_continues_counters_schedule_and_files(results):
    proc = start_main("--env=CartPole-v1", "--worker_count=1", "--environment_max_steps=60000",
                      "--lr=0.003", "--hidden_size=32", f"--results_dir={results}")
    wait_for(lambda: learner_rows(results) >= 30, 60, "30 updates")
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=30)
    d = run_dir(results)
    saved = load_checkpoint(d)["counters"]
    rows_before = list(csv.DictReader(open(os.path.join(d, "learner.csv"))))
    assert len(rows_before) == saved["updates"] < 60000 // (16 * 20)

    resumed = subprocess.run(
        [sys.executable, "main.py", "--op_mode=train_w_load", f"--load_model_url={d}"],
        cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert run_dir(results) == d and len(glob.glob(os.path.join(results, "*"))) == 1
    rows = list(csv.DictReader(open(os.path.join(d, "learner.csv"))))
    first = rows[saved["updates"]]
    assert int(first["updates"]) == saved["updates"] + 1
    assert int(first["env_steps"]) >= saved["env_steps"]
    # flags saved in the checkpoint were used (lr 0.003, not the default 0.002) and the
    # schedule went on: lr = 0.003 * (1 - env_steps / 60000)
    assert float(first["lr"]) == pytest.approx(0.003 * (1 - int(first["env_steps"]) / 60000),
                                               rel=1e-4)
    final = json.load(open(os.path.join(d, "summary.json")))
    assert final["env_steps"] >= 60000 and final["updates"] == len(rows)
    episodes = list(csv.DictReader(open(os.path.join(d, "episodes.csv"))))
    assert len(episodes) == final["episodes"]
    assert torch.load(os.path.join(d, "checkpoint.pt"), weights_only=False)["config"]["lr"] == 0.003


def test_killed_actor_is_replaced_and_the_run_completes(results):
    proc = start_main("--env=CartPole-v1", "--worker_count=2", "--environment_max_steps=150000",
                      f"--results_dir={results}")
    wait_for(lambda: learner_rows(results) >= 5, 60, "5 updates")
    actors = [c for c in psutil.Process(proc.pid).children()
              if "spawn_main" in " ".join(c.cmdline())]
    assert len(actors) >= 2
    actors[0].kill()
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out
    assert "killed by SIGKILL" in out and "restarting it (1/3)" in out
    summary = json.load(open(os.path.join(run_dir(results), "summary.json")))
    assert summary["env_steps"] >= 150000 and summary["actor_restarts"] == 1
