"""RolloutStorage: exact round trips, frame sharing, the pool bound, threads, checkpoints."""

from __future__ import annotations

import io
import threading
import time

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from replay.storage import FramePoolExhaustedError, RolloutStorage
from workers.slots import rollout_spec

NUM_ACTIONS = 3


def spec(t: int, obs_shape: tuple[int, ...], obs_dtype=torch.uint8, num_actions=NUM_ACTIONS):
    """workers.slots.rollout_spec with a torch dtype for obs."""
    out = rollout_spec(t, obs_shape, "float32", num_actions)
    out["obs"] = ((t + 1, *obs_shape), obs_dtype)
    return out


class FakeAle:
    """One env of a toy ALE: every step shifts the stack by one new frame; a reset
    (probability `p_reset`) makes it `[0, .., 0, frame]`. Few pixel values make equal
    frames (and all-zero frames) across envs and steps common."""

    def __init__(self, gen, c, frame_shape=(2, 2), values=3, p_reset=0.15):
        self.gen, self.c, self.frame_shape, self.values, self.p_reset = (
            gen, c, frame_shape, values, p_reset)
        self.stack = torch.zeros((c, *frame_shape), dtype=torch.uint8)
        self.stack[-1] = self._frame()
        self.seq = 0

    def _frame(self):
        return torch.randint(0, self.values, self.frame_shape, generator=self.gen,
                             dtype=torch.uint8)

    def step(self):
        frame = self._frame()
        if torch.rand((), generator=self.gen) < self.p_reset:
            self.stack = torch.zeros_like(self.stack)
            self.stack[-1] = frame
        else:
            self.stack = torch.cat([self.stack[1:], frame[None]])

    def rollout(self, t):
        """obs uint8 [T+1, C, *frame_shape]; row 0 is the previous rollout's row T."""
        rows = [self.stack.clone()]
        for _ in range(t):
            self.step()
            rows.append(self.stack.clone())
        self.seq += 1
        return torch.stack(rows)


def make_batch(gen, obs, columns=2, column=0, seq=0, num_actions=NUM_ACTIONS):
    """A batch [T+1, columns, ...] holding `obs` (one rollout) in `column`, noise elsewhere."""
    t1 = obs.shape[0]
    obs_b = torch.randint(0, 256, (t1, columns, *obs.shape[1:]), generator=gen).to(obs.dtype)
    obs_b[:, column] = obs
    return {
        "obs": obs_b,
        "action": torch.randint(0, num_actions, (t1, columns), generator=gen),
        "logits": torch.randn((t1, columns, num_actions), generator=gen),
        "value": torch.randn((t1, columns), generator=gen),
        "reward": torch.randn((t1, columns), generator=gen),
        "done": torch.rand((t1, columns), generator=gen) < 0.2,
        "truncated": torch.rand((t1, columns), generator=gen) < 0.1,
        "bootstrap_value": torch.randn((t1, columns), generator=gen),
        "version": torch.full((t1, columns), seq, dtype=torch.int64),
    }


def column_of(batch, column):
    return {k: v[:, column].clone() for k, v in batch.items()}


def assert_matches(storage, reference):
    """Every stored position returns exactly what was put (one get of all of them)."""
    positions = sorted(reference)
    got = storage.get(torch.tensor(positions))
    for i, p in enumerate(positions):
        for name, want in reference[p].items():
            assert torch.equal(got[name][:, i], want), (p, name)


def check_invariants(s: RolloutStorage):
    """Refcounts match the index arrays, the free stack holds exactly the unused frames,
    and the frames in resident tails are pairwise different in content."""
    f, sent = s.pool_frames, s._sentinel
    resident = s._resident.nonzero().squeeze(1)
    entries = s._index[:, resident].reshape(-1).long()
    entries = entries[entries != sent]
    counts = torch.bincount(entries, minlength=f + 1).int()
    assert torch.equal(counts[:f], s._refcount[:f])
    used = int((counts[:f] > 0).sum())
    assert s.frames_in_use() == used
    free = s._free[: s._n_free].long()
    assert len(set(free.tolist())) == s._n_free
    assert bool((counts[free] == 0).all())
    tails = sorted(set(s._index[-1, resident].reshape(-1).tolist()) - {sent})
    contents = {s._pool[i].numpy().tobytes() for i in tails}
    assert len(contents) == len(tails)
    assert bool(s._pool[sent].eq(0).all())


