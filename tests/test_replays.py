"""The standard and custom replays against hand-made inputs: FIFO wrap-around,
state round trips, uniform frequencies, elite and attentive picks with controlled
features, lambda annealing counted in updates, elite insertion, concurrency, and
the mixer's exact composition with the replayed mask."""

from __future__ import annotations

import threading

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from replay.config import ReplaySpec, parse_replay_parameters
from replay.mixer import BatchMixer, Prefetcher, build_replays
from replay.queue import QueueReplay
from replay.storage_replay import StorageReplay, planned_bytes
from workers.slots import SlotPool, rollout_spec

T = 3
SPEC = rollout_spec(T, (2,), "float32", 3)


def entry(text: str) -> ReplaySpec:
    entries, errors = parse_replay_parameters(f"[{text}]", 0)
    assert not errors, errors
    return entries[0]


def fill(pool: SlotPool, index: int, ident: float) -> None:
    """Slot `index` holds a rollout identified by obs[..., 0] == reward == ident."""
    pool.buffers["obs"][:, index] = ident
    pool.buffers["reward"][:, index] = ident
    pool.buffers["logits"][:, index] = 0.0


def make(text: str, capacity: int, features_fn=None, fill_in=0.0, schedule=100.0):
    pool = SlotPool(SPEC, num_slots=4)
    replay = StorageReplay(entry(text.replace("CAP", str(capacity))), pool, SPEC, T, None,
                           max_chain_heads=4, fill_in_factor=fill_in, features_fn=features_fn,
                           schedule_updates=schedule)
    return pool, replay


def add(pool, replay, ident: float) -> None:
    (i,) = pool.take(1)
    fill(pool, i, ident)
    assert replay.add(i) is False
    pool.release([i])  # the mixer frees it: the replay copied it


def idents(batch) -> list[float]:
    return batch["reward"][0].tolist()


STANDARD = '{"type": "standard", "capacity": CAP, "sample_ratio": 1}'


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 12), st.integers(0, 40))
def test_fifo_wraps_around_keeping_the_newest(capacity, n_added):
    pool, replay = make(STANDARD, capacity)
    for k in range(n_added):
        add(pool, replay, float(k))
    assert len(replay) == min(capacity, n_added)
    if n_added:
        got = sorted(idents(replay.storage.get(replay.storage.resident_positions())))
        assert got == [float(k) for k in range(max(0, n_added - capacity), n_added)]


@settings(max_examples=20, deadline=None)
@given(st.integers(1, 8), st.integers(1, 20), st.booleans())
def test_state_dict_round_trip(capacity, n_added, include_data):
    pool, replay = make(STANDARD, capacity)
    for k in range(n_added):
        add(pool, replay, float(k))
    replay.set_updates(7)
    replay.sample(1)
    state = replay.state_dict(include_data)
    _, fresh = make(STANDARD, capacity)
    fresh.load_state_dict(state)
    assert torch.equal(fresh.counts, replay.counts)
    assert (fresh.next_position, fresh.updates) == (replay.next_position, replay.updates)
    assert torch.equal(fresh.generator.get_state(), replay.generator.get_state())
    if include_data:
        pos = replay.storage.resident_positions()
        assert idents(fresh.storage.get(pos)) == idents(replay.storage.get(pos))
        assert idents(fresh.sample(1)) == idents(replay.sample(1))  # same RNG, same data
    else:
        assert len(fresh) == 0


def test_uniform_sampling_is_uniform_and_without_replacement_within_a_batch():
    pool, replay = make(STANDARD, 10)
    for k in range(10):
        add(pool, replay, float(k))
    counts = torch.zeros(10)
    for _ in range(2000):
        got = idents(replay.sample(4))
        assert len(set(got)) == 4
        counts[torch.tensor(got).long()] += 1
    expected = 2000 * 4 / 10
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 30.0, counts  # 9 degrees of freedom: p < 0.001


def logits_features(table: dict[float, float]):
    """features_fn: the current policy's logits for a rollout identified by obs[..., 0]
    are (table[ident], 0, 0): its distance to the stored zero logits is |table[ident]|."""
    def fn(obs, state=None):
        ident = obs[..., 0]
        out = torch.zeros(*obs.shape[:-1], 3)
        out[..., 0] = torch.tensor([table.get(float(v), 0.0) for v in ident.reshape(-1)]
                                   ).reshape(ident.shape)
        return out
    return fn


ELITE = ('{"type": "custom", "capacity": CAP, "sample_ratio": 1, "lambda_batch_multiplier": 6,'
         ' "alfa_annealing_factor": 1.0, "elite_sampling_strategy": "strategy1"}')


