"""Nothing lost around resume and stops (issue 10), in-process: changed
--replay_parameters on a resume, the rows a checkpoint counts on disk, TensorBoard
events cut at the checkpoint, fresh random streams for resumed actors, the branch a
resume from an older checkpoint starts, frame pools sized for actor restarts, and
what a stop drops. The real entry point with kill -9 is in test_lifecycle.py."""

from __future__ import annotations

import csv
import glob
import json
import os

import pytest
import torch

from option_flags import default_values
from replay.config import match_saved_states, parse_replay_parameters
from replay.storage import RolloutStorage
from training.checkpoint import load_checkpoint, save_checkpoint, start_branch
from training.config import make_config
from training.factory import build_driver
from training.plan import make_plan
from training.run_dir import RunDir, cut_events
from workers.actor_pool import SEED_SPACE, FinishedRollout, actor_seed
from wrappers.batched import EnvOptions
from wrappers.envs import EnvInfo, make_batched_env

QUEUE = '{"type": "queue", "capacity": 1, "sample_ratio": %s}'
STANDARD = '{"type": "standard", "capacity": %d, "sample_ratio": %s}'


def config(**flags):
    flags = {"env": "CartPole-v1", "environment_max_steps": 10_000, "worker_count": 1,
             "hidden_size": 16, **flags}
    cfg, errors = make_config(default_values(**flags))
    assert not errors, errors
    return cfg


def learner_for(cfg, path, checkpoint=None):
    return build_driver(cfg, make_plan(cfg), RunDir(str(path), cfg.env, cfg.to_dict(),
                                                    echo=False), checkpoint=checkpoint)


def feed(learner, n: int) -> None:
    """`n` rollouts of random numbers through the mixer, as the actors would send."""
    for _ in range(n):
        (i,) = learner.slots.take(1)
        for v in learner.slots.buffers.values():
            if v.dtype.is_floating_point:
                v[:, i] = torch.randn(v[:, i].shape)
        learner.learners[0].mixer.add(i)


def replays(*entries: str) -> str:
    return "[" + ", ".join(entries) + "]"


# --- 1. --replay_parameters may change on a resume --------------------------------------
def test_saved_replay_states_are_matched_by_kind_capacity_and_equality():
    def parse(text):
        entries, errors = parse_replay_parameters(text, 0)
        assert not errors
        return entries

    saved = parse(replays(QUEUE % 0.5, STANDARD % (100, 0.25), STANDARD % (200, 0.25)))
    states = [{}, {"id": 1}, {"id": 2, "storage": {}}]

    def match(text, same_unroll=True):
        return [s for s, _ in match_saved_states(saved, states, parse(text), same_unroll)]

    assert match(replays(QUEUE % 0.3, STANDARD % (100, 0.3), STANDARD % (200, 0.4))) == states
    # swapped and dropped entries find theirs; a grown capacity has none
    assert match(replays(STANDARD % (200, 0.5), QUEUE % 0.5)) == [states[2], states[0]]
    assert match(replays(STANDARD % (100, 1))) == [states[1]]
    assert match(replays(QUEUE % 0.5, STANDARD % (101, 0.5))) == [states[0], None]
    # stored rollouts of another length cannot be used; sampling state alone can
    assert match(replays(STANDARD % (100, 0.5), STANDARD % (200, 0.5)),
                 same_unroll=False) == [states[1], None]
    # two equal entries take one saved state each
    assert match(replays(STANDARD % (100, 0.5), STANDARD % (100, 0.5))) == [states[1], None]