# ---------------------------------------------------------------------- pixels


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    c=st.sampled_from([1, 2, 4]),
    t=st.integers(1, 6),
    capacity=st.integers(1, 6),
    num_envs=st.integers(1, 4),
    values=st.sampled_from([2, 3, 256]),
    p_reset=st.sampled_from([0.0, 0.2, 0.6]),
    ops=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 5), st.booleans()),
                 min_size=1, max_size=30),
)
def test_get_returns_what_was_put_after_any_overwrites(
        seed, c, t, capacity, num_envs, values, p_reset, ops):
    gen = torch.Generator().manual_seed(seed)
    envs = [FakeAle(gen, c, (2, 2), values, p_reset) for _ in range(num_envs)]
    s = RolloutStorage(capacity, t, spec(t, (c, 2, 2)), pixel_stack=c,
                       max_chain_heads=capacity)
    reference, origin = {}, {}
    for env_choice, pos_choice, skip in ops:
        env_id = env_choice % num_envs
        env = envs[env_id]
        obs = env.rollout(t)
        if skip:  # the env moves on without this rollout being stored: a broken chain
            continue
        position = pos_choice % capacity
        column = int(torch.randint(0, 2, (), generator=gen))
        batch = make_batch(gen, obs, column=column, seq=env.seq)
        s.put(batch, column, position)
        reference[position] = column_of(batch, column)
        origin[position] = (env_id, env.seq)
        check_invariants(s)
        if t >= c:  # the bound proved in replay/storage.py, with structural chain heads
            stored = set(origin.values())
            heads = sum((e, q - 1) not in stored for e, q in stored)
            assert s.frames_in_use() <= t * len(stored) + c * heads
        probe = int(torch.randint(0, capacity, (), generator=gen))
        if probe in reference:
            got = s.get(torch.tensor([probe]))
            assert torch.equal(got["obs"][:, 0], reference[probe]["obs"])
    assert len(s) == len(reference)
    assert_matches(s, reference)
    if reference:
        assert_rows_match(s, list(reference)[::-1], [t, 0])


def assert_rows_match(s: RolloutStorage, positions: list[int], rows: list[int]) -> None:
    """get(rows=, fields=) (what elite distances read) is get() cut to those rows."""
    whole = s.get(torch.tensor(positions))
    part = s.get(torch.tensor(positions), rows=torch.tensor(rows), fields=("obs", "logits"))
    assert set(part) == {"obs", "logits"}
    for name, value in part.items():
        assert torch.equal(value, whole[name][rows])
    # windows of L+1 rows from a start per column (what an n-step sampler reads)
    t = s.unroll_length
    for length in (1, t):
        starts = torch.tensor([(3 * k) % (t - length + 1) for k in range(len(positions))])
        window = s.get(torch.tensor(positions), starts=starts, length=length)
        assert set(window) == set(whole)
        for name, value in window.items():
            assert value.shape == (length + 1, len(positions), *whole[name].shape[2:])
            for k, start in enumerate(starts.tolist()):
                assert torch.equal(value[:, k], whole[name][start:start + length + 1, k])
    with pytest.raises(IndexError, match="windows of"):
        s.get(torch.tensor(positions[:1]), starts=torch.tensor([t]), length=1)


def test_consecutive_rollouts_share_frames_and_fifo_never_runs_out():
    """FIFO over E envs in random order: H <= E, so max_chain_heads=E is enough."""
    gen = torch.Generator().manual_seed(1)
    t, c, capacity, num_envs = 5, 4, 8, 3
    envs = [FakeAle(gen, c, (4, 4), 256, p_reset=0.1) for _ in range(num_envs)]
    s = RolloutStorage(capacity, t, spec(t, (c, 4, 4)), pixel_stack=c,
                       max_chain_heads=num_envs)
    assert s.pool_frames == capacity * t + c * num_envs
    reference = {}
    for i in range(200):
        env = envs[int(torch.randint(0, num_envs, (), generator=gen))]
        batch = make_batch(gen, env.rollout(t), columns=1, seq=i)
        s.put(batch, 0, i % capacity)
        reference[i % capacity] = column_of(batch, 0)
    check_invariants(s)
    assert_matches(s, reference)
    # with 256 pixel values no two frames coincide: only the 3 heads pay for row 0
    assert s.frames_in_use() <= capacity * t + c * num_envs


