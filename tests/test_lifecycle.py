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

from tests.conftest import ROOT, start_main
from training.checkpoint import load_checkpoint


def shm_entries() -> set[str]:
    """/dev/shm's entries, less multiprocessing's named semaphores (`sem.mp-*`) and
    ViZDoom's games' (`ViZDoom*`): a run of the platform on another env makes none (its
    processes talk through pipes and shared tensors), but a test running beside it on
    the other pytest worker does (bench.throughput's result queues, a ViZDoom run's
    games while they play), and they would be counted as this run's leak."""
    if not os.path.isdir("/dev/shm"):
        return set()
    return {e for e in os.listdir("/dev/shm") if not e.startswith(("sem.mp-", "ViZDoom"))}


def wait_for(predicate, timeout: float, what: str, proc: subprocess.Popen) -> None:
    """Poll `predicate` until it holds. `timeout` is a bound for a real hang only; a
    child `proc` that exits first fails the wait at once, with its output."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return
        if proc.poll() is not None:
            out = proc.stdout.read() if proc.stdout else ""
            raise AssertionError(f"the run exited with {proc.returncode} before {what}:\n"
                                 f"{out[-3000:]}")
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def run_dir(results: str) -> str | None:
    runs = glob.glob(os.path.join(results, "*"))
    return runs[0] if runs else None


def run_log(results: str) -> str:
    d = run_dir(results)
    path = d and os.path.join(d, "run.log")
    return open(path).read() if path and os.path.exists(path) else ""


def learner_rows(results: str) -> int:
    d = run_dir(results)
    if not d or not os.path.exists(os.path.join(d, "learner.csv")):
        return 0
    with open(os.path.join(d, "learner.csv")) as f:
        return max(0, sum(1 for _ in f) - 1)


def stop_and_check(proc: subprocess.Popen, signals: list[int], results: str,
                   shm_before: set[str], timeout: float = 30.0, gap: float = 0.3) -> str:
    """Send `signals`, `gap` seconds apart, require exit within `timeout`, no child
    left, no shm leaked."""
    children = psutil.Process(proc.pid).children(recursive=True)
    t0 = time.time()
    for sig in signals:
        proc.send_signal(sig)
        time.sleep(gap)
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
    # rollouts of 20 steps: two updates of the default agent within seconds
    proc = start_main("--env=PongNoFrameskip-v4", "--eval_interval=0",
                      "--worker_count=2", "--envs_per_worker=4", "--r_f_steps=20",
                      "--batch_size=8", f"--results_dir={results}", "--status_interval=1")
    wait_for(lambda: learner_rows(results) >= 2, 120, "two learner updates", proc)
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
    proc = start_main("--env=PongNoFrameskip-v4", "--eval_interval=0",
                      "--worker_count=2", "--envs_per_worker=4",
                      f"--results_dir={results}")
    wait_for(lambda: run_dir(results) is not None, 60, "the run directory", proc)
    out = stop_and_check(proc, [signal.SIGINT], results, shm_before)
    assert proc.returncode == 0, out
    d = run_dir(results)
    counters = load_checkpoint(d)["counters"]
    summary = json.load(open(os.path.join(d, "summary.json")))
    assert (counters["updates"], counters["env_steps"]) == (summary["updates"],
                                                            summary["env_steps"])


def test_second_signal_exits_at_once_without_damaging_checkpoints(results):
    shm_before = shm_entries()
    proc = start_main("--env=CartPole-v1", "--worker_count=2", "--save_model_period=1",
                      "--keep_checkpoints=2", f"--results_dir={results}")
    wait_for(lambda: learner_rows(results) >= 20, 60, "20 updates", proc)
    # the second signal 20 ms after the first, while the stop is under way; a stop that
    # finished first leaves the interpreter's exit, where SIGINT kills (-SIGINT)
    stop_and_check(proc, [signal.SIGINT, signal.SIGINT], results, shm_before, timeout=10,
                   gap=0.02)
    assert proc.returncode in (0, 128 + signal.SIGINT, -signal.SIGINT)
    d = run_dir(results)
    ckpt = load_checkpoint(d)  # checkpoint.pt is complete
    assert ckpt["counters"]["updates"] >= 1
    for path in glob.glob(os.path.join(d, "checkpoint_*.pt")):
        load_checkpoint(path)
    # an exit between a new checkpoint's rename and the pruning of the oldest leaves one
    # more than --keep_checkpoints (as kill -9 would); the run's next save prunes it
    assert len(glob.glob(os.path.join(d, "checkpoint_*.pt"))) <= 2 + 1


def test_resume_continues_counters_schedule_and_files(results):
    proc = start_main("--env=CartPole-v1", "--worker_count=1", "--environment_max_steps=30000",
                      "--lr=0.003", "--hidden_size=32", f"--results_dir={results}")
    wait_for(lambda: learner_rows(results) >= 30, 60, "30 updates", proc)
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=30)
    d = run_dir(results)
    saved = load_checkpoint(d)["counters"]
    rows_before = list(csv.DictReader(open(os.path.join(d, "learner.csv"))))
    assert len(rows_before) == saved["updates"] < 30000 // (16 * 20)

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
    # schedule went on: lr = 0.003 * (1 - env_steps / 30000)
    assert float(first["lr"]) == pytest.approx(0.003 * (1 - int(first["env_steps"]) / 30000),
                                               rel=1e-4)
    final = json.load(open(os.path.join(d, "summary.json")))
    assert final["env_steps"] >= 30000 and final["updates"] == len(rows)
    episodes = list(csv.DictReader(open(os.path.join(d, "episodes.csv"))))
    assert len(episodes) == final["episodes"]
    assert torch.load(os.path.join(d, "checkpoint.pt"), weights_only=False)["config"]["lr"] == 0.003


def test_killed_actor_is_replaced_and_the_run_completes(results):
    proc = start_main("--env=CartPole-v1", "--worker_count=2", "--environment_max_steps=10000000",
                      "--eval_interval=0", f"--results_dir={results}")
    wait_for(lambda: learner_rows(results) >= 5, 60, "5 updates", proc)
    servers = [c for c in psutil.Process(proc.pid).children()
               if "forkserver" in " ".join(c.cmdline())]
    actors = [a for server in servers for a in server.children()]  # forked by the server
    assert len(actors) >= 2
    actors[0].kill()
    # conditions, not a budget: the restart is logged, then the run trains on
    wait_for(lambda: "restarting it (1/3)" in run_log(results), 120, "the restart", proc)
    after = learner_rows(results) + 5
    wait_for(lambda: learner_rows(results) >= after, 120, "updates after the restart", proc)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    assert "killed by SIGKILL" in out
    summary = json.load(open(os.path.join(run_dir(results), "summary.json")))
    assert summary["actor_restarts"] == 1


def test_signal_during_a_checkpoint_write(results):
    """SIGINT while a checkpoint_*.pt.tmp is being written: that save completes, the
    run stops cleanly and every checkpoint is loadable."""
    shm_before = shm_entries()
    proc = start_main("--env=PongNoFrameskip-v4", "--eval_interval=0",
                      "--worker_count=2", "--envs_per_worker=2",
                      "--batch_size=4", "--r_f_steps=5", "--save_model_period=1",
                      f"--results_dir={results}")
    deadline = time.time() + 120
    while time.time() < deadline:
        d = run_dir(results)
        if d and glob.glob(os.path.join(d, "checkpoint_*.pt.tmp")):
            break
        time.sleep(0.001)
    else:
        raise AssertionError("never saw a checkpoint being written")
    out = stop_and_check(proc, [signal.SIGINT], results, shm_before)
    assert proc.returncode == 0, out
    d = run_dir(results)
    assert not glob.glob(os.path.join(d, "*.tmp"))
    for path in glob.glob(os.path.join(d, "checkpoint*.pt")):
        load_checkpoint(path)


def test_resumed_learner_takes_the_same_step_as_the_uninterrupted_one(tmp_path):
    """What resume restores exactly: parameters, optimizer moments, schedule position,
    counters and RNG. Given the same batch, a learner restored from a checkpoint takes
    bit for bit the step the original would have taken. (The batches themselves differ
    after a resume: env states and rollouts in flight are not checkpointed.)"""
    from option_flags import default_values
    from training.config import make_config
    from training.factory import build_driver
    from training.plan import make_plan
    from training.run_dir import RunDir

    cfg, errors = make_config(default_values(env="CartPole-v1", environment_max_steps=10_000,
                                             worker_count=1, hidden_size=16))
    assert not errors

    def batch(seed):
        g = torch.Generator().manual_seed(seed)
        t1, b = cfg.r_f_steps + 1, cfg.batch_size
        return {"obs": torch.randn(t1, b, 4, generator=g),
                "action": torch.randint(0, 2, (t1, b), generator=g),
                "logits": torch.randn(t1, b, 2, generator=g), "value": torch.zeros(t1, b),
                "reward": torch.ones(t1, b), "done": torch.rand(t1, b, generator=g) < 0.05,
                "truncated": torch.zeros(t1, b, dtype=torch.bool),
                "bootstrap_value": torch.zeros(t1, b),
                "version": torch.zeros(t1, b, dtype=torch.int64)}

    plan = make_plan(cfg)
    original = build_driver(cfg, plan, RunDir(str(tmp_path), cfg.env, cfg.to_dict(),
                                              echo=False))
    for k in range(3):
        original.counters.env_steps += 640
        original._update(original.learners[0], batch(k))
    restored = build_driver(cfg, plan, RunDir(str(tmp_path / "b"), cfg.env, cfg.to_dict(),
                                              echo=False),
                            checkpoint=load_checkpoint(original.save()))
    assert restored.counters.resumes == original.counters.resumes + 1
    restored.counters.resumes = original.counters.resumes  # the one difference
    assert restored.counters == original.counters
    for driver in (original, restored):
        driver.counters.env_steps += 640
        driver._update(driver.learners[0], batch(99))
    assert original.report.last_stats == restored.report.last_stats
    for p, q in zip(original.learners[0].agent.model.parameters(),
                    restored.learners[0].agent.model.parameters(), strict=True):
        assert torch.equal(p, q)


def test_kill_9_right_after_a_checkpoint_then_resume_with_another_replay(results):
    """The files hold every row the newest checkpoint counts even after a kill -9; a
    resume that grows a replay's capacity starts that replay empty and goes on; the
    resumed run's CSVs have no gap and no repeat, and TensorBoard events written after
    the checkpoint are cut."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    def mix(capacity):
        return ('--replay_parameters=[{"type": "queue", "capacity": 1, "sample_ratio": 0.5}, '
                f'{{"type": "standard", "capacity": {capacity}, "sample_ratio": 0.5}}]')

    def newest(d):
        return max([int(p[-12:-3]) for p in glob.glob(os.path.join(d, "checkpoint_*.pt"))],
                   default=-1)

    proc = start_main("--env=CartPole-v1", "--worker_count=1", "--environment_max_steps=20000",
                      "--save_model_period=4", "--status_interval=1000", mix(200),
                      f"--results_dir={results}")
    wait_for(lambda: run_dir(results) and newest(run_dir(results)) >= 8, 90, "a checkpoint",
             proc)
    d = run_dir(results)
    seen = newest(d)
    wait_for(lambda: newest(d) > seen, 60, "the next checkpoint", proc)
    children = psutil.Process(proc.pid).children(recursive=True)
    proc.kill()
    proc.communicate(timeout=30)
    _, alive = psutil.wait_procs(children, timeout=10)  # they die with it
    assert not alive, f"left running after kill -9 of the main process: {alive}"
    saved = load_checkpoint(d)["counters"]
    for name, counted in (("episodes.csv", saved["episodes"]), ("learner.csv", saved["updates"])):
        rows = list(csv.DictReader(open(os.path.join(d, name))))
        assert len(rows) >= counted > 0, name

    resumed = subprocess.run(
        [sys.executable, "main.py", "--op_mode=train_w_load", f"--load_model_url={d}",
         mix(400)], cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "resume: replay 1 (standard, capacity 400) no saved replay" in resumed.stdout
    updates = [int(r["updates"]) for r in csv.DictReader(open(os.path.join(d, "learner.csv")))]
    summary = json.load(open(os.path.join(d, "summary.json")))
    assert updates == list(range(1, summary["updates"] + 1))
    episodes = list(csv.DictReader(open(os.path.join(d, "episodes.csv"))))
    assert len(episodes) == summary["episodes"]
    first, *later = sorted(glob.glob(os.path.join(d, "events.out.tfevents.*")))
    assert later, "the resumed run writes its own events file"
    steps = [e.step for e in EventFileLoader(first).Load() if e.summary.value]
    assert steps and max(steps) <= saved["env_steps"]
