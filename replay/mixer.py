"""Compose every batch from several replays by `sample_ratio`.

Shares are `batch_size * ratio` rounded by largest remainder, so every batch has
exactly `batch_size` rollouts and no ratio times batch size has to be an integer.
"""

from __future__ import annotations

import math

import torch


def batch_shares(batch_size: int, ratios: list[float]) -> list[int]:
    """Largest-remainder apportionment of `batch_size` by `ratios` (sum to 1)."""
    raw = [batch_size * r for r in ratios]
    shares = [math.floor(x) for x in raw]
    order = sorted(range(len(raw)), key=lambda i: (raw[i] - shares[i], -i), reverse=True)
    for i in order[: batch_size - sum(shares)]:
        shares[i] += 1
    return shares


class BatchMixer:
    """Routes new rollouts into every replay and builds batches `[T+1, B, ...]`."""

    def __init__(self, pool, replays: list, ratios: list[float], batch_size: int):
        self.pool = pool
        self.replays = replays
        self.shares = batch_shares(batch_size, ratios)
        self.batch_size = batch_size

    def add(self, index: int) -> None:
        """Offer slot `index` to every replay; free it unless one keeps it."""
        kept = False
        for replay in self.replays:
            kept = replay.add(index) or kept
        if not kept:
            self.pool.release([index])

    def ready(self) -> bool:
        return all(r.ready(n) for r, n in zip(self.replays, self.shares, strict=True))

    def sample(self) -> dict[str, torch.Tensor]:
        parts = [r.sample(n) for r, n in zip(self.replays, self.shares, strict=True) if n > 0]
        if len(parts) == 1:
            return parts[0]
        return {k: torch.cat([p[k] for p in parts], dim=1) for k in parts[0]}

    def release_all(self) -> None:
        for r in self.replays:
            r.release_all()
