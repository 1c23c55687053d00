"""Sweeps through the real entry points: multi_train.py runs `main.py` once per run.

* grid x list x seeds expands in the documented order; change_args puts a run's values
  after the base flags (so they win) and leaves out null values;
* bad sweeps exit 2 before anything is written;
* a sweep with a failing setting records the ok run and the failed one and goes on;
  running the same command again skips the ok run (its files untouched) and retries the
  failed one;
* SIGINT to multi_train stops the run in flight (checkpoint saved, recorded as
  interrupted, exit 130), and the same command again continues it from the checkpoint.
Every run is a few thousand env steps of CartPole-v1 with one actor.
"""

from __future__ import annotations

import csv
import glob
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

import multi_train
from tests.conftest import ROOT

TINY = ["--env=CartPole-v1", "--worker_count=1", "--envs_per_worker=2", "--serial"]  # no processes


def run_sweep(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, os.path.join(ROOT, "multi_train.py"), *args],
        cwd=ROOT, capture_output=True, text=True, timeout=timeout,
    )


def read_rows(sweep_dir: str) -> list[dict[str, str]]:
    with open(os.path.join(sweep_dir, "sweep_summary.csv"), newline="") as f:
        return list(csv.DictReader(f))


def read_json(path: str) -> dict:
    with open(path) as f:
        return json.load(f)


# --- pure functions --------------------------------------------------------------------
def test_expand_grid_x_list_x_seeds_seed_outermost():
    runs = multi_train.expand({"lr": [0.1, 0.2], "gamma": [0.9]},
                              [{"batch_size": 8}, {"batch_size": 16, "hidden_size": 32}],
                              [0, 1])
    expected = [
        {"lr": lr, "gamma": 0.9, **entry, "seed": seed}
        for seed in (0, 1)
        for lr in (0.1, 0.2)
        for entry in ({"batch_size": 8}, {"batch_size": 16, "hidden_size": 32})
    ]
    assert runs == expected
    assert len(runs) == 2 * 1 * 2 * 2
    assert multi_train.expand({"lr": [1, 2], "gamma": [0.9, 1]}, None, None) == [
        {"lr": 1, "gamma": 0.9}, {"lr": 1, "gamma": 1},
        {"lr": 2, "gamma": 0.9}, {"lr": 2, "gamma": 1}]
    assert multi_train.expand(None, [{"lr": 1}, {}], [3]) == [{"lr": 1, "seed": 3}, {"seed": 3}]
    assert multi_train.expand(None, None, [0, 1]) == [{"seed": 0}, {"seed": 1}]
    assert multi_train.expand(None, None, None) == [{}]


def test_build_spec_names_and_varied_flags():
    spec, problems = multi_train.build_spec(
        {"grid": {"lr": [0.001, 0.002]}, "list": [{"env": "ALE/Pong-v5"}, {"env": None}],
         "base": ["--environment_max_steps=100"]},
        None, None, "0,1", ["--worker_count=1"])
    assert problems == []
    assert spec["base"] == ["--environment_max_steps=100", "--worker_count=1"]
    assert spec["varied"] == ["lr", "env"]
    names = [r["name"] for r in spec["runs"]]
    assert len(names) == 8 == len(set(names))
    assert names[0] == "lr=0.001,env=ALE-Pong-v5,seed=0"
    assert names[1] == "lr=0.001,env=auto,seed=0"
    assert all(re.fullmatch(r"[A-Za-z0-9._=,+-]+", n) for n in names)


def test_change_args_puts_run_values_last_and_skips_null():
    argv = multi_train.change_args(
        ["--env=CartPole-v1", "--seed=7"],
        {"lr": 0.0005, "hidden_size": None, "clip_rewards": True,
         "replay_parameters": [{"type": "queue", "capacity": 1, "sample_ratio": 1}], "seed": 0})
    assert argv == ["--env=CartPole-v1", "--seed=7", "--lr=0.0005", "--clip_rewards=true",
                    '--replay_parameters=[{"type":"queue","capacity":1,"sample_ratio":1}]',
                    "--seed=0"]


