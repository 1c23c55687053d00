"""Fixed-capacity rollout storage for the replays, with frame sharing for stacked pixels.

`RolloutStorage` keeps `capacity` rollouts in buffers allocated once. A rollout is
one column of a gathered batch (time-major, `[T+1, B, ...]`, the row convention of
`workers/slots.py`: row t holds x_t, row 0 repeats row T of the same env's previous
rollout). `put(batch, column, position)` copies one column into rollout position
`position`, replacing what was there; `get(positions)` returns a batch
`[T+1, n, ...]`, a copy, equal to what was put.

Plain fields (and `obs` of vector envs) are stored as they come, time-major
`[T+1, capacity, ...]`: one `index_select` along dim 1 per field at `get` time.

Stacked pixels (`pixel_stack=C`, obs `[T+1, B, C, H, W]`, usually uint8 84x84) are
stored as single frames, each once, in a refcounted frame pool; a rollout keeps an
int32 index array `[T+1, C]` into it and stacks are rebuilt by one gather at `get`.

How frames are resolved at `put`, the pool's size and the bound that the default
`max_chain_heads` rests on (with its proof) are in `replay/frames.py`.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping

import numpy as np
import torch

from replay.frames import plan_frames


class FramePoolExhaustedError(RuntimeError):
    """A `put` needs more pool frames than are free (more chain heads than sized for)."""


class RolloutStorage:
    """`capacity` rollouts of `unroll_length` steps, allocated once; thread-safe.

    Args:
        capacity: number of rollouts held (positions 0 .. capacity-1).
        unroll_length: T; every field has T+1 rows.
        field_specs: field -> (shape, dtype) in the format of
            `workers.slots.rollout_spec(T, ...)`: the shape of one rollout *including*
            its leading T+1 rows, e.g. "obs": ((T+1, 4, 84, 84), torch.uint8),
            "logits": ((T+1, P), torch.float32), "action": ((T+1,), torch.int64).
        pixel_stack: C, the frames stacked in each obs `[C, *frame_shape]`; frames are
            then stored once each (see replay/frames.py). None: obs is a plain field.
        max_chain_heads: pool sizing, see replay/frames.py (default capacity // C
            when T >= C, else capacity; values above capacity count as capacity, which
            never runs out); ignored without `pixel_stack`.
    """

    def __init__(
        self,
        capacity: int,
        unroll_length: int,
        field_specs: Mapping[str, tuple[tuple[int, ...], torch.dtype]],
        pixel_stack: int | None = None,
        max_chain_heads: int | None = None,
    ):
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        if unroll_length < 1:
            raise ValueError(f"unroll_length must be >= 1, got {unroll_length}")
        self.capacity = int(capacity)
        self.unroll_length = t = int(unroll_length)
        t1 = t + 1
        self._specs: dict[str, tuple[tuple[int, ...], torch.dtype]] = {}
        for name, (shape, dtype) in field_specs.items():
            shape = tuple(int(s) for s in shape)
            if not shape or shape[0] != t1:
                raise ValueError(
                    f"field {name!r}: shape {shape} must start with unroll_length + 1 = {t1} "
                    "(the format of workers.slots.rollout_spec)"
                )
            self._specs[name] = (shape[1:], dtype)
        self._lock = threading.Lock()
        self._resident = torch.zeros(self.capacity, dtype=torch.bool)
        self._resident_np = self._resident.numpy()
        self._count = 0  # positions holding a rollout (len: read at every learner step)
        self._positions = torch.zeros(0, dtype=torch.int64)  # resident_positions' cache
        self.pixel_stack = None if pixel_stack is None else int(pixel_stack)
        plain = dict(self._specs)
        if pixel_stack is not None:
            c = int(pixel_stack)
            if "obs" not in self._specs:
                raise ValueError("pixel_stack needs an 'obs' field")
            row_shape, obs_dtype = self._specs["obs"]
            if len(row_shape) < 2 or row_shape[0] != c:
                raise ValueError(
                    f"pixel_stack={c}: obs rows must be [C, *frame_shape] with C = {c}, "
                    f"got {row_shape}"
                )
            if max_chain_heads is None:
                max_chain_heads = self.capacity if t < c else max(1, self.capacity // c)
            if max_chain_heads < 1:
                raise ValueError(f"max_chain_heads must be >= 1, got {max_chain_heads}")
            self.max_chain_heads = min(int(max_chain_heads), self.capacity)
            self.frame_shape = tuple(row_shape[1:])
            self.pool_frames = f = self.capacity * t + c * self.max_chain_heads
            if f + 1 >= 2**31:
                raise ValueError(f"a pool of {f} frames does not fit int32 indices")
            self._sentinel = f
            # frames are written before they are read; only the sentinel must be zeros
            self._pool = torch.empty((f + 1, *self.frame_shape), dtype=obs_dtype)
            self._pool[f].zero_()
            self._refcount = torch.zeros(f + 1, dtype=torch.int32)
            self._free = torch.arange(f - 1, -1, -1, dtype=torch.int32)  # a stack, top at end
            self._n_free = f
            self._index = torch.full((t1, self.capacity, c), f, dtype=torch.int32)
            self._tail_hash = torch.full((self.capacity, c), -1, dtype=torch.int32)
            # numpy views sharing the tensors' memory, for the bookkeeping at `put`
            self._pool_np = self._pool.view(f + 1, -1).view(torch.uint8).numpy()
            self._refcount_np = self._refcount.numpy()
            self._free_np = self._free.numpy()
            self._index_np = self._index.numpy()
            self._tail_np = self._tail_hash.numpy()
            del plain["obs"]
        else:
            self.max_chain_heads = None
            self.pool_frames = 0
        self._buffers = {
            name: torch.zeros((t1, self.capacity, *row_shape), dtype=dtype)
            for name, (row_shape, dtype) in plain.items()
        }

    # ------------------------------------------------------------------ writing

    def put(self, batch: Mapping[str, torch.Tensor], column: int, position: int) -> None:
        """Store column `column` of `batch` at rollout position `position`.

        Args:
            batch: field -> CPU tensor `[T+1, B, *row_shape]` of the spec's dtype
                (extra fields are ignored).
            column: which of the B rollouts to store.
            position: 0 <= position < capacity; the rollout there is replaced.
        Raises:
            FramePoolExhaustedError: the frame pool is short (nothing is changed).
        """
        if not 0 <= position < self.capacity:
            raise IndexError(f"position {position} is outside 0..{self.capacity - 1}")
        rows = {}
        for name, (row_shape, dtype) in self._specs.items():
            if name not in batch:
                raise KeyError(f"batch lacks field {name!r}")
            x = batch[name]
            if x.shape[:1] != (self.unroll_length + 1,) or tuple(x.shape[2:]) != row_shape \
                    or x.dim() != 2 + len(row_shape) or x.dtype != dtype:
                raise ValueError(
                    f"field {name!r}: expected [{self.unroll_length + 1}, B, "
                    f"{', '.join(map(str, row_shape))}] {dtype}, got {list(x.shape)} {x.dtype}"
                )
            if not 0 <= column < x.shape[1]:
                raise IndexError(f"column {column} is outside 0..{x.shape[1] - 1}")
            rows[name] = x[:, column]
        plan = plan_frames(rows["obs"], self.unroll_length, self.pixel_stack) \
            if self.pixel_stack is not None else None
        with self._lock:
            if plan is not None:
                self._store_frames(plan, position)
            for name, buf in self._buffers.items():
                buf[:, position] = rows[name]
            self._count += not self._resident_np[position]
            self._resident[position] = True

    def _store_frames(self, plan, position: int) -> None:
        """Look the planned frames up in the resident tails, then commit (under the lock).

        Bookkeeping runs on numpy views of the tensors (far less per-call overhead).
        """
        raw, codes, reps, hashes, tail = plan
        t, c, sent = self.unroll_length, self.pixel_stack, self._sentinel
        pool, rc, free = self._pool_np, self._refcount_np, self._free_np
        index, tails = self._index_np, self._tail_np
        rep_pool = [-1] * len(reps)  # pool frame of each representative, -1: a new one
        query: dict[int, list[int]] = {}
        for r, h in enumerate(hashes):
            if h >= 0:
                query.setdefault(h, []).append(r)
        if query:
            tail_flat = tails.reshape(-1)
            keys = iter(query)
            found = tail_flat == next(keys)
            for h in keys:
                found |= tail_flat == h
            hits = np.flatnonzero(found)
            if hits.size:
                pis = index[t].reshape(-1)[hits].tolist()
                for h, pi in set(zip(tail_flat[hits].tolist(), pis, strict=True)):
                    for r in query[h]:
                        if rep_pool[r] < 0 and np.array_equal(pool[pi], raw[reps[r]]):
                            rep_pool[r] = pi
        new = [r for r, p in enumerate(rep_pool) if p < 0]
        rep_pool_a = np.array(rep_pool + [sent], dtype=np.int64)  # code -1 -> sentinel
        ent = rep_pool_a[codes]  # -1 where a new frame goes
        old = np.empty(0, dtype=np.int64)
        if self._resident_np[position]:
            old = index[:, position].reshape(-1).astype(np.int64)
            old = old[old != sent]
        if len(new) > self._n_free:
            freeable = 0
            if old.size:
                u, count = np.unique(old, return_counts=True)
                reused = set(rep_pool)
                freeable = sum(1 for f in u[rc[u] == count].tolist() if f not in reused)
            if len(new) > self._n_free + freeable:
                raise FramePoolExhaustedError(
                    f"the frame pool ({self.pool_frames} frames = capacity {self.capacity} x "
                    f"T {t} + C {c} x max_chain_heads {self.max_chain_heads}) has "
                    f"{self._n_free + freeable} free frames, this rollout needs {len(new)}. "
                    "More rollouts are stored without their env's previous rollout than "
                    "max_chain_heads allows (see replay/frames.py); raise max_chain_heads "
                    "(capacity is always enough)"
                )
        # commit: nothing below can fail. References to reused frames go first, so
        # that dropping the old rollout cannot free them.
        np.add.at(rc, ent[(ent >= 0) & (ent != sent)], 1)
        if old.size:
            np.add.at(rc, old, -1)
            freed = np.unique(old[rc[old] == 0])
            free[self._n_free:self._n_free + freed.size] = freed
            self._n_free += freed.size
        if new:
            self._n_free -= len(new)
            ids = free[self._n_free:self._n_free + len(new)].astype(np.int64)
            pool[ids] = raw[[reps[r] for r in new]]
            rep_pool_a[new] = ids
            is_new = ent == -1
            ent = rep_pool_a[codes]
            np.add.at(rc, ent[is_new], 1)
        index[:, position] = ent.reshape(t + 1, c)
        tails[position] = tail

    # ------------------------------------------------------------------ reading

    def get(self, positions, rows=None, fields=None, starts=None, length: int | None = None
            ) -> dict[str, torch.Tensor]:
        """The rollouts at `positions` (int64 [n]) as a batch `[T+1, n, ...]` (a copy).

        `rows` (int64 [R], optional) keeps only those time rows (`[R, n, ...]`), and
        `fields` only those fields: what a distance needs, without copying the rest.
        `starts` (int64 [n], optional, instead of `rows`) with `length` L takes a window
        of L+1 rows per column, rows starts[i]..starts[i]+L of rollout i (`[L+1, n,
        ...]`): what a sampler of n-step transitions reads (starts[i] + L <= T).
        Raises IndexError for a position out of range or never written, or a window
        past the rollout's end.
        """
        positions = torch.as_tensor(positions, dtype=torch.int64).reshape(-1)
        n = positions.numel()
        rows_np = None if rows is None else torch.as_tensor(rows, dtype=torch.int64).numpy()
        if starts is not None:  # rows per column: [L+1, n]
            starts_np = torch.as_tensor(starts, dtype=torch.int64).reshape(1, -1).numpy()
            if n and (starts_np.min() < 0 or starts_np.max() + length > self.unroll_length):
                raise IndexError(f"windows of {length} steps must start in "
                                 f"0..{self.unroll_length - length}")
            rows_np = starts_np + np.arange(length + 1)[:, None]
        n_rows = self.unroll_length + 1 if rows_np is None else len(rows_np)
        with self._lock:
            if n and (int(positions.min()) < 0 or int(positions.max()) >= self.capacity):
                raise IndexError(f"positions must lie in 0..{self.capacity - 1}")
            if not bool(self._resident[positions].all()):
                bad = positions[~self._resident[positions]].tolist()
                raise IndexError(f"positions {bad} were never written")
            cols = positions.numpy() if rows_np is None or rows_np.ndim == 1 \
                else positions.numpy()[None]
            out = {}
            for name in self._specs if fields is None else fields:
                if name == "obs" and self.pixel_stack is not None:
                    # numpy's single-threaded take: torch's threads stall on a busy machine
                    if rows_np is None:
                        ent = self._index_np[:, cols]  # [R, n, C] int32
                    elif rows_np.ndim == 1:
                        ent = self._index_np[rows_np][:, cols]
                    else:
                        ent = self._index_np[rows_np, cols]
                    frames = torch.from_numpy(np.take(self._pool_np, ent.reshape(-1), axis=0))
                    out[name] = frames.view(self._pool.dtype).view(
                        n_rows, n, self.pixel_stack, *self.frame_shape)
                else:
                    buf = self._buffers[name]
                    if rows_np is None:
                        out[name] = buf.index_select(1, positions)
                    elif rows_np.ndim == 1:
                        out[name] = buf[torch.from_numpy(rows_np)[:, None], positions]
                    else:  # one gather
                        out[name] = buf[torch.from_numpy(rows_np), positions[None]]
        return out

    def __len__(self) -> int:
        """Number of positions holding a rollout."""
        return self._count

    def resident_positions(self) -> torch.Tensor:
        """int64 [len(self)]: the positions holding a rollout, ascending; read-only.
        A position once resident stays so, so it is made again only when the count
        grows (not at every batch: a scan of 125k flags was 3% of SAC's time)."""
        with self._lock:
            if len(self._positions) != self._count:
                self._positions = self._resident.nonzero().squeeze(1)
            return self._positions

    def frames_in_use(self) -> int:
        """Pool frames referenced by stored rollouts (0 without `pixel_stack`)."""
        return self.pool_frames - self._n_free if self.pixel_stack is not None else 0

    def _tensors(self) -> list[torch.Tensor]:
        extra = []
        if self.pixel_stack is not None:
            extra = [self._pool, self._refcount, self._free, self._index, self._tail_hash]
        return [*self._buffers.values(), self._resident, *extra]

    def nbytes(self) -> int:
        """Bytes of every tensor the storage allocated (`planned_nbytes` ahead of time)."""
        return sum(x.numel() * x.element_size() for x in self._tensors())

    @staticmethod
    def planned_nbytes(capacity: int, unroll_length: int,
                       field_specs: Mapping[str, tuple[tuple[int, ...], torch.dtype]],
                       pixel_stack: int | None = None, max_chain_heads: int | None = None
                       ) -> int:
        """What `nbytes()` of a storage built with these arguments will be, without
        allocating it: the one sizing formula (the run's memory preflight uses it).
        Mirrors `__init__`'s tensors: the plain fields [T+1, capacity, ...], the
        resident mask; with `pixel_stack` C, the frame pool (F+1 frames, F = capacity x
        T + C x chain heads) with its int32 refcounts, free stack [F], index
        [T+1, capacity, C] and tail hashes [capacity, C]."""
        t1 = unroll_length + 1

        def size(shape, dtype) -> int:
            return math.prod(shape) * torch.empty(0, dtype=dtype).element_size()

        total = capacity  # the bool resident mask
        for name, (shape, dtype) in field_specs.items():
            if name == "obs" and pixel_stack is not None:
                c = int(pixel_stack)
                if max_chain_heads is None:
                    max_chain_heads = capacity if unroll_length < c else max(1, capacity // c)
                f = capacity * unroll_length + c * min(int(max_chain_heads), capacity)
                total += size(((f + 1), *shape[2:]), dtype)  # the pool of frames
                total += 4 * ((f + 1) + f + t1 * capacity * c + capacity * c)
            else:
                total += size((t1, capacity, *shape[1:]), dtype)
        return total

    def bytes_per_step(self) -> float:
        """`nbytes() / (capacity * T)`: allocated bytes per stored env step."""
        return self.nbytes() / (self.capacity * self.unroll_length)

    # ------------------------------------------------------------------ checkpoints

    def _meta(self) -> dict:
        return {
            "capacity": self.capacity,
            "unroll_length": self.unroll_length,
            "pixel_stack": self.pixel_stack,
            "max_chain_heads": self.max_chain_heads,
            "fields": {k: (list(s), str(d)) for k, (s, d) in self._specs.items()},
        }

    def state_dict(self) -> dict:
        """Copies of the contents plus the metadata `load_state_dict` checks.

        Only the pool frames in use are saved (`frame_ids`, `frames`).
        """
        with self._lock:
            state = {
                "meta": self._meta(),
                "resident": self._resident.clone(),
                "buffers": {k: v.clone() for k, v in self._buffers.items()},
            }
            if self.pixel_stack is not None:
                ids = (self._refcount[: self.pool_frames] > 0).nonzero().squeeze(1)
                state.update(
                    frame_ids=ids,
                    frames=self._pool.index_select(0, ids),
                    refcount=self._refcount.clone(),
                    free=self._free.clone(),
                    n_free=self._n_free,
                    index=self._index.clone(),
                    tail_hash=self._tail_hash.clone(),
                )
            return state

    def state_problem(self, state: dict) -> str | None:
        """Why `state` cannot be loaded (it was built another way), or None."""
        saved, mine = state["meta"], self._meta()
        if saved == mine:
            return None
        diff = ", ".join(f"{k} {saved.get(k)} -> {mine[k]}" for k in mine
                         if saved.get(k) != mine[k])
        return f"its stored rollouts were laid out another way ({diff})"

    def load_state_dict(self, state: dict) -> None:
        """Restore what `state_dict` returned; the storage must be built the same way."""
        problem = self.state_problem(state)
        if problem:
            raise ValueError(f"storage state does not match this storage: {problem}")
        with self._lock:
            self._resident.copy_(state["resident"])
            self._count = int(self._resident.sum())
            self._positions = self._resident.nonzero().squeeze(1)
            for k, v in self._buffers.items():
                v.copy_(state["buffers"][k])
            if self.pixel_stack is not None:
                self._pool.index_copy_(0, state["frame_ids"], state["frames"])
                self._refcount.copy_(state["refcount"])
                self._free.copy_(state["free"])
                self._n_free = int(state["n_free"])
                self._index.copy_(state["index"])
                self._tail_hash.copy_(state["tail_hash"])