@pytest.mark.parametrize("new, flags, kept", [
    (replays(QUEUE % 0.3, STANDARD % (100, 0.7)), {}, [0, 40]),  # ratios only: kept
    (replays(QUEUE % 0.5, STANDARD % (200, 0.5)), {}, [0, 0]),  # capacity grew
    (replays(STANDARD % (100, 0.5), QUEUE % 0.5), {}, [40, 0]),  # swapped
    (replays(STANDARD % (100, 1)), {}, [40]),  # the queue dropped
    (replays(QUEUE % 0.5, STANDARD % (100, 0.5)), {"r_f_steps": 10}, [0, 0]),
    # more envs: a pixel storage's frame pool grows (another layout), a vector one is kept
    (replays(QUEUE % 0.5, STANDARD % (100, 0.5)), {"worker_count": 2}, [0, 40]),
])
def test_changed_replay_parameters_resume_with_empty_or_kept_replays(tmp_path, new, flags,
                                                                     kept):
    """The old code raised inside the learner's construction (size mismatch, KeyError,
    zip) after the run directory was already cut; now every change resumes, each
    replay either continuing its saved state or starting empty, and the log says which."""
    saved = replays(QUEUE % 0.5, STANDARD % (100, 0.5))
    original = learner_for(config(replay_parameters=saved, checkpoint_replay=True),
                           tmp_path / "a")
    feed(original, 40)
    checkpoint = load_checkpoint(original.save())
    cfg = config(replay_parameters=new, checkpoint_replay=True, **flags)
    resumed = learner_for(cfg, tmp_path / "b", checkpoint)
    assert [len(r) for r in resumed.learners[0].mixer.replays] == kept
    log = open(glob.glob(str(tmp_path / "b" / "*" / "run.log"))[0]).read()
    assert "precision fp32 (--precision=auto: " in log  # and why (agents/precision.py)
    for i, n in enumerate(kept):
        line = next(ln for ln in log.splitlines() if f"resume: replay {i} " in ln)
        assert ("starts empty" in line) == (n == 0 and cfg.replay_specs[i].type != "queue"), line


# --- 2. rows on disk at a checkpoint; TensorBoard cut at it ----------------------------------
def test_a_checkpoint_has_every_row_it_counts_on_disk(tmp_path):
    """Read the files from outside while the run goes on (as after a kill -9): before the
    fix the CSV rows sat in Python's file buffers."""
    learner = learner_for(config(status_interval=1000.0), tmp_path)
    for k in range(7):
        learner.report.rollouts(20)
        learner.report.episodes([(float(k), 20)])
        learner.report.update({"policy_loss": 0.1, "value_loss": 0.2, "entropy": 0.6,
                               "lr": 1e-3}, 0.0, 0.01, (0.0, 0.0), 4)
    path = learner.save()
    counters = load_checkpoint(path)["counters"]
    run = os.path.dirname(path)
    rows = {name: list(csv.DictReader(open(os.path.join(run, name))))
            for name in ("episodes.csv", "learner.csv")}
    assert len(rows["episodes.csv"]) == counters["episodes"] == 7
    assert len(rows["learner.csv"]) == counters["updates"] == 7


def events(path: str) -> list[tuple[int, str]]:
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    return [(e.step, v.tag) for e in EventFileLoader(path).Load() for v in e.summary.value]


