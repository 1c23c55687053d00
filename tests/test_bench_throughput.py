"""bench/throughput.py through its command line on a tiny CartPole budget: every
measurement runs and gives a positive rate (what the speed claims are made of)."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import ROOT


def test_the_throughput_bench_runs_and_reports_every_rate():
    proc = subprocess.run(
        [sys.executable, "-m", "bench.throughput", "--env=CartPole-v1", "--steps=640",
         "--seconds=1", "--learner_updates=1", "--worker_count=1"],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)  # the medians over --repeats (1 here)
    for key in ("env_ceiling_fps", "pipeline_fps", "train_fps", "learner_fps",
                "inference_fps", "train_fps_impala", "learner_fps_impala"):
        assert out[key] > 0, (key, out[key])
