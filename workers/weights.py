"""Weight broadcast from the learner to the actors through shared memory.

The learner copies its parameters and buffers (the running statistics of input
and return normalisation, `agents/normalize.py`) into one flat float32 tensor in
shared memory; an actor that sees a newer version copies them into its CPU model,
so it acts on the statistics the learner trains with. No pickling
and no lock: a seqlock. The single writer makes the sequence number odd while it
writes and even (2 x the publication count) when done; a reader retries if the
number was odd or changed during its copy. An actor killed mid-copy therefore
blocks nobody. Every publication is new to a reader, even one of a version it
holds: weights copied into a policy between its updates (`--weight_sync`, a PBT
exploit) reach its actors at once, under the version they already had.
"""

from __future__ import annotations

import time

import torch
from torch import nn


def _tensors(model: nn.Module) -> list[torch.Tensor]:
    return [*model.parameters(), *model.buffers()]


def flatten(model: nn.Module) -> torch.Tensor:
    """Parameters then buffers of `model`, as one float32 vector on their device (a
    GPU learner's weights then come to the host in one copy, not one per tensor)."""
    return torch.cat([t.detach().reshape(-1).float() for t in _tensors(model)])


@torch.no_grad()
def unflatten(vec: torch.Tensor, model: nn.Module) -> None:
    """Copy `flatten`'s vector back into `model` (each tensor keeps its dtype)."""
    i = 0
    for t in _tensors(model):
        t.copy_(vec[i:i + t.numel()].view_as(t))
        i += t.numel()


class SharedWeights:
    """`lag` > 0 (`--serial_policy_lag`, the serial mode only): `publish` offers the
    weights of `lag` publications before, under their own version, so that the actors
    act with a fixed policy lag while the run stays deterministic."""

    def __init__(self, model: nn.Module, lag: int = 0):
        self.flat = flatten(model).cpu().share_memory_()
        self.seq = torch.zeros(1, dtype=torch.int64).share_memory_()
        self.version = torch.zeros(1, dtype=torch.int64).share_memory_()
        self.lag = lag
        self._held: list[tuple[int, torch.Tensor]] = []  # the last lag + 1 publications
        self._published = 0  # the writer's publications so far
        self._seen: dict[int, int] = {}  # per reader model (its id): the publication it holds

    def publish(self, model: nn.Module, version: int) -> None:
        """Learner side (the only writer)."""
        vec = flatten(model)
        if self.lag:
            self._held = [*self._held[-self.lag:], (version, vec.cpu())]
            version, vec = self._held[0]
        self._published += 1
        self.seq[0] = 2 * self._published + 1
        self.flat.copy_(vec)
        self.version[0] = version
        self.seq[0] = 2 * self._published

    def pull(self, model: nn.Module, have_version: int, tries: int = 100) -> int:
        """Load the published weights into `model` unless it holds them already (the
        newest publication it loaded; before any publication, the weights it was
        built from count as version 0); the version now held
        (`have_version`, the one it holds, where nothing was loaded)."""
        buf = torch.empty_like(self.flat)
        seen = self._seen.get(id(model), -1)
        for _ in range(tries):
            s1 = int(self.seq[0])
            if s1 % 2:  # being written
                time.sleep(0.0005)
                continue
            if s1 // 2 <= seen:
                return have_version
            buf.copy_(self.flat)
            version = int(self.version[0])
            if int(self.seq[0]) == s1:
                unflatten(buf, model)
                self._seen[id(model)] = s1 // 2
                return version
        return have_version  # the learner kept writing; try at the next rollout