def test_successor_overwriting_its_predecessor_in_place():
    """Capacity 1: each rollout reuses the tail of the one it replaces."""
    gen = torch.Generator().manual_seed(2)
    t, c = 4, 4
    env = FakeAle(gen, c, (3, 3), 256, p_reset=0.0)
    env.rollout(t)  # a full stack at row 0
    s = RolloutStorage(1, t, spec(t, (c, 3, 3)), pixel_stack=c, max_chain_heads=1)
    assert s.pool_frames == t + c
    for i in range(10):
        batch = make_batch(gen, env.rollout(t), columns=1, seq=i)
        s.put(batch, 0, 0)
        assert_matches(s, {0: column_of(batch, 0)})
        assert s.frames_in_use() == t + c
        check_invariants(s)


def test_reset_rows_and_zero_frames_cost_nothing():
    gen = torch.Generator().manual_seed(3)
    t, c = 3, 4
    obs = torch.zeros((t + 1, c, 2, 2), dtype=torch.uint8)
    obs[0, -1] = 7  # a reset at row 0: [0, 0, 0, f]
    obs[1] = torch.cat([obs[0, 1:], torch.full((1, 2, 2), 9, dtype=torch.uint8)])
    obs[2, -1] = 5  # a reset in the middle
    obs[3] = torch.cat([obs[2, 1:], torch.zeros((1, 2, 2), dtype=torch.uint8)])  # black frame
    s = RolloutStorage(2, t, spec(t, (c, 2, 2)), pixel_stack=c)
    batch = make_batch(gen, obs, columns=1)
    s.put(batch, 0, 1)
    assert s.frames_in_use() == 3  # 7, 9, 5
    assert_matches(s, {1: column_of(batch, 0)})
    s.get([1])["obs"].fill_(3)
    assert_matches(s, {1: column_of(batch, 0)})  # get returns copies


def test_pool_exhaustion_raises_and_changes_nothing():
    gen = torch.Generator().manual_seed(4)
    t, c = 4, 4
    envs = [FakeAle(gen, c, (4, 4), 256, p_reset=0.0) for _ in range(3)]
    for env in envs:
        env.rollout(t)  # predecessors that are never stored: every rollout is a head
    s = RolloutStorage(3, t, spec(t, (c, 4, 4)), pixel_stack=c, max_chain_heads=1)
    assert s.pool_frames == 3 * t + c
    reference = {}
    for pos in (0, 1):
        batch = make_batch(gen, envs[pos].rollout(t), columns=1)
        s.put(batch, 0, pos)
        reference[pos] = column_of(batch, 0)
    assert s.frames_in_use() == 2 * (t + c)
    before = s.state_dict()
    with pytest.raises(FramePoolExhaustedError, match="max_chain_heads"):
        s.put(make_batch(gen, envs[2].rollout(t), columns=1), 0, 2)
    after = s.state_dict()
    assert torch.equal(before["refcount"], after["refcount"])
    assert torch.equal(before["index"], after["index"])
    assert before["n_free"] == after["n_free"]
    assert len(s) == 2
    with pytest.raises(IndexError, match="never written"):
        s.get(torch.tensor([2]))
    assert_matches(s, reference)
    # overwriting a head frees its frames: the third env fits at position 0
    batch = make_batch(gen, envs[2].rollout(t), columns=1)
    s.put(batch, 0, 0)
    reference[0] = column_of(batch, 0)
    assert_matches(s, reference)
    check_invariants(s)