def test_elite_picks_the_least_off_policy_candidates():
    table = {float(k): float(10 - k) for k in range(10)}  # rollout 9 is the most on-policy
    pool, replay = make(ELITE, 10, logits_features(table))
    for k in range(10):
        add(pool, replay, float(k))
    # lambda 6 x n 2 = 12 > 10 candidates: all are drawn, the two closest win
    assert sorted(idents(replay.sample(2))) == [8.0, 9.0]
    assert replay.counts.sum() == 2


def test_strategy3_prefers_the_least_sampled():
    table = {float(k): float(10 - k) for k in range(10)}
    pool, replay = make(ELITE.replace("strategy1", "strategy3"), 10, logits_features(table))
    for k in range(10):
        add(pool, replay, float(k))
    first, second = sorted(idents(replay.sample(2))), sorted(idents(replay.sample(2)))
    assert first == [8.0, 9.0] and second == [6.0, 7.0]


def test_lambda_anneals_with_learner_updates_not_sampling_calls():
    pool, replay = make(ELITE, 10, logits_features({}), schedule=100.0)
    for k in range(10):
        add(pool, replay, float(k))
    assert replay.current_lambda() == 6.0
    for _ in range(50):
        replay.sample(2)
    assert replay.current_lambda() == 6.0
    replay.set_updates(50)
    assert replay.current_lambda() == pytest.approx(3.5)
    replay.set_updates(100)
    assert replay.current_lambda() == 1.0
    assert replay.state_dict()["lambda"] == 1.0


@pytest.mark.parametrize("strategy", ["strategy1", "strategy2", "strategy3", "strategy4"])
def test_degenerate_cases_return_exactly_n(strategy):
    # equal distances, lambda 1, exactly n stored: no hang, n valid rollouts
    text = ELITE.replace("strategy1", strategy).replace('"lambda_batch_multiplier": 6',
                                                         '"lambda_batch_multiplier": 1')
    pool, replay = make(text, 4, logits_features({}))
    for k in range(3):
        add(pool, replay, float(k))
    assert replay.ready(3) and not replay.ready(4)
    got = idents(replay.sample(3))
    assert sorted(got) == [0.0, 1.0, 2.0]


def test_elite_insertion_overwrites_the_most_off_policy():
    table = {0.0: 1.0, 1.0: 9.0, 2.0: 2.0, 3.0: 0.5}
    text = ('{"type": "custom", "capacity": 4, "sample_ratio": 1, "insert_strategy": '
            '"elite_insertion", "elite_batch_size": 4}')
    pool, replay = make(text, 4, logits_features(table))
    for k in range(5):
        add(pool, replay, float(k))
    got = sorted(idents(replay.storage.get(replay.storage.resident_positions())))
    assert got == [0.0, 2.0, 3.0, 4.0]  # rollout 1 (distance 9) made room


def test_elite_insertion_ranks_once_for_a_quarter_of_its_candidates():
    # capacity = elite_batch_size = 8: every resident is a candidate; one ranking
    # serves 8 // 4 = 2 inserts, evicting the two most off-policy in turn
    table = {0.0: 1.0, 1.0: 9.0, 2.0: 2.0, 3.0: 0.5, 4.0: 7.0, 5.0: 3.0, 6.0: 0.1, 7.0: 0.2}
    calls = []

    def fn(obs, state=None):
        calls.append(obs.shape)
        return logits_features(table)(obs, state)

    text = ('{"type": "custom", "capacity": 8, "sample_ratio": 1, "insert_strategy": '
            '"elite_insertion", "elite_batch_size": 8}')
    pool, replay = make(text, 8, fn)
    for k in range(8):
        add(pool, replay, float(k))
    assert calls == []  # not full yet: FIFO, no ranking
    add(pool, replay, 8.0)
    add(pool, replay, 9.0)
    assert len(calls) == 1
    got = sorted(idents(replay.storage.get(replay.storage.resident_positions())))
    assert got == [0.0, 2.0, 3.0, 5.0, 6.0, 7.0, 8.0, 9.0]  # 1 (9.0) then 4 (7.0) went
    add(pool, replay, 10.0)  # the ranking is used up: a new one
    assert len(calls) == 2
    state = replay.state_dict()
    replay.victims = [0]
    replay.load_state_dict(state)
    assert replay.victims == []  # a restored replay ranks afresh


