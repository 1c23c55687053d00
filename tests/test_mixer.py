"""Batch composition and the queue replay."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from replay.config import batch_shares, parse_replay_parameters
from replay.mixer import BatchMixer
from replay.queue import QueueReplay
from workers.slots import SlotPool, rollout_spec


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 512), st.lists(st.integers(1, 1000), min_size=1, max_size=6))
def test_shares_are_exact_and_near_the_ratios(batch_size, weights):
    ratios = [w / sum(weights) for w in weights]
    shares = batch_shares(batch_size, ratios)
    assert sum(shares) == batch_size
    for n, r in zip(shares, ratios, strict=True):
        assert abs(n - batch_size * r) < 1.0


def test_largest_remainder_examples():
    assert batch_shares(10, [0.7, 0.2, 0.1]) == [7, 2, 1]
    assert batch_shares(32, [0.5, 0.5]) == [16, 16]
    assert batch_shares(3, [0.5, 0.5]) == [2, 1]


def test_replay_parameters_errors_name_entry_and_key():
    _, errors = parse_replay_parameters('[{"type": "queue", "sample_ratio": 1, "foo": 2}]', 8)
    assert errors == ["entry 0: unknown key 'foo' for type 'queue'"]
    _, errors = parse_replay_parameters('[{"type": "queue", "capacity": 0, "sample_ratio": 1}]', 8)
    assert "entry 0: 'capacity'" in errors[0]
    _, errors = parse_replay_parameters('{"type": "queue"}', 8)
    assert "non-empty JSON list" in errors[0]
    _, errors = parse_replay_parameters(
        '[{"type": "queue", "sample_ratio": 0.5}, {"type": "queue", "sample_ratio": 0.5}]', 8)
    assert any("at most one 'queue'" in e for e in errors)


def test_custom_entries_are_checked_key_by_key():
    good = ('[{"type": "queue", "capacity": 1, "sample_ratio": 0.5}, {"type": "custom", '
            '"capacity": 1000, "sample_ratio": 0.5, "dist_function": "ln_norm", '
            '"sample_strategy": "elite_sampling", "lambda_batch_multiplier": 6, '
            '"alfa_annealing_factor": 2.0}]')
    entries, errors = parse_replay_parameters(good, 32)
    assert not errors and entries[1].elite_sampling_strategy == "strategy3"
    _, errors = parse_replay_parameters(good.replace('"ln_norm"', '"manhattan"')
                                        .replace("6,", "0.5,"), 32)
    assert any(e.startswith("entry 1: 'dist_function'") for e in errors)
    assert any(e.startswith("entry 1: 'lambda_batch_multiplier'") for e in errors)
    _, errors = parse_replay_parameters(good.replace('"capacity": 1000', '"capacity": "big"'), 32)
    assert any(e.startswith("entry 1: 'capacity'") for e in errors)
    _, errors = parse_replay_parameters(
        '[{"type": "elite", "capacity": 10, "sample_ratio": 1, "bogus": 1}]', 32)
    assert "entry 0: unknown key 'bogus' for type 'elite'" in errors
    _, errors = parse_replay_parameters('[{"type": "elite", "capacity": 10, "sample_ratio": 1}]',
                                        32)
    assert errors == ["entry 0: 'capacity' 10 is below its share of the batch (32 rollouts)"]
    _, errors = parse_replay_parameters(
        '[{"type": "queue", "sample_ratio": 0.7}, {"type": "standard", "capacity": 100, '
        '"sample_ratio": 0.2}, {"type": "standard", "capacity": 100, "sample_ratio": 0.1}]', 32)
    assert not errors  # 0.7 + 0.2 + 0.1 is 1 within 1e-6


def test_queue_replay_is_fifo_and_frees_each_slot_once():
    pool = SlotPool(rollout_spec(2, (3,), "float32", 2), num_slots=6)
    taken = pool.take(6)
    for i in taken:
        pool.buffers["reward"][:, i] = float(i)
    mixer = BatchMixer(pool, [QueueReplay(pool)], [1.0], batch_size=2)
    for i in taken[:3]:
        mixer.add(i)
    assert mixer.ready()
    batch = mixer.sample()
    assert batch["reward"].shape == (3, 2)
    assert batch["reward"][0].tolist() == [float(taken[0]), float(taken[1])]
    assert not mixer.ready()
    assert sorted(pool.free) == sorted(taken[:2])
    mixer.release_all()
    assert sorted(pool.free) == sorted(taken[:3])


def test_a_replay_filling_in_takes_its_share_from_the_queue_and_slots_never_run_out():
    """Queue 0.5 + standard 0.5 whose fill-in (100 rollouts) is more than the slot pool
    (8): the mixer must not wait for the fill-in while the queue holds every slot (the
    actors would stop for good); it trains on queue-only batches until then."""
    from replay.config import ReplaySpec
    from replay.storage_replay import StorageReplay

    spec = rollout_spec(2, (3,), "float32", 2)
    pool = SlotPool(spec, num_slots=8)
    entry = ReplaySpec(type="standard", capacity=2000, sample_ratio=0.5)
    storage = StorageReplay(entry, pool, spec, 2, None, max_chain_heads=4,
                            fill_in_factor=0.05, schedule_updates=10.0)
    mixer = BatchMixer(pool, [QueueReplay(pool), storage], [0.5, 0.5], batch_size=4)
    produced = 0
    for _ in range(200):  # an actor: take a free slot, write it, hand it over
        if mixer.ready():
            batch = mixer.sample()
            assert batch["reward"].shape == (3, 4)
            expected = [False] * 4 if len(storage) < 100 else [False, False, True, True]
            assert batch["replayed"].tolist() == expected
        (i,) = pool.take(1)
        pool.buffers["reward"][:, i] = float(produced)
        mixer.add(i)
        produced += 1
    assert produced == 200 and len(storage) == 200
    assert mixer.current_shares() == [2, 2]