def test_bad_input_is_refused():
    t, c = 2, 2
    s = RolloutStorage(2, t, spec(t, (c, 2, 2)), pixel_stack=c)
    gen = torch.Generator().manual_seed(5)
    batch = make_batch(gen, torch.ones((t + 1, c, 2, 2), dtype=torch.uint8))
    with pytest.raises(IndexError):
        s.put(batch, 0, 2)
    with pytest.raises(IndexError):
        s.put(batch, 2, 0)
    with pytest.raises(ValueError, match="logits"):
        s.put({**batch, "logits": batch["logits"].double()}, 0, 0)
    with pytest.raises(KeyError):
        s.put({k: v for k, v in batch.items() if k != "reward"}, 0, 0)
    with pytest.raises(ValueError, match="rollout_spec"):
        RolloutStorage(2, t, {"obs": ((c, 2, 2), torch.uint8)}, pixel_stack=c)
    with pytest.raises(ValueError, match="pixel_stack"):
        RolloutStorage(2, t, spec(t, (3, 2, 2)), pixel_stack=c)


# ---------------------------------------------------------------------- vectors


def test_vector_obs_round_trip_and_overwrite():
    gen = torch.Generator().manual_seed(6)
    t, d, capacity = 3, 5, 4
    s = RolloutStorage(capacity, t, spec(t, (d,), torch.float32))
    assert s.frames_in_use() == 0 and s.pool_frames == 0
    reference = {}
    for i in range(11):
        batch = make_batch(gen, torch.randn((t + 1, d), generator=gen), columns=3,
                           column=i % 3, seq=i)
        pos = int(torch.randint(0, capacity, (), generator=gen))
        s.put(batch, i % 3, pos)
        reference[pos] = column_of(batch, i % 3)
        # made again when a new position fills, kept when one is overwritten
        assert s.resident_positions().tolist() == sorted(reference)
    assert_matches(s, reference)
    got = s.get([pos])
    got["obs"].add_(1.0)
    got["action"].add_(1)
    assert_matches(s, reference)  # get returns copies
    assert_rows_match(s, sorted(reference), [3, 0, 2])
    per_row = d * 4 + 8 + NUM_ACTIONS * 4 + 4 + 4 + 1 + 1 + 4 + 8
    assert s.nbytes() == capacity * ((t + 1) * per_row + 1)


def test_compatible_with_the_slot_spec():
    from workers.slots import rollout_spec

    t = 3
    s = RolloutStorage(2, t, rollout_spec(t, (4, 6, 6), "uint8", 5), pixel_stack=4)
    gen = torch.Generator().manual_seed(7)
    env = FakeAle(gen, 4, (6, 6), 256)
    batch = {name: torch.zeros((shape[0], 1, *shape[1:]), dtype=dtype)
             for name, (shape, dtype) in rollout_spec(t, (4, 6, 6), "uint8", 5).items()}
    batch["obs"][:, 0] = env.rollout(t)
    s.put(batch, 0, 1)
    assert_matches(s, {1: column_of(batch, 0)})


# ---------------------------------------------------------------------- threads, state


def test_one_thread_puts_while_another_gets():
    """Every rollout read back is whole: all its fields come from one put."""
    gen = torch.Generator().manual_seed(8)
    t, c, capacity = 4, 4, 6
    envs = [FakeAle(gen, c, (4, 4), 256, p_reset=0.1) for _ in range(2)]
    s = RolloutStorage(capacity, t, spec(t, (c, 4, 4)), pixel_stack=c, max_chain_heads=2)
    written: dict[int, dict] = {}
    first = make_batch(gen, envs[0].rollout(t), columns=1, seq=0)
    s.put(first, 0, 0)
    written[0] = column_of(first, 0)
    batches = []
    for i in range(1, 300):
        b = make_batch(gen, envs[i % 2].rollout(t), columns=1, seq=i)
        batches.append(b)
        written[i] = column_of(b, 0)
    done = threading.Event()
    errors: list[str] = []

    def writer():
        for i, b in enumerate(batches, start=1):
            s.put(b, 0, i % capacity)
        done.set()

    def reader():
        checked = 0
        while not done.is_set() or checked < 50:
            positions = s.resident_positions()
            got = s.get(positions)
            for col in range(positions.numel()):
                seq = int(got["version"][0, col])
                for name, want in written[seq].items():
                    if not torch.equal(got[name][:, col], want):
                        errors.append(f"rollout {seq}: field {name} is torn")
                checked += 1

    threads = [threading.Thread(target=writer), threading.Thread(target=reader)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=60)
    assert not errors, errors[:3]
    check_invariants(s)