def test_dry_run_uses_a_custom_change_args_and_writes_nothing(tmp_path, capsys):
    sweep = tmp_path / "sweep"

    def my_args(base_args, run_params):
        return [*multi_train.change_args(base_args, run_params), "--status_interval=9"]

    status = multi_train.main(['--grid={"lr": [0.1, 0.2]}', f"--sweep_dir={sweep}",
                               "--dry_run"], change_args=my_args)
    assert status == 0
    out = capsys.readouterr().out
    assert out.count("--status_interval=9") == 2 and "--lr=0.2" in out
    assert not sweep.exists()


# --- bad sweeps ------------------------------------------------------------------------
@pytest.mark.parametrize(
    "args, message",
    [
        (['--grid={"lr": [0.1'], "--grid: not valid JSON"),
        (["--grid={}"], "grid: must be a non-empty object"),
        (['--grid={"lr": []}'], "grid.lr: must be a non-empty list"),
        (['--grid={"no_such_flag": [1]}'], "no flag --no_such_flag"),
        (['--grid={"batch_size": ["abc"]}'], "--batch_size=abc"),
        (['--grid={"results_dir": ["x"]}'], "--results_dir is set per run"),
        (['--grid={"lr": [0.1]}', '--list=[{"lr": 0.2}]'], "list[0].lr"),
        (["--seeds=0,x"], "seeds"),
        (['--grid={"lr": [0.1]}', "--", "--bogus=1"], "bogus"),
        (['--grid={"lr": [0.1]}', "--", "--results_dir=x"], "--results_dir"),
        (['--grid={"lr": [0.1]}', "--parallel_runs=0"], "--parallel_runs"),
        (["SWEEP_FILE"], "unknown keys ['sed']"),
        ([], "give --grid, --list, --seeds"),
    ],
)
def test_bad_sweeps_exit_2_and_create_nothing(tmp_path, capsys, args, message):
    # in this process (multi_train.main returns the exit status): 13 interpreters that
    # import torch cost the suite about 25 s; the next test goes through the command line
    sweep_file = tmp_path / "sweep.json"
    sweep_file.write_text(json.dumps({"grid": {"lr": [0.1]}, "sed": [1]}))
    args = [f"--sweep_file={sweep_file}" if a == "SWEEP_FILE" else a for a in args]
    sweep = tmp_path / "sweep"
    status = multi_train.main([f"--sweep_dir={sweep}", *args])
    out = capsys.readouterr()
    assert status == 2, out.out + out.err
    assert message in out.err
    assert not sweep.exists()


