"""What a user sees in the browser: a real TensorBoard process (`make board` runs the
same command) on a short real run, read back through its HTTP data API on loopback."""

from __future__ import annotations

import csv
import glob
import json
import os
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request

import pytest

from tests.conftest import run_main


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(port: int, path: str, **query):
    url = f"http://127.0.0.1:{port}{path}" + (f"?{urllib.parse.urlencode(query)}"
                                               if query else "")
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


@pytest.fixture
def board(results):
    """(port, run dir): a short CartPole run with evaluations, and TensorBoard on it."""
    proc = run_main("--env=CartPole-v1", "--serial", "--learner_threads=1",
                    "--environment_max_steps=20000", "--eval_interval=5000",
                    "--eval_episodes=3", "--status_interval=0.2", f"--results_dir={results}")
    assert proc.returncode == 0, proc.stderr
    (run,) = glob.glob(os.path.join(results, "*"))
    port = _free_port()
    tb = subprocess.Popen([os.path.join(os.path.dirname(sys.executable), "tensorboard"),
                           "--logdir", results, "--host", "127.0.0.1", "--port", str(port),
                           "--load_fast", "false"],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.time() + 120  # only a hang gets there
        while True:
            assert tb.poll() is None, f"tensorboard exited:\n{tb.stdout.read()[-3000:]}"
            assert time.time() < deadline, "tensorboard never answered"
            try:
                tags = _get(port, "/data/plugin/scalars/tags")
                if tags.get(os.path.basename(run)):
                    break
            except OSError:
                pass
            time.sleep(0.5)
        yield port, run
    finally:
        tb.terminate()
        tb.wait(30)


def test_tensorboard_serves_the_runs_scalars_with_the_csv_values(board):
    port, run = board
    name = os.path.basename(run)
    tags = _get(port, "/data/plugin/scalars/tags")[name]
    for prefix in ("charts/", "losses/", "eval/", "system/"):
        assert any(t.startswith(prefix) for t in tags), (prefix, sorted(tags))

    def series(tag):
        """[step, value, step, value, ...] of a tag, as TensorBoard serves it."""
        return [x for _, step, value in
                _get(port, "/data/plugin/scalars/scalars", run=name, tag=tag)
                for x in (step, value)]

    with open(os.path.join(run, "eval.csv"), newline="") as f:
        evals = list(csv.DictReader(f))
    assert series("eval/mean_return") == pytest.approx(
        [x for r in evals for x in (int(r["env_steps"]), float(r["mean"]))], rel=1e-5)
    with open(os.path.join(run, "episodes.csv"), newline="") as f:
        episodes = list(csv.DictReader(f))
    assert series("charts/episode_return") == pytest.approx(
        [x for r in episodes for x in (int(r["env_steps"]), float(r["episode_return"]))],
        rel=1e-5)
    assert len(evals) >= 2 and len(series("losses/policy")) >= 2