def test_state_dict_round_trip():
    gen = torch.Generator().manual_seed(9)
    t, c, capacity = 4, 2, 5
    envs = [FakeAle(gen, c, (3, 3), 3, p_reset=0.2) for _ in range(3)]
    args = (capacity, t, spec(t, (c, 3, 3)))
    a = RolloutStorage(*args, pixel_stack=c, max_chain_heads=capacity)
    reference = {}
    for i in range(13):
        batch = make_batch(gen, envs[i % 3].rollout(t), columns=1, seq=i)
        pos = int(torch.randint(0, capacity, (), generator=gen))
        a.put(batch, 0, pos)
        reference[pos] = column_of(batch, 0)
    buf = io.BytesIO()
    torch.save(a.state_dict(), buf)
    buf.seek(0)
    b = RolloutStorage(*args, pixel_stack=c, max_chain_heads=capacity)
    b.load_state_dict(torch.load(buf))
    assert_matches(b, reference)
    assert len(b) == len(a) and b.frames_in_use() == a.frames_in_use()
    assert b.resident_positions().tolist() == sorted(reference)
    check_invariants(b)
    # both go on identically
    for i in range(13, 20):
        batch = make_batch(gen, envs[i % 3].rollout(t), columns=1, seq=i)
        for s in (a, b):
            s.put(batch, 0, i % capacity)
        reference[i % capacity] = column_of(batch, 0)
    assert torch.equal(a._index, b._index)
    assert_matches(b, reference)
    with pytest.raises(ValueError, match="does not match"):
        RolloutStorage(capacity + 1, t, spec(t, (c, 3, 3)), pixel_stack=c).load_state_dict(
            a.state_dict())
    v = RolloutStorage(3, t, spec(t, (4,), torch.float32))
    v.put(make_batch(gen, torch.randn((t + 1, 4), generator=gen), columns=1), 0, 2)
    w = RolloutStorage(3, t, spec(t, (4,), torch.float32))
    w.load_state_dict(v.state_dict())
    assert torch.equal(w.get([2])["obs"], v.get([2])["obs"])


# ---------------------------------------------------------------------- Atari size


def test_pong_shapes_fit_7_5_kb_per_step_and_timing():
    t, c = 20, 4
    pong = spec(t, (c, 84, 84), num_actions=6)
    s = RolloutStorage(1000, t, pong, pixel_stack=c)
    per_step = s.bytes_per_step()
    print(f"\nPong storage: {per_step:.1f} bytes/step (capacity 1000, T=20, C=4, "
          f"{s.pool_frames} pool frames, max_chain_heads {s.max_chain_heads})")
    assert per_step <= 7500
    unshared = RolloutStorage(1000, t, pong, pixel_stack=c, max_chain_heads=1000)
    assert unshared.bytes_per_step() > 8400  # what sharing across rollouts saves
    # the memory preflight's formula is the allocation, to the byte
    assert RolloutStorage.planned_nbytes(1000, t, pong, c) == s.nbytes()
    assert RolloutStorage.planned_nbytes(1000, t, pong, c, 1000) == unshared.nbytes()
    short = spec(2, (c, 84, 84), num_actions=6)  # T < C: a chain head per rollout
    assert RolloutStorage.planned_nbytes(7, 2, short, c) == \
        RolloutStorage(7, 2, short, pixel_stack=c).nbytes()
    del s, unshared

    gen = torch.Generator().manual_seed(10)
    envs = [FakeAle(gen, c, (84, 84), 256, p_reset=0.02) for _ in range(4)]
    small = RolloutStorage(64, t, pong, pixel_stack=c, max_chain_heads=4)
    batches = [make_batch(gen, envs[i % 4].rollout(t), columns=1, num_actions=6)
               for i in range(40)]
    start = time.perf_counter()
    for i, b in enumerate(batches):
        small.put(b, 0, i)
    put_s = (time.perf_counter() - start) / len(batches)
    start = time.perf_counter()
    for _ in range(5):
        got = small.get(torch.randint(0, 40, (32,), generator=gen))
    get_s = (time.perf_counter() - start) / 5
    print(f"put {put_s * 1e3:.2f} ms/rollout, get(32) {get_s * 1e3:.2f} ms")
    assert got["obs"].shape == (t + 1, 32, c, 84, 84)
    assert small.frames_in_use() <= 40 * t + 4 * c