def test_a_bad_sweep_exits_2_from_the_command_line(tmp_path):
    sweep = tmp_path / "sweep"
    proc = run_sweep(f"--sweep_dir={sweep}", '--grid={"batch_size": ["abc"]}', timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "error: bad sweep, nothing was started" in proc.stderr
    assert "--batch_size=abc" in proc.stderr
    assert not sweep.exists()


# --- real sweeps -----------------------------------------------------------------------
def test_failed_runs_are_recorded_and_a_rerun_skips_the_finished_ones(tmp_path):
    sweep = str(tmp_path / "sweep")
    args = ['--grid={"env": ["CartPole-v1", "NoSuchEnv-v0"]}', "--seeds=3",
            f"--sweep_dir={sweep}", "--", *TINY, "--environment_max_steps=3000", "--seed=7"]
    first = run_sweep(*args)
    assert first.returncode == 1, first.stdout + first.stderr  # some run failed
    rows = read_rows(sweep)
    assert [(r["env"], r["seed"]) for r in rows] == [("CartPole-v1", "3"), ("NoSuchEnv-v0", "3")]
    ok = [r for r in rows if r["env"] == "CartPole-v1"]
    failed = [r for r in rows if r["env"] == "NoSuchEnv-v0"]
    assert [r["status"] for r in ok] == ["ok"], first.stdout
    assert [(r["status"], r["exit_code"], r["run_dir"]) for r in failed] == [("failed", "2", "")]
    for r in ok:
        assert r["exit_code"] == "0" and r["attempts"] == "1"
        assert int(r["frames"]) > 0 and int(r["env_steps"]) >= 3000
        assert float(r["wall_time_s"]) > 0 and r["mean_return_last100"] != ""
        assert r["best_mean_return_100"] != ""
        run_dir = os.path.join(sweep, r["run_dir"])
        assert os.listdir(os.path.dirname(run_dir)) == [os.path.basename(run_dir)]
        flags = read_json(os.path.join(run_dir, "flags.json"))
        assert flags["seed"] == int(r["seed"])  # the sweep's seed beats the base --seed=7
        assert flags["environment_max_steps"] == 3000 and flags["worker_count"] == 1
        summary = read_json(os.path.join(run_dir, "summary.json"))
        assert summary["frames"] == int(r["frames"])
    assert len(read_json(os.path.join(sweep, "sweep.json"))["runs"]) == 2
    stamps = {r["run"]: os.stat(os.path.join(sweep, r["run_dir"], "summary.json")).st_mtime_ns
              for r in ok}

    second = run_sweep(*args)
    assert second.returncode == 1, second.stdout + second.stderr
    rows2 = {r["run"]: r for r in read_rows(sweep)}
    for r in ok:
        assert re.search(rf"skip\s+{re.escape(r['run'])}", second.stdout), second.stdout
        assert rows2[r["run"]] == r
        path = os.path.join(sweep, r["run_dir"], "summary.json")
        assert os.stat(path).st_mtime_ns == stamps[r["run"]]
        assert os.listdir(os.path.join(sweep, r["run"])) == [os.path.basename(r["run_dir"])]
    for r in failed:
        assert re.search(rf"start\s+{re.escape(r['run'])} \(attempt 2\)", second.stdout)
        assert rows2[r["run"]]["status"] == "failed" and rows2[r["run"]]["attempts"] == "2"

    other = run_sweep('--grid={"env": ["CartPole-v1"]}', f"--sweep_dir={sweep}", "--", *TINY)
    assert other.returncode == 2 and "different sweep" in other.stderr


def test_sigint_interrupts_the_run_in_flight_and_a_rerun_completes_it(tmp_path):
    sweep = str(tmp_path / "sweep")
    args = ["--seeds=0", f"--sweep_dir={sweep}", "--", *TINY, "--environment_max_steps=10000"]
    proc = subprocess.Popen([sys.executable, os.path.join(ROOT, "multi_train.py"), *args],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    try:
        deadline = time.time() + 60
        while True:  # main.py's first log line comes once the learner and actors run
            logs = glob.glob(os.path.join(sweep, "seed=0", "*", "run.log"))
            if logs and os.path.getsize(logs[0]) > 0:
                break
            assert proc.poll() is None, proc.communicate()[0]
            assert time.time() < deadline, "the run did not start"
            time.sleep(0.05)
        t0 = time.time()
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert time.time() - t0 < 30
    assert proc.returncode == 130, out
    (row,) = read_rows(sweep)
    assert row["status"] == "interrupted", out
    assert row["exit_code"] == "0"  # main.py saves a checkpoint and exits 0 on SIGINT
    assert int(row["env_steps"] or 0) < 10000
    first_dir = os.path.join(sweep, row["run_dir"])
    assert os.path.exists(os.path.join(first_dir, "checkpoint.pt"))

    again = run_sweep(*args)
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"resuming from {row['run_dir']}" in again.stdout
    (row,) = read_rows(sweep)
    assert row["status"] == "ok" and row["attempts"] == "2"
    assert int(row["env_steps"]) >= 10000
    # the continuation: a new run directory next to the first, or the first one going on
    assert os.path.dirname(row["run_dir"]) == "seed=0"
    flags = read_json(os.path.join(sweep, row["run_dir"], "flags.json"))
    assert flags["op_mode"] == "train_w_load"
    assert os.path.exists(os.path.join(sweep, row["run_dir"], "checkpoint.pt"))
