"""Checkpoints of format 1 (saved before policies had a part of their own: the agent's
model, optimizer, ppo generator and impact target at the top level) still resume and
test: `training.checkpoint.upgrade` converts them (format 2: `policies`)."""

from __future__ import annotations

import glob
import os

import torch

from tests.conftest import run_main
from training.checkpoint import FORMAT_VERSION, load_checkpoint, upgrade

FLAGS = ("--serial", "--learner_threads=1", "--worker_count=1", "--env=CartPole-v1",
         "--agent=impact", "--replays=standard", "--eval_interval=0")


def as_format_1(state: dict) -> dict:
    """A format-2 checkpoint laid out as format 1 wrote it."""
    (policy,) = state["policies"]
    agent = policy["agent"]
    old = {k: v for k, v in state.items() if k != "policies"}
    old.update(format_version=1, model=agent["model"], optimizer=agent["optimizers"]["main"],
               ppo_generator=agent["ppo_generator"], impact_target=agent["targets"]["impact"],
               impact_updates=agent["impact_updates"], replays=policy["replays"])
    return old


def test_a_format_1_checkpoint_resumes_and_tests(tmp_path):
    first = str(tmp_path / "first")
    proc = run_main(*FLAGS, "--environment_max_steps=1600", f"--results_dir={first}",
                    timeout=300)
    assert proc.returncode == 0, proc.stderr
    (run,) = glob.glob(os.path.join(first, "*"))
    new = load_checkpoint(run)
    assert new["format_version"] == FORMAT_VERSION == 2
    old_dir = tmp_path / "old_run"
    old_dir.mkdir()
    torch.save(as_format_1(new), old_dir / "checkpoint.pt")

    converted = load_checkpoint(str(old_dir))
    (policy,) = converted["policies"]
    saved = new["policies"][0]["agent"]
    for name in ("model",):
        assert policy["agent"][name].keys() == saved[name].keys()
        assert all(torch.equal(policy["agent"][name][k], v) for k, v in saved[name].items())
    assert policy["agent"]["targets"].keys() == {"impact"}
    assert policy["agent"]["impact_updates"] == saved["impact_updates"]
    assert "updates" not in policy  # format 1 counted the run's updates only
    assert upgrade(converted) is converted  # format 2 stays as it is

    proc = run_main("--op_mode=train_w_load", f"--load_model_url={old_dir}",
                    "--environment_max_steps=2600", "--serial", timeout=300)
    assert proc.returncode == 0, proc.stderr
    resumed = load_checkpoint(str(old_dir))
    assert resumed["format_version"] == 2
    assert resumed["counters"]["env_steps"] > new["counters"]["env_steps"]
    assert resumed["policies"][0]["updates"] == resumed["counters"]["updates"] \
        > new["counters"]["updates"]

    old_again = tmp_path / "old_test"
    old_again.mkdir()
    torch.save(as_format_1(new), old_again / "checkpoint.pt")
    tests = str(tmp_path / "tests")
    proc = run_main("--op_mode=test", f"--load_model_url={old_again}", "--test_episode_count=2",
                    "--worker_count=1", f"--results_dir={tests}", timeout=300)
    assert proc.returncode == 0, proc.stderr
    (test_run,) = glob.glob(os.path.join(tests, "*"))
    assert os.path.exists(os.path.join(test_run, "test_summary.json"))