def test_attentive_prefers_rollouts_like_the_newest_states():
    def fn(obs, state=None):  # features: (ident, 1): cosine similarity favours similar idents
        ident = obs[..., 0]
        return torch.stack([ident, torch.ones_like(ident)], -1)

    text = ('{"type": "custom", "capacity": 10, "sample_ratio": 1, "sample_strategy": '
            '"attentive_sampling", "elite_sampling_strategy": "strategy1"}')
    pool, replay = make(text, 10, fn)
    for k in [0.0, 5.0, 0.1, 4.0, 0.2, 3.0, 2.0, 1.0]:
        add(pool, replay, k)
    for _ in range(8):  # the actors now visit states like 0
        add(pool, replay, 0.0)
    got = idents(replay.sample(3))
    assert max(got) <= 0.2


def test_concurrent_insert_and_sample():
    pool, replay = make(STANDARD, 50)
    for k in range(10):
        add(pool, replay, float(k))
    errors = []

    def sampler():
        try:
            for _ in range(300):
                batch = replay.sample(5)
                assert torch.equal(batch["obs"][..., 0], batch["reward"])  # never torn
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    thread = threading.Thread(target=sampler)
    thread.start()
    for k in range(10, 400):
        add(pool, replay, float(k))
    thread.join()
    assert not errors, errors


def test_mixer_composes_exact_batches_with_the_replayed_mask():
    pool = SlotPool(SPEC, num_slots=40)
    entries, errors = parse_replay_parameters(
        '[{"type": "queue", "sample_ratio": 0.7}, {"type": "standard", "capacity": 20,'
        ' "sample_ratio": 0.2}, {"type": "custom", "capacity": 20, "sample_ratio": 0.1}]', 10)
    assert not errors
    replays = build_replays(entries, pool, SPEC, T, None, max_chain_heads=4, fill_in_factor=0.0,
                            features_fn=logits_features({}), schedule_updates=10)
    mixer = BatchMixer(pool, replays, [0.7, 0.2, 0.1], 10)
    assert isinstance(replays[0], QueueReplay)
    for k in range(10):
        (i,) = pool.take(1)
        fill(pool, i, float(k))
        mixer.add(i)
    assert len(pool.free) == 30  # only the queue keeps slots
    prefetcher = Prefetcher(mixer, size=1)
    batch = prefetcher.get(timeout=5)
    prefetcher.close()
    assert batch["reward"].shape == (T + 1, 10)
    assert batch["replayed"].tolist() == [False] * 7 + [True] * 3
    assert idents({"reward": batch["reward"][:, :7]}) == [float(k) for k in range(7)]


def test_planned_bytes_match_the_storage_and_pong_fits_the_budget():
    pool, replay = make(STANDARD, 16)
    assert planned_bytes(replay.entry, SPEC, T, None, 4) == replay.storage.nbytes()
    pong = rollout_spec(20, (4, 84, 84), "uint8", 6)
    e = entry('{"type": "standard", "capacity": 1000, "sample_ratio": 1}')
    per_step = planned_bytes(e, pong, 20, 4, 16) / (1000 * 20)
    assert per_step <= 7.5 * 1024, per_step


def test_storage_row_and_field_subsets_equal_the_full_read():
    from replay.storage import RolloutStorage

    t, c = 6, 2
    spec = rollout_spec(t, (c, 3, 3), "uint8", 2)
    storage = RolloutStorage(8, t, spec, pixel_stack=c, max_chain_heads=8)
    g = torch.Generator().manual_seed(0)
    frames = torch.randint(1, 255, (40, 3, 3), generator=g, dtype=torch.uint8)
    for k in range(5):  # one env, consecutive rollouts of shifted stacks
        obs = torch.stack([frames[k * t + r: k * t + r + c] for r in range(t + 1)])
        batch = {"obs": obs[:, None], "logits": torch.randn(t + 1, 1, 2, generator=g)}
        for name, (shape, dtype) in spec.items():
            batch.setdefault(name, torch.zeros((shape[0], 1, *shape[1:]), dtype=dtype))
        storage.put(batch, 0, k)
    pos = torch.tensor([3, 0, 4])
    rows = torch.tensor([0, 3, 6])
    full = storage.get(pos)
    part = storage.get(pos, rows=rows, fields=("obs", "logits"))
    assert set(part) == {"obs", "logits"}
    for name in part:
        assert torch.equal(part[name], full[name][rows]), name


H = 4
SPEC_H = rollout_spec(T, (2,), "float32", 3, feature_size=H)
HIDDEN = ('{"type": "custom", "capacity": 10, "sample_ratio": 1, "features": "hidden",'
          ' "lambda_batch_multiplier": 6, "elite_sampling_strategy": "strategy1"}')


