"""Learners started by torchrun (training/ranks/torchrun.py): two "nodes" on 127.0.0.1,
each a torchrun launch of its own (`--nnodes=2 --node_rank=K`) with its own working
directory, TMPDIR and results directory.

* `--serial --seed=7` on CartPole: learner.csv and episodes.csv are those of the same
  flags' `--learner_count=2` run (rank 0 spawning rank 1), bit for bit (so each
  repeats the other, as the serial mode does). Only node 0 writes a run directory.
* SIGKILL of node 1 (its launcher and its rank): node 0 exits 1 within a bound,
  with a checkpoint that resumes.
* A --learner_count other than the world size: every rank exits 2.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import psutil
import pytest

from tests.conftest import ROOT, run_main
from tests.test_lifecycle import learner_rows, run_dir, run_log, wait_for
from tests.test_serial import _rows
from training.checkpoint import load_checkpoint

SERIAL_TWO = ("--serial", "--learner_threads=1", "--seed=7", "--env=CartPole-v1",
              "--agent=ppo", "--batch_size=4", "--normalize_input=true",
              "--normalize_returns=true", "--worker_count=2", "--environment_max_steps=2400",
              "--eval_interval=0")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_nodes(tmp, *flags: str) -> list[subprocess.Popen]:
    """Two torchrun launches of main.py `flags`, one rank each, each in `tmp`/nodeK
    (its working directory, with its own TMPDIR and `results`)."""
    port = free_port()
    procs = []
    for k in (0, 1):
        home = os.path.join(tmp, f"node{k}")
        os.makedirs(home, exist_ok=True)
        # short: the forkserver's socket path lives in it (a pytest path is too long)
        own_tmp = tempfile.mkdtemp(prefix=f"n{k}-")
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc_per_node=1",
             f"--node_rank={k}", "--master_addr=127.0.0.1", f"--master_port={port}",
             os.path.join(ROOT, "main.py"), *flags, "--results_dir=results"],
            cwd=home, env={**os.environ, "TMPDIR": own_tmp},
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        TMPDIRS.append(own_tmp)
    return procs


TMPDIRS: list[str] = []


@pytest.fixture(autouse=True)
def no_tmpdir_left():
    yield
    while TMPDIRS:
        shutil.rmtree(TMPDIRS.pop(), ignore_errors=True)


def finish(procs: list[subprocess.Popen], timeout: float) -> list[str]:
    """Each launch's output once it exited (killed with its ranks past `timeout`)."""
    outs = []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_tree(p)
            out, _ = p.communicate(timeout=30)
        outs.append(out)
    return outs


def kill_tree(proc: subprocess.Popen) -> None:
    """SIGKILL a launch and every process under it, as if its machine died."""
    try:
        top = psutil.Process(proc.pid)
        tree = [top, *top.children(recursive=True)]
    except psutil.Error:  # it exited
        return
    for p in tree:
        try:
            p.kill()
        except psutil.Error:
            pass


def test_two_torchrun_nodes_train_as_the_spawned_ranks_do_bit_for_bit(tmp_path):
    proc = run_main(*SERIAL_TWO, "--learner_count=2", f"--results_dir={tmp_path / 'a'}",
                    timeout=300)
    assert proc.returncode == 0, proc.stderr
    procs = start_nodes(str(tmp_path / "torchrun"), *SERIAL_TWO)
    try:
        outs = finish(procs, timeout=300)
    finally:
        for p in procs:
            kill_tree(p)
    assert [p.returncode for p in procs] == [0, 0], outs
    nodes = [str(tmp_path / "torchrun" / f"node{k}") for k in (0, 1)]
    results = os.path.join(nodes[0], "results")
    assert run_dir(results) is not None, outs[0][-3000:]
    assert not os.path.exists(os.path.join(nodes[1], "results")), "node 1 wrote a run"
    for name, rows in (("learner.csv", 10), ("episodes.csv", 10)):
        a, b = (_rows(d, name) for d in (str(tmp_path / "a"), results))
        assert len(a) >= rows
        assert a == b, f"{name} of the torchrun nodes differs from the spawned ranks'"
    assert "the largest parameter difference between the 2 learners is 0" in run_log(results)
    assert "learner rank 1 started" in outs[1]  # its log went to its launch's stderr


