"""`--backend=ray` joining a Ray cluster of two nodes on this machine
(`ray.cluster_utils.Cluster`: a head with no CPUs, so that no actor can run on it,
and a node with 2; each has its own raylet and object store), through main.py
started from outside the repository with `--ray_address`:

* the actors run on the other node and the run trains;
* that node removed mid-run with another joined: Ray starts the actors again there,
  the deaths are counted and the run trains on; SIGINT then stops it with status 0,
  no actor of it is left, and the cluster is still up;
* `--ray_actor_node=learner`: the actors may only run on the learner's node, here
  the head (a driver on a machine joins its head node first), which has no CPUs: the
  run stops at once with status 1, naming the flag;
* the last node with CPUs removed: no node can place the actors, each counts as a
  death after --ray_actor_timeout, and the run stops with status 1 and a checkpoint
  within a bound instead of waiting forever.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import uuid

import psutil
import pytest

from tests.conftest import ROOT
from tests.test_lifecycle import learner_rows, run_dir, run_log, wait_for
from training.checkpoint import load_checkpoint

# the nodes' processes inherit this process's environment: a variable set before the
# cluster starts marks its actors' processes (the other pytest worker may run Ray too)
TOKEN = uuid.uuid4().hex
NODE = {"num_cpus": 2, "object_store_memory": 128 * 2**20}


@pytest.fixture(scope="module")
def cluster():
    from ray.cluster_utils import Cluster

    os.environ["RAY_CLUSTER_TEST"] = TOKEN
    try:
        c = Cluster(initialize_head=True, head_node_args={
            "num_cpus": 0, "object_store_memory": 128 * 2**20, "include_dashboard": False})
    finally:
        del os.environ["RAY_CLUSTER_TEST"]
    yield c
    c.shutdown()


def add_node(c):
    os.environ["RAY_CLUSTER_TEST"] = TOKEN
    try:
        node = c.add_node(**NODE)
    finally:
        del os.environ["RAY_CLUSTER_TEST"]
    c.wait_for_nodes()
    return node


def actors() -> list[psutil.Process]:
    """The RayRoller actors of this module's cluster alive now."""
    out = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            if "RayRoller" in " ".join(p.info["cmdline"] or []) and \
                    p.environ().get("RAY_CLUSTER_TEST") == TOKEN:
                out.append(p)
        except psutil.Error:
            continue
    return out


def start(c, cwd: str, results: str, *flags: str) -> subprocess.Popen:
    """main.py on CartPole with 2 Ray actors, joining `c`, run from `cwd`."""
    return subprocess.Popen(
        [sys.executable, os.path.join(ROOT, "main.py"), "--env=CartPole-v1", "--backend=ray",
         f"--ray_address={c.address}", "--worker_count=2", "--environment_max_steps=10000000",
         "--eval_interval=0", "--hidden_size=32", f"--results_dir={results}", *flags],
        cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.communicate(timeout=30)


def test_actors_train_on_the_other_node_survive_its_loss_and_stop_cleanly(cluster, tmp_path):
    first = add_node(cluster)
    results = str(tmp_path / "results")
    # no silence is due here: a restart on a busy machine may take long
    proc = start(cluster, str(tmp_path), results, "--ray_actor_timeout=90")
    try:
        wait_for(lambda: learner_rows(results) >= 5, 120, "5 updates", proc)
        placed = re.findall(r"ray actor \d: 8 envs on \S+ \(node (\w+)\)", run_log(results))
        assert len(placed) == 2 and all(first.node_id.startswith(n) for n in placed), placed
        assert not cluster.head_node.node_id.startswith(placed[0])

        add_node(cluster)
        cluster.remove_node(first)
        wait_for(lambda: "(2/3)" in run_log(results), 120, "both deaths counted", proc)
        after = learner_rows(results) + 5
        wait_for(lambda: learner_rows(results) >= after, 120, "updates after the loss", proc)

        t0 = time.time()
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0, out[-3000:]
        print(f"stopped in {time.time() - t0:.1f} s")
    finally:
        stop(proc)
    deadline = time.time() + 10
    while actors() and time.time() < deadline:
        time.sleep(0.2)
    assert not actors(), "a Ray actor of the run outlived it"
    assert cluster.remaining_processes_alive(), "the cluster went down with the run"
    d = run_dir(results)
    assert load_checkpoint(d)["counters"]["updates"] >= after


def test_with_no_node_left_to_place_the_actors_the_run_stops_with_status_1(cluster, tmp_path):
    if not [n for n in cluster.list_all_nodes() if n is not cluster.head_node]:
        add_node(cluster)
    results = str(tmp_path / "results")
    # the node's loss kills both actors (2 deaths); then no node can place them, and
    # after 5 s without a rollout a third death stops the run
    proc = start(cluster, str(tmp_path), results, "--ray_actor_timeout=5",
                 "--max_actor_restarts=2")
    try:
        wait_for(lambda: learner_rows(results) >= 3, 120, "3 updates", proc)
        t0 = time.time()
        for node in [n for n in cluster.list_all_nodes() if n is not cluster.head_node]:
            cluster.remove_node(node)
        out, _ = proc.communicate(timeout=90)
        took = time.time() - t0
    finally:
        stop(proc)
    assert proc.returncode == 1, out[-3000:]
    assert "no rollout for 5 s (--ray_actor_timeout" in out, out[-3000:]
    assert "--max_actor_restarts=2: stopping the run" in out, out[-3000:]
    print(f"status 1 {took:.1f} s after the node left")
    assert load_checkpoint(run_dir(results))["counters"]["updates"] >= 3
    assert cluster.remaining_processes_alive()


def test_actors_kept_on_the_learners_node_without_cpus_stop_the_run_at_once(cluster, tmp_path):
    if not [n for n in cluster.list_all_nodes() if n is not cluster.head_node]:
        add_node(cluster)  # a node that could take them, were they free to go
    results = str(tmp_path / "results")
    proc = start(cluster, str(tmp_path), results, "--ray_actor_node=learner")
    try:
        out, _ = proc.communicate(timeout=120)
    finally:
        stop(proc)
    assert proc.returncode == 1, out[-3000:]
    head = cluster.head_node.node_id[:12]
    assert "--ray_actor_node=learner: this learner's Ray node" in out, out[-3000:]
    assert f"node {head}) has 0 CPUs for the 2 actors;" in out, out[-3000:]
    assert not actors()
    assert cluster.remaining_processes_alive()
