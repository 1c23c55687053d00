"""Watching a run: system and pipeline metrics, TensorBoard event files from a real
CartPole run, and the PNG curves of sweeps.plot for a run and a sweep directory."""

from __future__ import annotations

import csv
import glob
import os
import subprocess
import sys
import time

import pytest
import torch

from sweeps.directory import RESULT_COLUMNS
from tests.conftest import ROOT, run_main
from training import metrics
from training.run_dir import LEARNER_COLUMNS

NEW_COLUMNS = ["policy_lag_mean", "policy_lag_max", "batch_wait_s", "update_s", "free_slots"]
DIAGNOSTIC_COLUMNS = ["kl", "adv_mean", "adv_std", "vs_mean", "value_mean", "explained_variance",
                      "step_over_lr"]


def test_system_metrics_of_this_process_are_sane():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        mon = metrics.SystemMonitor()
        mon.sample(os.getpid(), [child.pid, None])
        sum(i * i for i in range(300_000))  # some CPU for the learner's share
        time.sleep(0.05)
        m = mon.sample(os.getpid(), [child.pid, None])
    finally:
        child.kill()
        child.wait()
    assert 0 <= m["system/learner_cpu_percent"] <= 100 * os.cpu_count() + 1
    assert m["system/learner_cpu_percent"] > 0
    assert 10 < m["system/learner_rss_mib"] < 100_000
    assert m["system/learner_open_files"] >= 0 and m["system/learner_fds"] >= 3
    assert m["system/actor0_rss_mib"] > 1 and m["system/actor0_cpu_percent"] >= 0
    assert m["system/actors_rss_mib"] == m["system/actor0_rss_mib"]
    assert "system/actor1_rss_mib" not in m
    if os.path.isdir("/dev/shm"):
        assert m["system/shm_used_mib"] >= 0 and 0 <= m["system/shm_used_fraction"] <= 1
    assert ("system/gpu_mem_allocated_mib" in m) == torch.cuda.is_available()
    # a pid that is gone is left out, not an error
    assert "system/actor0_rss_mib" not in mon.sample(os.getpid(), [child.pid])


def test_pipeline_stats_lag_and_status_pieces():
    version = torch.tensor([[3, 5], [4, 5], [9, 9]])  # [T+1, B]; the last row is not used
    assert metrics.policy_lag(version, 6) == pytest.approx((1.75, 3.0))
    p = metrics.PipelineStats()
    p.add_update(0.1, 0.2, 1.0, 2.0, {"policy_loss": 1.0, "lr": 0.5})
    p.add_update(0.3, 0.4, 3.0, 5.0, {"policy_loss": 3.0, "lr": 0.5})
    p.add_actor_times({"env": 1.0, "inference": 3.0, "wait": 0.0})
    assert p.lag() == 2.0
    s = p.scalars(2.0)
    assert s["pipeline/policy_lag_mean"] == 2.0 and s["pipeline/policy_lag_max"] == 5.0
    assert s["pipeline/batch_wait_s"] == pytest.approx(0.2)
    assert s["perf/learner_update_s"] == pytest.approx(0.3)
    assert s["losses/policy"] == 2.0 and s["losses/lr"] == 0.5
    assert s["perf/updates_per_s"] == 1.0
    assert s["pipeline/actor_inference_fraction"] == 0.75
    assert p.updates == 0 and p.lag() is None  # reset
    assert metrics.format_eta(3725) == "1:02:05" and metrics.format_eta(None) == "?"
    assert metrics.progress_bar(0.42, 10) == "[####......]  42%"
    assert metrics.progress(50, 100, 10.0, tty=False) == ("", "0:00:05")
    assert metrics.progress(50, 100, 0.0, tty=True)[0].startswith("[")


