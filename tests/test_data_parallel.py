"""Data-parallel learners (`--learner_count`): two gloo ranks, each on half of a fixed
batch, step as one learner on the whole batch, for every agent.

The ranks are bitwise equal after every optimizer step. Against the single learner
they agree to float32's rounding: the two sum their gradients in different orders,
and Adam's steps on a fixed batch amplify the last bits (measured: at most 1.2e-6 on
weights of order 0.1 to 1 after 20 updates, 160 steps), hence rtol 1e-5 with atol
1e-5. A wrong rule moves every step by a part of lr (1e-3) and fails it: skipping the
all-reduce does (`test_without_the_all_reduce_...`), and so did, by hand, each
rank standardising ppo's advantages over its own part of the minibatch only."""

from __future__ import annotations

import os
import pickle
import time

import pytest
import torch
import torch.multiprocessing as mp

from tests import dp_harness

TIMEOUT = 240  # seconds for a pair of ranks to run every case
# where the ranks' tensors live (gloo either way); DP_DEVICE=cuda:0 on a GPU machine
DEVICE = os.environ.get("DP_DEVICE", "cpu")


def run_ranks(tmp_path, device: str = DEVICE) -> dict[int, dict]:
    """Both ranks' results (files, not queues: no semaphore in /dev/shm while other
    tests count its entries); each rank has a fresh rendezvous file and a timeout on
    every collective, and the pair is killed past TIMEOUT."""
    ctx = mp.get_context("spawn")
    files = [os.path.join(tmp_path, f"rank{r}.pkl") for r in (0, 1)]
    procs = [ctx.Process(target=dp_harness.rank_main,
                         args=(r, os.path.join(tmp_path, "rendezvous"), files[r], device))
             for r in (0, 1)]
    for p in procs:
        p.start()
    deadline = time.monotonic() + TIMEOUT
    try:
        while any(p.exitcode is None for p in procs):
            assert time.monotonic() < deadline, f"the ranks took more than {TIMEOUT}s"
            assert all(p.exitcode in (None, 0) for p in procs), [p.exitcode for p in procs]
            time.sleep(0.2)
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
            p.join(10)
    assert [p.exitcode for p in procs] == [0, 0]
    out = {}
    for r, path in enumerate(files):
        with open(path, "rb") as f:
            out[r] = pickle.load(f)
    return out


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    return run_ranks(tmp_path_factory.mktemp("dp"))


@pytest.mark.parametrize("case", list(dp_harness.CASES))
def test_two_ranks_end_where_one_learner_on_the_whole_batch_does(ranks, case):
    one = dp_harness.single(case, DEVICE)
    for rank in (0, 1):
        assert ranks[rank][case + ":steps"] > 0
        assert ranks[rank][case + ":max_step_diff"] == 0.0  # bitwise equal after every step
        got = ranks[rank][case]
        assert got.keys() == one.keys()
        for name in one:
            assert torch.equal(got[name], ranks[0][case][name]), name
            assert torch.allclose(got[name].float(), one[name].float(), rtol=1e-5, atol=1e-5), \
                (name, (got[name].float() - one[name].float()).abs().max())


@pytest.mark.parametrize("case", dp_harness.MUTATED)
def test_without_the_all_reduce_the_ranks_differ_from_one_learner(ranks, case):
    """The mutation the equivalence test must catch: skipping the gradient all-reduce."""
    mutated = ranks[0]["mutated"]
    one = dp_harness.single(case, DEVICE, updates=dp_harness.MUTATED_UPDATES)
    assert mutated[case + ":max_step_diff"] > 0
    assert any(not torch.allclose(mutated[case][k].float(), one[k].float(), rtol=1e-5,
                                  atol=1e-5) for k in one)


def test_merged_moments_are_those_of_the_union(ranks):
    from agents.normalize import RunningMeanStd

    data = torch.arange(16.0).reshape(8, 2) ** 1.5
    norm = RunningMeanStd((2,))
    norm.update(torch.ones(4, 2))
    norm.update(data)
    for rank in (0, 1):
        n, mean, var = ranks[rank]["moments"]
        assert n == 12
        assert torch.allclose(mean, norm.mean, rtol=1e-6)
        assert torch.allclose(var, norm.var, rtol=1e-5)


def test_a_starved_rank_makes_both_wait_and_the_wait_is_counted(ranks):
    assert ranks[0]["starved"] == [False, True]
    assert ranks[1]["starved"] == [False, True]
    assert ranks[0]["waits"] == 1 and ranks[1]["waits"] == 0
