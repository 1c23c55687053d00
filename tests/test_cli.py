"""The real entry point: bad flags exit 2 and write nothing (one real subprocess;
the cases are in-process, in tests/test_bad_input.py); a Pong smoke run leaves
every file of the run directory; test mode plays a saved agent."""

from __future__ import annotations

import csv
import glob
import json
import os
import subprocess
import sys

import pytest
import torch

from tests.conftest import ROOT, run_main
from tests.pair_runs import run_inline  # refusals start nothing: no interpreter to start

RUN_FILES = ["flags.json", "episodes.csv", "learner.csv", "summary.json", "run.log",
             "checkpoint.pt"]


def test_every_error_is_reported_at_once(results):
    proc = run_main("--env=Nope-v0", "--batch_size=0", "--gamma=2", f"--results_dir={results}",
                    timeout=60)
    assert proc.returncode == 2
    for flag in ("--env", "--batch_size", "--gamma"):
        assert flag in proc.stderr


def _only_run_dir(results: str) -> str:
    runs = glob.glob(os.path.join(results, "*"))
    assert len(runs) == 1, runs
    return runs[0]


def _test_mode(run: str, results: str, *flags: str):
    """Test mode on the saved agent of `run` into `results`: (the process, which exited
    0, the test's run directory, its test_summary.json)."""
    proc = run_main("--op_mode=test", f"--load_model_url={run}", *flags,
                    f"--results_dir={results}", timeout=120)
    assert proc.returncode == 0, proc.stderr
    test_run = _only_run_dir(results)
    return proc, test_run, json.load(open(os.path.join(test_run, "test_summary.json")))


def test_pong_smoke_run_leaves_every_file(results):
    # the default agent (ppo on Atari: 3 epochs x 4 minibatches an update) on tiny batches
    proc = run_main("--env=PongNoFrameskip-v4", "--environment_max_steps=400",
                    "--eval_interval=0",
                    "--worker_count=1", "--envs_per_worker=2", "--batch_size=4",
                    "--r_f_steps=10", "--status_interval=1", f"--results_dir={results}",
                    timeout=300)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    run = _only_run_dir(results)
    assert os.path.basename(run).startswith("PongNoFrameskip-v4_")
    for name in RUN_FILES:
        assert os.path.isfile(os.path.join(run, name)), name
    assert run in proc.stdout and "fps" in proc.stdout
    summary = json.load(open(os.path.join(run, "summary.json")))
    assert summary["env_steps"] >= 400
    assert summary["frames"] == 4 * summary["env_steps"]
    rows = list(csv.DictReader(open(os.path.join(run, "learner.csv"))))
    assert len(rows) == summary["updates"] >= 1
    assert int(rows[-1]["frames"]) == 4 * int(rows[-1]["env_steps"])
    header = open(os.path.join(run, "episodes.csv")).readline().strip()
    assert header == "env_steps,frames,episode_return,episode_length,wall_time"
    ckpt = torch.load(os.path.join(run, "checkpoint.pt"), weights_only=False)
    assert ckpt["counters"]["updates"] == summary["updates"]
    assert json.load(open(os.path.join(run, "flags.json")))["env"] == "PongNoFrameskip-v4"


@pytest.fixture(scope="module")
def cartpole_run(tmp_path_factory):
    """A tiny trained CartPole run directory."""
    results = str(tmp_path_factory.mktemp("cartpole") / "results")
    train = run_main("--env=CartPole-v1", "--environment_max_steps=3000", "--worker_count=1",
                     "--hidden_size=32", f"--results_dir={results}", timeout=120)
    assert train.returncode == 0, train.stderr
    return _only_run_dir(results)


def _contents(run: str) -> dict[str, bytes]:
    return {os.path.relpath(os.path.join(d, f), run): open(os.path.join(d, f), "rb").read()
            for d, _, files in os.walk(run) for f in files}


@pytest.mark.parametrize("given, saved", [("--hidden_size=64", "--hidden_size=32"),
                                          ("--use_lstm", "--use_lstm=False"),
                                          ("--agent=ppo", "--agent=impala")])
def test_resume_refuses_a_different_network_or_agent(results, cartpole_run, given, saved):
    before = _contents(cartpole_run)
    proc = run_inline("--op_mode=train_w_load", f"--load_model_url={cartpole_run}", given,
                      f"--results_dir={results}", timeout=60)
    assert proc.returncode == 2
    assert given.split("=")[0] in proc.stderr and saved in proc.stderr
    assert not os.path.exists(results)
    assert _contents(cartpole_run) == before  # the run directory, byte for byte


def test_corrupt_checkpoint_is_a_clear_error(results, tmp_path):
    bad = tmp_path / "checkpoint.pt"
    bad.write_bytes(b"not a checkpoint")
    for mode in ("train_w_load", "test"):
        proc = run_inline(f"--op_mode={mode}", f"--load_model_url={bad}", "--env=CartPole-v1",
                          f"--results_dir={results}", timeout=60)
        assert proc.returncode == 2, proc.stderr
        assert str(bad) in proc.stderr and "corrupt" in proc.stderr
        assert not os.path.exists(results)


def test_test_mode_plays_a_saved_agent(results, cartpole_run):
    _, test_run, summary = _test_mode(cartpole_run, results + "_test", "--test_episode_count=5")
    assert summary["episodes"] == 5
    rows = list(csv.DictReader(open(os.path.join(test_run, "test_episodes.csv"))))
    assert len(rows) == 5
    assert summary["mean"] == pytest.approx(sum(float(r["episode_return"]) for r in rows) / 5)


def test_render_records_a_looping_gif_with_video_format_gif(results, cartpole_run):
    from PIL import Image

    from wrappers.video import gif_frame_ms

    _, test_run, summary = _test_mode(cartpole_run, results, "--test_episode_count=1",
                                      "--render", "--video_format=gif", "--worker_count=1")
    with Image.open(os.path.join(test_run, "test_video.gif")) as gif:
        assert gif.info.get("loop") == 0 and gif.size[0] > 100
        durations = []
        for k in range(gif.n_frames):
            gif.seek(k)
            durations.append(gif.info["duration"])
    # one frame (30 ms at 30 fps) per env step of the game (CartPole: a frame is an env
    # step); Pillow merges repeated frames into one of their summed duration
    assert sum(durations) == int(summary["frames"]) * gif_frame_ms(30) == \
        int(summary["frames"]) * 30


def test_actor_exception_stops_the_run_with_its_traceback(results):
    proc = run_main("--env=tests.counting_env:Exploding-v0", "--worker_count=2",
                    "--environment_max_steps=100000", f"--results_dir={results}", timeout=120)
    assert proc.returncode == 1
    out = proc.stdout + proc.stderr
    assert "RuntimeError: boom" in out and "Traceback" in out
    run = _only_run_dir(results)
    assert os.path.isfile(os.path.join(run, "checkpoint.pt"))
    assert "boom" in open(os.path.join(run, "run.log")).read()


@pytest.mark.parametrize("given", [None, "ACTIVE"])
def test_openmp_waits_passively_unless_the_user_says(given):
    # set by main.py before torch is imported (libgomp reads it once), so the learner,
    # the forkserver and the actors it forks all have it
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    if given:
        env["OMP_WAIT_POLICY"] = given
    proc = subprocess.run([sys.executable, "-c", "import os, main; "
                           "print(os.environ['OMP_WAIT_POLICY'])"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [given or "PASSIVE"]
