"""Slot ownership: a slot held by the learner side is never written by an actor."""

from __future__ import annotations

import time

import torch

from tests.actor_harness import actors


def test_held_slots_do_not_change_while_actors_run():
    with actors(workers=2, envs=2, unroll=4, num_slots=12) as (pool, _m, _w, _e):
        held = list(pool.full.get(timeout=30)) + list(pool.full.get(timeout=30))
        idx = torch.tensor(held)
        snapshot = pool.gather(idx)
        # an adversarially slow learner: keep the slots while the actors cycle the rest
        deadline = time.time() + 3.0
        recycled = 0
        while time.time() < deadline:
            try:
                others = pool.full.get(timeout=0.1)
            except Exception:  # noqa: BLE001 - queue.Empty
                continue
            assert not set(others) & set(held), "a held slot came back full"
            pool.release(others)
            recycled += len(others)
        assert recycled >= 10, "the actors should have kept producing into other slots"
        now = pool.gather(idx)
        for name in snapshot:
            assert torch.equal(snapshot[name], now[name]), name
