"""The interface every replay offers the mixer and the learner (as Dopamine's
`SamplingDistribution` protocol does), so callers never ask which kind they hold.

A replay is offered every finished rollout by slot index. It either keeps the slot
(the queue: it holds indices, and frees the slot when it samples it) or copies the
rollout out of shared memory and lets the slot go (standard and custom replays).
Batches are time-major dicts of CPU tensors `[T+1, n, ...]` with the fields of
`workers.slots.rollout_spec`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import torch


class Replay(Protocol):
    kind: str  # "queue", "standard" or "custom"
    capacity: int
    replayed: bool  # True: samples are re-used data, marked for CLEAR's cloning losses

    def add(self, index: int, gather: Callable[[], dict[str, torch.Tensor]] | None = None
            ) -> bool:
        """Offer slot `index`; `gather()` returns a copy of it `[T+1, 1, ...]`. True: the
        replay keeps the slot, which must not be freed until it is sampled."""

    def __len__(self) -> int: ...

    def ready(self, n: int) -> bool:
        """Whether `sample(n)` can be called."""

    def sample(self, n: int) -> dict[str, torch.Tensor]:
        """n rollouts as a batch `[T+1, n, ...]`."""

    def set_updates(self, updates: int) -> None:
        """Learner updates so far: the clock of lambda annealing."""

    def release_all(self) -> int:
        """Give every held slot back (shutdown); returns how many rollouts it held that
        were never sampled (the queue's; a storage replay holds no slot: 0)."""

    def stats(self) -> dict[str, float]:
        """Figures for TensorBoard, under `pipeline/replay{i}_{name}`."""

    def describe(self) -> str:
        """One line for the run log: kind, strategy, size."""

    def stored_bytes(self) -> int:
        """Bytes of rollout data it holds (what `--checkpoint_replay` would save)."""

    def state_dict(self, include_data: bool = False) -> dict: ...

    def state_problem(self, state: dict) -> str | None:
        """Why `state` cannot be loaded into this replay (built another way), or None."""

    def load_state_dict(self, state: dict) -> None:
        """Restore a `state_dict`; raises ValueError, changing nothing, where
        `state_problem` would say why not."""