def test_a_killed_node_stops_the_other_with_status_1_and_a_checkpoint_that_resumes(tmp_path):
    procs = start_nodes(str(tmp_path), "--env=CartPole-v1", "--worker_count=2",
                        "--eval_interval=0", "--environment_max_steps=5000000",
                        "--learner_timeout=30")
    results = str(tmp_path / "node0" / "results")
    try:
        wait_for(lambda: learner_rows(results) >= 3, 120, "three learner updates", procs[0])
        t0 = time.time()
        kill_tree(procs[1])
        out = finish(procs[:1], timeout=90)[0]
        took = time.time() - t0
    finally:
        for p in procs:
            kill_tree(p)
            p.communicate(timeout=30)
    print(f"node 0 exited {took:.1f} s after node 1 was killed")
    assert procs[0].returncode == 1, out[-3000:]
    assert "a collective with the other learners failed" in out, out[-3000:]
    d = run_dir(results)
    saved = load_checkpoint(d)["counters"]
    assert saved["updates"] >= 3
    proc = run_main("--op_mode=train_w_load", f"--load_model_url={d}", "--serial",
                    "--learner_count=1",
                    f"--environment_max_steps={saved['env_steps'] + 3000}", timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert json.load(open(os.path.join(d, "summary.json")))["updates"] > saved["updates"]


def test_a_learner_count_other_than_the_world_size_exits_2_on_every_rank(tmp_path):
    procs = start_nodes(str(tmp_path), "--env=CartPole-v1", "--learner_count=3")
    outs = finish(procs, timeout=120)
    assert "--learner_count: torchrun started 2 learners (WORLD_SIZE)" in outs[0], outs[0]
    for out in outs:  # torchrun exits 1 and reports its rank's status
        assert re.search(r"exitcode\s*: 2", out), out[-3000:]
    assert not os.path.exists(tmp_path / "node0" / "results")


def test_ranks_size_their_auto_flags_for_their_node(monkeypatch):
    from option_flags import default_values
    from training.config import make_config
    from training.ranks.torchrun import Launch, node_ranks, settle

    # rank 3 of 4, two per node: threads and actors sized for its node, Ray actors on it
    values = default_values(env="CartPole-v1", backend="ray", ray_address="auto")
    settled, explicit, errors = settle(values, set(), Launch(3, 4, 1, 2))
    cores = os.cpu_count() or 1
    assert not errors and settled["learner_count"] == 4
    assert settled["learner_threads"] == max(1, cores // 2)
    assert settled["worker_count"] == cores * 2
    assert settled["ray_actor_node"] == "learner" and "ray_actor_node" in explicit
    assert not make_config(settled, explicit)[1]
    given, _, _ = settle({**values, "ray_actor_node": "any"}, {"ray_actor_node"},
                         Launch(3, 4, 1, 2))
    assert given["ray_actor_node"] == "any"
    assert make_config(values)[0].ray_actor_node == "any"  # one learner: Ray places them
    _, _, errors = settle({**values, "ray_address": ""}, set(), Launch(0, 2, 0, 1))
    assert any(e.startswith("--backend: under torchrun") for e in errors), errors
    # local actors: no Ray flag is set, so none is refused as unread
    local = default_values(env="CartPole-v1")
    settled, explicit, errors = settle(local, set(), Launch(1, 2, 0, 1))
    assert settled["ray_actor_node"] is None and not errors
    cfg, errors = make_config(settled, explicit)
    assert not errors and cfg.learner_count == 2
    # this node's ranks: torchrun's, or all where rank 0 spawns them
    for name, value in (("RANK", "3"), ("WORLD_SIZE", "4"), ("LOCAL_RANK", "1"),
                        ("LOCAL_WORLD_SIZE", "2")):
        monkeypatch.setenv(name, value)
    assert node_ranks(4) == range(2, 4)
    monkeypatch.delenv("RANK")
    assert node_ranks(3) == range(3)