def test_tensorboard_events_after_the_checkpoint_are_cut(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    w = SummaryWriter(str(tmp_path))
    for step in range(1, 11):
        w.add_scalar("x", float(step), step, walltime=1000.0 + step)
    w.add_scalar("late", 0.0, 5, walltime=2000.0)  # a step already counted, written later
    w.close()
    (path,) = glob.glob(str(tmp_path / "events.out.tfevents.*"))
    with open(path, "ab") as f:
        f.write(b"\x10\x00\x00\x00\x00\x00\x00\x00\x00")  # a torn record, as from a kill
    assert cut_events(path, max_step=6, max_wall=1500.0) == 5
    assert events(path) == [(s, "x") for s in range(1, 7)]
    assert cut_events(path, max_step=6, max_wall=None) == 0


# --- 3. fresh random streams after a resume ----------------------------------------------------
def test_actor_seeds_differ_by_actor_restart_and_resume():
    seeds = {actor_seed(7, a, i, r) for a in range(20) for i in range(20) for r in range(20)}
    assert len(seeds) == 20 ** 3
    assert actor_seed(7, 0, 0, 0) == 7 + 0  # an unresumed run keeps its old seeds


@pytest.mark.parametrize("env_id", ["PongNoFrameskip-v4", "MinAtar/Breakout-v1"])
def test_envs_take_the_seeds_of_a_run_resumed_many_times(env_id):
    # A third resume gave seeds above 2**31, which ALE refused: every actor died at reset.
    seeds = [actor_seed(s, a, 0, r) for s in (0, 2**40) for a in range(4) for r in range(12)]
    assert all(0 <= x < SEED_SPACE for x in seeds)
    assert len(set(seeds)) == len(seeds)
    env = make_batched_env(env_id, 2, EnvOptions(), seed=SEED_SPACE - 1)  # the largest
    try:
        assert env.reset().shape[0] == 2
    finally:
        env.close()


def test_a_resumed_run_counts_its_resumes_and_seeds_its_actors_by_them(tmp_path):
    cfg = config()
    first = learner_for(cfg, tmp_path / "a")
    assert first.actors.resumes == 0
    checkpoint = load_checkpoint(first.save())
    second = learner_for(cfg, tmp_path / "b", checkpoint)
    assert second.counters.resumes == second.actors.resumes == 1
    third = learner_for(cfg, tmp_path / "c", load_checkpoint(second.save()))
    assert third.actors.resumes == 2


def test_ppo_minibatch_order_goes_on_after_a_resume(tmp_path):
    cfg = config(agent="ppo")
    first = learner_for(cfg, tmp_path / "a")
    torch.randperm(8, generator=first.learners[0].agent.generator)  # the original drew once
    resumed = learner_for(cfg, tmp_path / "b", load_checkpoint(first.save()))
    assert torch.equal(torch.randperm(8, generator=first.learners[0].agent.generator),
                       torch.randperm(8, generator=resumed.learners[0].agent.generator))


# --- 4. a resume from an older checkpoint starts a branch ---------------------------------------
def test_resume_from_an_older_checkpoint_moves_the_later_ones_aside(tmp_path):
    run = str(tmp_path)
    for updates in (100, 200, 300):
        save_checkpoint(run, updates, {"updates": updates})
    older = os.path.join(run, "checkpoint_000000100.pt")
    assert start_branch(run, older, 100) == ["checkpoint_000000200.pt",
                                              "checkpoint_000000300.pt"]
    assert torch.load(os.path.join(run, "checkpoint.pt"))["updates"] == 100
    assert sorted(os.listdir(os.path.join(run, "superseded"))) == [
        "checkpoint_000000200.pt", "checkpoint_000000300.pt"]
    for updates in (150, 160, 170):  # the new branch rotates among its own
        save_checkpoint(run, updates, {"updates": updates}, keep=3)
    assert sorted(p for p in os.listdir(run) if p.startswith("checkpoint_")) == [
        "checkpoint_000000150.pt", "checkpoint_000000160.pt", "checkpoint_000000170.pt"]
    assert torch.load(os.path.join(run, "checkpoint.pt"))["updates"] == 170


def test_a_save_prunes_what_an_exit_before_the_pruning_left(tmp_path):
    """A second signal (or kill -9) between a checkpoint's rename and the pruning leaves
    keep + 1 numbered files; the next save brings them back to keep, newest kept."""
    run = str(tmp_path)
    for updates in (1, 2):
        save_checkpoint(run, updates, {"updates": updates}, keep=2)
    torch.save({"updates": 3}, os.path.join(run, "checkpoint_000000003.pt"))  # not pruned
    save_checkpoint(run, 4, {"updates": 4}, keep=2)
    assert sorted(p for p in os.listdir(run) if p.startswith("checkpoint_")) == [
        "checkpoint_000000003.pt", "checkpoint_000000004.pt"]
    assert torch.load(os.path.join(run, "checkpoint.pt"))["updates"] == 4


# --- 5. frame pools sized for actor restarts; drops reported ----------------------------------
def test_frame_pool_holds_live_resumed_and_restarted_chains():
    """The worst case of the plan's sizing: every chain head costs a full stack (row 0
    not reset-padded), a resumed storage's chains (E), the live ones (E), and the chains
    that --max_actor_restarts deaths leave behind (restarts x envs per actor), all
    resident at once. The old sizing (2E chain heads) ran out here."""
    from tests.test_replay_storage import FakeAle, make_batch, spec

    cfg = config(worker_count=2, envs_per_worker=2, max_actor_restarts=3)
    t, c, capacity = 5, 4, 40
    info = EnvInfo((c, 2, 2), "uint8", 3, "atari", 4, c)
    heads = make_plan(cfg, info).max_chain_heads
    assert heads == 2 * 4 + 3 * 2
    gen = torch.Generator().manual_seed(0)

    def env():
        e = FakeAle(gen, c, (2, 2), 256, p_reset=0.0)
        e.stack = torch.randint(1, 256, e.stack.shape, generator=gen, dtype=torch.uint8)
        return e

    storage = RolloutStorage(capacity, t, spec(t, (c, 2, 2)), pixel_stack=c,
                             max_chain_heads=heads)
    position = 0

    def put(e):
        nonlocal position
        storage.put(make_batch(gen, e.rollout(t), columns=1), 0, position % capacity)
        position += 1

    resumed = [env() for _ in range(4)]  # the run before the resume filled the storage
    for k in range(capacity):
        put(resumed[k % 4])
    live = [env() for _ in range(4)]
    for e in live:
        put(e)
    for _ in range(3):  # actor 0 dies three times; each incarnation sends one rollout
        live[0], live[1] = env(), env()
        put(live[0])
        put(live[1])
    assert storage.frames_in_use() > capacity * t + c * 2 * 4  # the old pool's size


def test_drops_are_logged_and_in_the_summary(tmp_path):
    learner = learner_for(config(replay_parameters=replays(QUEUE % 0.5, STANDARD % (100, 0.5))),
                          tmp_path)
    learner.learners[0].mixer.replays[1].dropped = 3
    learner.status()
    run = learner.report.run_dir.path
    assert "replay 1 (standard, uniform" in open(os.path.join(run, "run.log")).read()
    assert json.load(open(os.path.join(run, "summary.json")))["replay_dropped"] == [0, 3]


# --- 6. what a stop loses --------------------------------------------------------------------
def test_rollouts_finishing_during_the_stop_are_dropped_uncounted(tmp_path):
    cfg = config()
    learner = learner_for(cfg, tmp_path)
    feed(learner, 2)  # received and queued: counted by the actors' messages, not trained
    late = learner.slots.take(2)
    learner.actors.close = lambda: [FinishedRollout(tuple(late), [(9.0, 30), (7.0, 12)])]
    before = dict(vars(learner.counters))
    learner.close()
    assert vars(learner.counters) == before  # no env steps, no episodes of late rollouts
    assert learner.stop_losses == {"late_env_steps_dropped": 2 * cfg.r_f_steps,
                                   "late_episodes_dropped": 2,
                                   "queued_env_steps_not_trained": 2 * cfg.r_f_steps}
    assert len(learner.slots.free) == learner.slots.num_slots
    assert learner.summary()["stop"] == learner.stop_losses


def test_a_storage_laid_out_another_way_is_refused_unchanged():
    from tests.test_replay_storage import spec

    t, c = 4, 2
    small = RolloutStorage(5, t, spec(t, (c, 3, 3)), pixel_stack=c, max_chain_heads=2)
    big = RolloutStorage(5, t, spec(t, (c, 3, 3)), pixel_stack=c, max_chain_heads=4)
    state = small.state_dict()
    assert "max_chain_heads 2 -> 4" in big.state_problem(state)
    before = big.state_dict()
    with pytest.raises(ValueError):
        big.load_state_dict(state)
    assert all(torch.equal(before["buffers"][k], v)
               for k, v in big.state_dict()["buffers"].items())