def test_elite_with_hidden_features_compares_the_stored_features():
    # stored behaviour features of rollout k: (k, 0, 0, 0); stored logits all 0. The
    # current hidden layer is (9, 0, 0, 0) everywhere: rollouts 9 and 8 are nearest.
    pool = SlotPool(SPEC_H, num_slots=4)
    seen = []

    def hidden_fn(obs, state=None):
        seen.append(obs.shape)
        out = torch.zeros(*obs.shape[:-1], H)
        out[..., 0] = 9.0
        return out

    replay = StorageReplay(entry(HIDDEN), pool, SPEC_H, T, None, max_chain_heads=4,
                           fill_in_factor=0.0, features_fn=hidden_fn, schedule_updates=100)
    for k in range(10):
        (i,) = pool.take(1)
        fill(pool, i, float(k))
        pool.buffers["features"][:, i] = 0.0
        pool.buffers["features"][:, i, 0] = float(k)
        replay.add(i)
        pool.release([i])
    batch = replay.sample(2)
    assert sorted(idents(batch)) == [8.0, 9.0]
    assert seen and all(s[-1] == 2 for s in seen)  # obs went to the hidden features_fn
    assert batch["features"].dtype == torch.float16
    assert batch["features"][:, :, 0].unique(dim=0).shape == (1, 2)  # whole rollouts


def test_hidden_features_are_stored_only_where_read_and_need_the_spec():
    entries, errors = parse_replay_parameters(
        '[{"type": "queue", "sample_ratio": 0.5}, {"type": "standard", "capacity": 20,'
        ' "sample_ratio": 0.2}, ' + HIDDEN.replace('"sample_ratio": 1', '"sample_ratio": 0.2')
        + ', {"type": "custom", "capacity": 20, "sample_ratio": 0.1}]', 0)
    assert not errors, errors
    pool = SlotPool(SPEC_H, num_slots=40)

    def logits_fn(obs, state=None):
        return torch.zeros(*obs.shape[:-1], 3)

    def hidden_fn(obs, state=None):
        return torch.zeros(*obs.shape[:-1], H)

    replays = build_replays(entries, pool, SPEC_H, T, None, max_chain_heads=4, fill_in_factor=0.0,
                            features_fn=logits_fn, schedule_updates=10,
                            hidden_features_fn=hidden_fn)
    assert replays[2].features_fn is hidden_fn and replays[3].features_fn is logits_fn
    assert "features" in replays[2].storage._specs
    assert "features" not in replays[1].storage._specs  # the others do not pay for it
    assert "features" not in replays[3].storage._specs
    for e, r in zip(entries[1:], replays[1:], strict=True):
        assert planned_bytes(e, SPEC_H, T, None, 4) == r.storage.nbytes()
    assert planned_bytes(entries[2], SPEC_H, T, None, 4) - \
        planned_bytes(entries[2], SPEC, T, None, 4) == 10 * (T + 1) * H * 2
    with pytest.raises(ValueError, match="hidden_features_fn"):
        build_replays(entries, pool, SPEC_H, T, None, max_chain_heads=4, fill_in_factor=0.0,
                      features_fn=logits_fn, schedule_updates=10)
    with pytest.raises(ValueError, match="feature_size"):
        StorageReplay(entries[2], SlotPool(SPEC, 4), SPEC, T, None, 4, 0.0, hidden_fn)
    # a batch mixing the queue (which has "features") with a replay without leaves it out
    mixer = BatchMixer(pool, [replays[0], replays[1]], [0.5, 0.5], 2)
    for k in range(3):
        (i,) = pool.take(1)
        fill(pool, i, float(k))
        mixer.add(i)
    batch = mixer.sample()
    assert "features" not in batch and batch["reward"].shape == (T + 1, 2)


def test_planned_bytes_count_hidden_features_in_float16():
    e = entry('{"type": "custom", "capacity": 1000, "sample_ratio": 1, "features": "hidden"}')
    plain = rollout_spec(20, (4, 84, 84), "uint8", 6)
    with_h = rollout_spec(20, (4, 84, 84), "uint8", 6, feature_size=512)
    extra = planned_bytes(e, with_h, 20, 4, 16) - planned_bytes(e, plain, 20, 4, 16)
    assert extra == 1000 * 21 * 512 * 2
    assert planned_bytes(e, with_h, 20, 4, 16) / (1000 * 20) > 7.5 * 1024  # README says so