def _fake_run(path: str, seed: int, scale: float) -> None:
    os.makedirs(path)
    with open(os.path.join(path, "episodes.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["env_steps", "frames", "episode_return", "episode_length", "wall_time"])
        for i in range(1, 60):
            w.writerow([i * 100, i * 100, scale * i + seed, 20, i * 0.1])
    with open(os.path.join(path, "learner.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(LEARNER_COLUMNS[:10])  # an older file, without the pipeline columns
        for i in range(1, 30):
            w.writerow([i, i * 200, i * 200, 1000 + seed, 1 / i, 2 / i, 0.69, 0.001, 1, 1])


def _plot(*dirs: str) -> list[str]:
    proc = subprocess.run([sys.executable, "-m", "sweeps.plot", *dirs], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    paths = proc.stdout.split()
    for p in paths:
        assert p.endswith(".png") and os.path.getsize(p) > 1000, p
        with open(p, "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    return paths


def test_plot_of_a_sweep_dir(tmp_path):
    sweep = tmp_path / "sweep"
    rows = []
    for lr in ("0.001", "0.002"):
        for seed in (0, 1):
            run = f"lr={lr},seed={seed}"
            rel = os.path.join(run, "CartPole-v1_1700000000")
            _fake_run(str(sweep / rel), seed, float(lr) * 1000)
            rows.append({"run": run, "lr": lr, "seed": seed, "status": "ok", "run_dir": rel})
    with open(sweep / "sweep_summary.csv", "w", newline="") as f:
        w = csv.DictWriter(f, ["run", "lr", *RESULT_COLUMNS], restval="")
        w.writeheader()
        w.writerows(rows)
    paths = _plot(str(sweep))
    assert sorted(os.path.basename(p) for p in paths) == \
        ["curves.png", "losses.png", "throughput.png"]
    assert all(os.path.dirname(p) == str(sweep) for p in paths)
    from sweeps.plot import sweep_groups
    assert {k: len(v) for k, v in sweep_groups(str(sweep)).items()} == \
        {"lr=0.001": 2, "lr=0.002": 2}


def test_cartpole_run_writes_tensorboard_events_and_new_columns(results):
    proc = run_main("--env=CartPole-v1", "--environment_max_steps=5000", "--worker_count=1",
                    "--status_interval=1", f"--results_dir={results}", timeout=300)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    (run,) = glob.glob(os.path.join(results, "*"))
    assert "ETA" in proc.stdout and "lag" in proc.stdout
    assert glob.glob(os.path.join(run, "events.out.tfevents.*"))
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(run, size_guidance={"scalars": 0})
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    for tag in ("charts/episode_return", "charts/episode_length",
                "charts/episode_return_vs_frames", "losses/policy", "losses/value",
                "losses/entropy", "losses/lr", "perf/fps", "perf/learner_update_s",
                "system/learner_cpu_percent", "system/learner_rss_mib",
                "system/actor0_cpu_percent", "system/learner_open_files",
                "pipeline/policy_lag_mean", "pipeline/policy_lag_max", "pipeline/free_slots",
                "pipeline/batch_wait_s", "pipeline/replay0_queued", "pipeline/actor_env_s",
                "pipeline/actor_inference_s", "pipeline/actor_wait_s"):
        assert tag in tags, (tag, sorted(tags))
    returns = acc.Scalars("charts/episode_return")
    assert len(returns) >= 10 and max(e.step for e in returns) >= 5000
    actor_s = sum(e.value for e in acc.Scalars("pipeline/actor_env_s"))
    assert actor_s > 0
    with open(os.path.join(run, "learner.csv"), newline="") as f:
        reader = csv.DictReader(f)
        assert reader.fieldnames == LEARNER_COLUMNS
        assert LEARNER_COLUMNS[10:] == NEW_COLUMNS + DIAGNOSTIC_COLUMNS + ["clip_fraction"]
        rows = list(reader)
    assert rows and all(float(r["policy_lag_mean"]) >= 0 and float(r["update_s"]) > 0
                        for r in rows)
    # the learning diagnostics are filled in: a KL (0 up to rounding where the policy
    # has not moved: -1.9e-10 at the first update on an AVX-512 CPU), a step the
    # optimizer took (the last updates of the linear schedule may have lr 0, and then
    # no step)
    assert all(float(r["kl"]) >= -1e-6 and float(r["adv_std"]) >= 0 for r in rows)
    assert all(r["clip_fraction"] == "" for r in rows)  # impala has no clip
    assert all(float(r["step_over_lr"]) > 0 for r in rows if float(r["lr"]) > 0)
    assert "losses/step_over_lr" in tags and "losses/explained_variance" in tags
    paths = _plot(run)
    assert sorted(os.path.basename(p) for p in paths) == \
        ["curves.png", "losses.png", "throughput.png"]


def test_resumed_old_learner_csv_gets_the_new_header(tmp_path):
    from training.run_dir import RunDir

    old = ",".join(LEARNER_COLUMNS[:10]) + "\r\n1,320,320,0.0,1,2,0.69,0.001,1,3\r\n"
    (tmp_path / "learner.csv").write_text(old)
    run = RunDir(str(tmp_path), "CartPole-v1", {}, echo=False, resume_path=str(tmp_path),
                 keep_rows=(0, 1, 0))
    run.open_learner(())  # an agent with no statistics beyond the fixed columns
    run.learner.writerow({c: 7 for c in LEARNER_COLUMNS})
    run.close()
    with open(tmp_path / "learner.csv", newline="") as f:
        reader = csv.DictReader(f)
        rows = list(reader)
    assert reader.fieldnames == LEARNER_COLUMNS
    assert rows[0]["updates"] == "1" and rows[0]["free_slots"] is None
    assert rows[1]["free_slots"] == "7"


def test_learner_csv_rows_every_interval_means_and_a_row_at_each_checkpoint(tmp_path):
    """--learner_csv_interval=3: rows at updates 3 and 6 (their means, the lag's max),
    a checkpoint's flush writes update 7's; a resume at 6 updates keeps the rows up to
    6 and drops a torn line."""
    from training.report import Report
    from training.run_dir import RunDir

    run = RunDir(str(tmp_path), "Pendulum-v1", {}, echo=False)
    run.open_learner(("critic_loss",))
    report = Report(run, "Pendulum-v1", 1, 100, csv_interval=3)
    for k in range(1, 8):
        report.rollouts(10)
        report.update({"critic_loss": float(k)}, 0.1 * k, 0.01, (float(k), 2.0 * k), 4 - k % 2)

    def rows():
        with open(run.file("learner.csv"), newline="") as f:
            return list(csv.DictReader(f))

    report.flush()
    assert [(r["updates"], r["env_steps"]) for r in rows()] == [("3", "30"), ("6", "60")]
    first, second = rows()
    assert float(first["critic_loss"]) == 2.0 and float(second["critic_loss"]) == 5.0
    assert float(first["policy_lag_mean"]) == 2.0 and float(first["policy_lag_max"]) == 6.0
    assert float(second["batch_wait_s"]) == pytest.approx(0.5) and first["free_slots"] == "3"
    report.flush(sync=True)  # before a checkpoint: the 7th update's row
    assert [(r["updates"], float(r["critic_loss"])) for r in rows()][-1] == ("7", 7.0)
    report.flush(sync=True)  # nothing new: no row
    assert len(rows()) == 3
    run.close()
    with open(run.file("learner.csv"), "a", newline="") as f:
        f.write("8,80,80,0.0,")  # torn by a kill
    RunDir("", "", {}, echo=False, resume_path=run.path, keep_rows=(0, 7, 0)).close()
    assert [r["updates"] for r in rows()] == ["3", "6", "7"]
    RunDir("", "", {}, echo=False, resume_path=run.path, keep_rows=(0, 6, 0)).close()
    assert [r["updates"] for r in rows()] == ["3", "6"]
