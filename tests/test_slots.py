"""Slot ownership: a slot held by the learner side is never written by an actor, and
the slots of an actor that dies are reclaimed and it is replaced."""

from __future__ import annotations

import os
import signal
import time

import torch

from tests.actor_harness import actors


def test_held_slots_do_not_change_while_actors_run():
    with actors(workers=2, envs=2, unroll=4, num_slots=12) as h:
        held = []
        while len(held) < 4:
            for indices, *_ in h.rollouts():
                held.extend(indices)
        idx = torch.tensor(held)
        snapshot = h.slots.gather(idx)
        # an adversarially slow learner: keep the slots while the actors cycle the rest
        # 50 times over (the bound only fires if they stop producing)
        deadline = time.time() + 120
        recycled = 0
        while recycled < 50 * (12 - len(held)):
            assert time.time() < deadline, f"the actors stopped producing ({recycled} slots)"
            for others, *_ in h.rollouts():
                assert not set(others) & set(held), "a held slot came back full"
                h.slots.release(others)
                recycled += len(others)
        now = h.slots.gather(idx)
        for name in snapshot:
            assert torch.equal(snapshot[name], now[name]), name


def test_killed_actor_is_replaced_and_its_slots_reclaimed():
    with actors(workers=2, envs=2, unroll=4, num_slots=12, max_restarts=1) as h:
        for indices, *_ in h.rollouts():
            h.slots.release(indices)
        victim = h.pool.actors[0]
        os.kill(victim.process.pid, signal.SIGKILL)
        victim.process.join(5)
        held_by_victim = set(victim.held)
        h.pool.check()
        assert h.pool.restarts == 1
        assert h.pool.actors[0] is not victim and h.pool.actors[0].process.is_alive()
        assert held_by_victim <= set(h.slots.free) | set(h.pool.actors[0].held) | \
            set(h.pool.actors[1].held)
        # the replacement produces rollouts, and no slot is lost: every slot is free,
        # held by an actor, or in a rollout we received
        for _ in range(20):
            for indices, *_ in h.rollouts():
                h.slots.release(indices)
        # stop the actors: what they sent meanwhile comes back, what they held is freed
        for indices, *_ in h.pool.close():
            h.slots.release(indices)
        assert sorted(h.slots.free) == list(range(12)), "slots leaked or doubled"
