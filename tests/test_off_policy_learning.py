"""sac learns Pendulum through main.py in the serial mode (a file of its own, so that
the suite's two workers share the off-policy runs)."""

from __future__ import annotations

import json
import os

from tests.pair_runs import run_inline
from tests.test_off_policy_runs import run_dir


def test_sac_learns_pendulum_in_the_serial_mode(results):
    """-300 over 10 episodes (random: about -1,200) within 8,000 env steps (seed 0
    on an AMD EPYC: at 5,600)."""
    out = run_inline("--env=Pendulum-v1", "--agent=sac", "--serial", "--seed=0",
                   f"--results_dir={results}", "--environment_max_steps=8000",
                   "--learning_starts=1000", "--hidden_size=64", "--batch_size=128",
                   "--stop_at_return=-300", "--stop_window=10", "--status_interval=30",
                   "--eval_interval=0", "--learner_threads=1", timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    summary = json.load(open(os.path.join(run_dir(results), "summary.json")))
    assert summary["env_steps"] < 8000, summary  # stopped by --stop_at_return
