"""`--share_experience`: one storage replay that every policy's rollouts go to, and a
view of it per policy that samples it.

The driver adds each finished rollout to the shared `StorageReplay` (a standard
replay: FIFO, uniform) before the rollout's own policy sees it. In each policy's
batch mixer a `SharedView` stands where its `--replay_parameters` have a `standard`
entry: it adds nothing (the rollout is there already) and samples its share of the
policy's batch from the shared storage with a random stream of its own.

Concurrency: adding and sampling both hold the shared replay's lock, and a sample is
copied out of the storage under it, so a reader never sees a rollout half-written,
and a rollout evicted by a newer one is evicted before or after a sample that reads
it, never during (tests/test_policies.py).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from replay import sampling
from replay.config import ReplaySpec
from replay.storage_replay import StorageReplay


class SharedView:
    """A policy's `standard` entry on the shared replay (`replay.base.Replay`)."""

    replayed = True  # re-used data, some of it other policies'

    def __init__(self, shared: StorageReplay, entry: ReplaySpec, fill_in_factor: float,
                 seed: int):
        self.shared = shared
        self.entry = entry
        self.fill_in = max(1, int(fill_in_factor * entry.capacity))
        self.generator = torch.Generator().manual_seed(seed)

    def add(self, index: int, gather: Callable[[], dict[str, torch.Tensor]] | None = None
            ) -> bool:
        """Nothing: the driver added the rollout to the shared replay; False."""
        return False

    def __len__(self) -> int:
        return len(self.shared)

    def ready(self, n: int) -> bool:
        return len(self.shared) >= max(n, self.fill_in)

    def set_updates(self, updates: int) -> None:
        """Uniform sampling has no schedule."""

    def sample(self, n: int) -> dict[str, torch.Tensor]:
        """n rollouts drawn uniformly, without replacement, from the shared storage
        (copied out under its lock)."""
        with self.shared.lock:
            resident = self.shared.storage.resident_positions()
            m = sampling.candidate_count(n, 1.0, len(resident))
            chosen = resident[sampling.draw_candidates(len(resident), m, self.generator)]
            return self.shared.storage.get(chosen[torch.arange(n) % m])

    def release_all(self) -> int:
        return 0

    def stats(self) -> dict[str, float]:
        return {"fill": len(self) / self.shared.capacity}

    def describe(self) -> str:
        return f"standard, on the shared replay ({self.shared.describe()})"

    def stored_bytes(self) -> int:
        return 0  # the shared replay's are counted once

    def state_dict(self, include_data: bool = False) -> dict:
        return {"generator": self.generator.get_state(), "shared_view": True}

    def state_problem(self, state: dict) -> str | None:
        return None if state.get("shared_view") else "it was a replay of its own"

    def load_state_dict(self, state: dict) -> None:
        self.generator.set_state(state["generator"])


def shared_entry(configs) -> ReplaySpec | None:
    """The shared replay's entry: a standard replay as large as the largest `standard`
    entry of any policy (`configs`: every policy's `Config`); None if none has one."""
    entries = [e for c in configs for e in c.replay_specs if e.type == "standard"]
    return max(entries, key=lambda e: e.capacity) if entries else None
