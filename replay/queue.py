"""The queue replay: every rollout is learned from exactly once, oldest first.

It holds slot indices, not data: a rollout stays in its shared-memory slot until
it is sampled, then its slot is copied into the batch and given back.
"""

from __future__ import annotations

import collections
from collections.abc import Callable

import torch


class QueueReplay:
    """FIFO of slot indices (a `replay.base.Replay`). `capacity` is not a bound: the
    slot pool is."""

    kind = "queue"
    replayed = False  # every rollout is learned from once, fresh

    def __init__(self, pool, capacity: int = 1):
        self.pool = pool
        self.capacity = capacity
        self._indices: collections.deque[int] = collections.deque()

    def add(self, index: int, gather: Callable[[], dict[str, torch.Tensor]] | None = None
            ) -> bool:
        """Take ownership of slot `index` (`gather` is not needed); True: the slot is
        kept (released on sample)."""
        self._indices.append(index)
        return True

    def __len__(self) -> int:
        return len(self._indices)

    def ready(self, n: int) -> bool:
        return len(self._indices) >= n

    def sample(self, n: int) -> dict[str, torch.Tensor]:
        """The `n` oldest rollouts as a batch `[T+1, n, ...]`; their slots are freed."""
        taken = [self._indices.popleft() for _ in range(n)]
        batch = self.pool.gather(torch.tensor(taken, dtype=torch.int64))
        self.pool.release(taken)
        return batch

    def release_all(self) -> int:
        """Give every held slot back (shutdown); returns how many were never sampled."""
        unread = len(self._indices)
        self.pool.release(self._indices)
        self._indices.clear()
        return unread

    def set_updates(self, updates: int) -> None:
        pass  # no schedule

    def stats(self) -> dict[str, float]:
        return {"queued": float(len(self._indices))}

    def describe(self) -> str:
        return "queue: slot indices, learned from once"

    def stored_bytes(self) -> int:
        return 0  # the rollouts stay in their shared-memory slots

    def state_dict(self, include_data: bool = False) -> dict:
        return {}  # holds only slots of fresh rollouts: refilled in seconds after a resume

    def state_problem(self, state: dict) -> str | None:
        return None

    def load_state_dict(self, state: dict) -> None:
        del state
