"""Data-parallel learners (`--learner_count`): two gloo ranks, each on half of a fixed
batch, step as one learner on the whole batch, for every agent.

The ranks are bitwise equal after every optimizer step. Against the single learner
they agree to float32's rounding: the two sum their gradients in different orders,
and Adam's steps on a fixed batch amplify the last bits (measured: at most 1.2e-6 on
weights of order 0.1 to 1 after 20 updates, 160 steps), hence rtol 1e-5 with atol
1e-5. A wrong rule moves every step by a part of lr (1e-3) and fails it: skipping the
all-reduce does (`test_without_the_all_reduce_...`), and so did, by hand, each
rank standardising ppo's advantages over its own part of the minibatch only.

Checkpoints (`GroupDriver.save`): rank 1 waits past --learner_timeout for what rank 0
does alone, its final evaluation or a slow write, and rank 0 still gives up within
the timeout on a rank that hangs. An update broken off part-way is rolled back."""

from __future__ import annotations

import copy
import os
import pickle
import time

import pytest
import torch
import torch.multiprocessing as mp

from agents.group import Group
from tests import dp_harness
from training.ranks.driver import Snapshot
from training.ranks.group import GroupFailure

TIMEOUT = 240  # seconds for a pair of ranks to run every case
# where the ranks' tensors live (gloo either way); DP_DEVICE=cuda:0 on a GPU machine
DEVICE = os.environ.get("DP_DEVICE", "cpu")


def run_ranks(tmp_path, *args, target=dp_harness.rank_main, timeout: float = TIMEOUT
              ) -> dict[int, dict]:
    """Both ranks' results (files, not queues: no semaphore in /dev/shm while other
    tests count its entries) of `target(rank, rendezvous, results, *args)`; each rank
    has a fresh rendezvous file and a timeout on every collective, and the pair is
    killed past `timeout` seconds."""
    ctx = mp.get_context("spawn")
    files = [os.path.join(tmp_path, f"rank{r}.pkl") for r in (0, 1)]
    procs = [ctx.Process(target=target,
                         args=(r, os.path.join(tmp_path, "rendezvous"), files[r], *args))
             for r in (0, 1)]
    for p in procs:
        p.start()
    deadline = time.monotonic() + timeout
    try:
        while any(p.exitcode is None for p in procs):
            assert time.monotonic() < deadline, f"the ranks took more than {timeout}s"
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
    return run_ranks(tmp_path_factory.mktemp("dp"), DEVICE)


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


@pytest.fixture(scope="module")
def saves(tmp_path_factory):
    return run_ranks(tmp_path_factory.mktemp("saves"), target=dp_harness.save_main,
                     timeout=90)


@pytest.mark.parametrize("case", ["evaluate", "write"])
def test_the_ranks_wait_past_the_timeout_for_what_rank_0_does_alone(saves, case):
    """Rank 0 evaluates the final policy before its last checkpoint, or writes a
    checkpoint slowly, for longer than --learner_timeout: rank 1 waits for it (in the
    save, not in a collective) and the checkpoint holds rank 1's replays."""
    for rank in (0, 1):
        assert saves[rank][case]["error"] is None, (rank, saves[rank][case]["error"])
    assert saves[1][case]["seconds"] > dp_harness.SAVE_TIMEOUT_S
    assert saves[0][case]["written"][0]["rank_replays"] == [["rank 1's replays"]]


def test_rank_0_gives_up_within_the_timeout_on_a_rank_that_hangs(saves):
    out = saves[0]["hang"]
    assert "a collective with the other learners failed" in out["error"]
    assert out["seconds"] < dp_harness.SLOW_S - 1.0
    assert out["written"] is None


class _FailingGroup(Group):
    """A lone learner whose gradient reduction fails at its `fail_at`-th call."""

    def __init__(self, fail_at: int):
        self.calls, self.fail_at = 0, fail_at

    def reduce_gradients(self, params):
        self.calls += 1
        if self.calls == self.fail_at:
            raise GroupFailure("a rank died")


def test_an_update_broken_off_part_way_is_rolled_back_to_the_snapshot():
    """ppo's 8 Adam steps per update, broken off after 2: the snapshot (taken before
    the first step, with no moments yet, then before each update: allocated again
    once the moments exist, then copied into) brings back the parameters, buffers,
    moments, step counts and minibatch generator of the last whole update."""
    agent = dp_harness.make("ppo_steps")
    b = dp_harness.batch(agent, dp_harness.B)
    snapshot = Snapshot()
    for _ in range(2):
        snapshot.take(agent)
        agent.update(b, 0.0)
    snapshot.take(agent)
    expected = copy.deepcopy(agent.state_dict())
    agent.group = _FailingGroup(fail_at=3)
    with pytest.raises(GroupFailure):
        agent.update(b, 0.0)
    assert agent.group.calls == 3  # two steps were taken
    snapshot.restore(agent)
    _assert_same(agent.state_dict(), expected)


def _assert_same(got, want, path: str = "state") -> None:
    """`got` and `want` (nested dicts, lists, tensors, numbers) are equal, bit for bit."""
    if isinstance(want, dict):
        assert got.keys() == want.keys(), path
        for k in want:
            _assert_same(got[k], want[k], f"{path}.{k}")
    elif isinstance(want, list | tuple):
        assert len(got) == len(want), path
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            _assert_same(g, w, f"{path}[{i}]")
    elif isinstance(want, torch.Tensor):
        assert torch.equal(got, want), path
    else:
        assert got == want, path
