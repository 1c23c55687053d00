"""Compose every batch from several replays by `sample_ratio`, optionally in the
background.

Shares are `batch_size * ratio` rounded by largest remainder, so every batch has
exactly `batch_size` rollouts and no ratio times batch size has to be an integer.
While a replay that copies its rollouts is filling in (`--training_fill_in_factor`
of its capacity), its share is taken from the queue: the queue holds shared slots,
and waiting for a fill-in larger than the slot pool would stop the actors for good.
A batch carries, besides its fields `[T+1, B, ...]`, `replayed`: bool [B], true for
the columns that came from a replay other than the queue (CLEAR clones on these).
A field that not every part has (`features`, kept only by the replays that read
them) is left out of a mixed batch.
"""

from __future__ import annotations

import functools
import queue
import threading

import torch

from agents.distributions import Categorical
from replay.base import Replay
from replay.config import ReplaySpec, batch_shares
from replay.queue import QueueReplay
from replay.shared import SharedView
from replay.storage_replay import StorageReplay


def build_replays(entries: list[ReplaySpec], pool, spec: dict, unroll_length: int,
                  pixel_stack: int | None, max_chain_heads: int, fill_in_factor: float,
                  features_fn, schedule_updates: float, seed: int = 0,
                  hidden_features_fn=None, distribution: type = Categorical,
                  shared: StorageReplay | None = None) -> list[Replay]:
    """One replay per parsed `--replay_parameters` entry.

    `features_fn` computes current logits (float32 [..., A]) and `hidden_features_fn`
    the current policy's hidden layer (float32 [..., H]) of obs [..., *obs_shape]; each
    custom replay gets the one its `features` names. `spec` must have "features" if an
    entry reads stored hidden features (`ReplaySpec.stores_hidden_features`).
    `distribution`: the class of the stored params (agents/distributions.py). With
    `shared` (--share_experience), each `standard` entry is a view of that replay
    (replay/shared.py).
    """
    replays = []
    for i, e in enumerate(entries):
        if e.type == "queue":
            replays.append(QueueReplay(pool, e.capacity))
        elif e.type == "standard" and shared is not None:
            replays.append(SharedView(shared, e, fill_in_factor, seed=seed + i))
        else:
            fn = features_fn
            if e.uses_hidden_features:
                if hidden_features_fn is None:
                    raise ValueError(f"entry {i}: 'features' 'hidden' needs hidden_features_fn")
                fn = hidden_features_fn
            replays.append(StorageReplay(e, pool, spec, unroll_length, pixel_stack,
                                         max_chain_heads=max_chain_heads,
                                         fill_in_factor=fill_in_factor,
                                         features_fn=fn,
                                         schedule_updates=schedule_updates, seed=seed + i,
                                         distribution=distribution))
    return replays


class BatchMixer:
    """Routes new rollouts into every replay and builds batches `[T+1, B, ...]`."""

    def __init__(self, pool, replays: list[Replay], ratios: list[float], batch_size: int):
        self.pool = pool
        self.replays = replays
        self.shares = batch_shares(batch_size, ratios)
        self.batch_size = batch_size

    def add(self, index: int) -> None:
        """Offer slot `index` to every replay; free it unless one keeps it. The slot is
        copied out of shared memory once, whatever the number of storage replays."""
        gather = functools.cache(lambda: self.pool.gather(torch.tensor([index])))
        kept = False
        for replay in self.replays:
            kept = replay.add(index, gather) or kept
        if not kept:
            self.pool.release([index])

    def current_shares(self) -> list[int]:
        """The shares of the next batch: `shares`, with those of replays that are not
        ready moved to the queue (the first replay whose samples are not `replayed`),
        if there is one."""
        queue = next((i for i, r in enumerate(self.replays) if not r.replayed), None)
        if queue is None:
            return self.shares
        shares = list(self.shares)
        for i, r in enumerate(self.replays):
            if i != queue and shares[i] > 0 and not r.ready(shares[i]):
                shares[queue] += shares[i]
                shares[i] = 0
        return shares

    def ready(self) -> bool:
        return all(r.ready(n) for r, n in zip(self.replays, self.current_shares(), strict=True)
                   if n > 0)

    def set_updates(self, updates: int) -> None:
        """Learner updates so far: the clock of lambda annealing."""
        for r in self.replays:
            r.set_updates(updates)

    def sample(self) -> dict[str, torch.Tensor]:
        parts, replayed = [], []
        for r, n in zip(self.replays, self.current_shares(), strict=True):
            if n > 0:
                parts.append(r.sample(n))
                replayed.append(torch.full((n,), r.replayed))
        batch = parts[0] if len(parts) == 1 else \
            {k: torch.cat([p[k] for p in parts], dim=1) for k in parts[0]
             if all(k in p for p in parts)}
        batch["replayed"] = torch.cat(replayed)
        return batch

    def release_all(self) -> int:
        """Give every held slot back; returns how many rollouts went unread."""
        return sum(r.release_all() for r in self.replays)

    def state_dict(self, include_data: bool = False) -> list[dict]:
        return [r.state_dict(include_data) for r in self.replays]

    def restore(self, states: list[dict | None]) -> list[str | None]:
        """Load each replay's state (None: it starts empty). Returns, per replay, None or
        why its state could not be loaded (it then starts empty)."""
        problems = []
        for r, state in zip(self.replays, states, strict=True):
            problem = None if state is None else r.state_problem(state)
            if state is not None and problem is None:
                r.load_state_dict(state)
            problems.append(problem)
        return problems


class Prefetcher:
    """Prepares batches in a background thread (`--caching`): up to `size` wait,
    pinned when the learner is on a GPU so the copy to it can be non-blocking.

    The thread runs its torch ops on one intra-op thread. With the learner's own
    `torch.get_num_threads()` OpenMP team beside it, a second team of that size
    would put twice as many busy threads as cores on a small machine: on 2 cores
    every batch, uniform ones included, then came slower than without caching.
    (torch keeps the count per thread once a thread has used it, and the learner's
    thread has: it is read here before the thread starts.)"""

    def __init__(self, mixer: BatchMixer, size: int, pin_memory: bool = False):
        torch.get_num_threads()  # fixes the calling thread's count before ours sets 1
        self.mixer = mixer
        self.batches: queue.Queue = queue.Queue(maxsize=size)
        self.pin_memory = pin_memory
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="batch-prefetch", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        torch.set_num_threads(1)
        try:
            while not self._stop.is_set():
                if not self.mixer.ready():
                    self._stop.wait(0.002)
                    continue
                batch = self.mixer.sample()
                if self.pin_memory:
                    batch = {k: v.pin_memory() for k, v in batch.items()}
                while not self._stop.is_set():
                    try:
                        self.batches.put(batch, timeout=0.05)
                        break
                    except queue.Full:
                        continue
        except BaseException as e:  # noqa: BLE001 - surfaced to the learner by get()
            self.error = e

    def get(self, timeout: float) -> dict[str, torch.Tensor] | None:
        if self.error is not None:
            raise RuntimeError("batch preparation failed") from self.error
        try:
            return self.batches.get(timeout=timeout)
        except queue.Empty:
            return None

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
