"""One policy's learning: its agent, its replays (the batch mixer), the publication of
its weights to the actors, its update count, and its part of a checkpoint.

The driver (training/driver.py) routes each finished rollout to the learner of its
`policy_id`, asks its pacer when to train, and passes the run's progress (the
learning-rate schedules' 0 to 1). A run has one policy (id 0) unless
--num_policies: several policies are several learners on the same actors
(training/policies.py).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator

import torch

from agents.agent import Agent
from replay.mixer import BatchMixer, Prefetcher
from training import metrics
from workers.actor_pool import FinishedRollout


class PinnedStaging:
    """Two buffers of pinned host memory that rows of the slots are gathered into, so
    that their copy to a GPU runs while the host goes on (a copy from pageable memory
    holds the host until it is done). A buffer is written again only once the copy
    out of it has finished (a CUDA event recorded after it)."""

    def __init__(self):
        self._buffers: list[torch.Tensor | None] = [None, None]
        self._events: list[torch.cuda.Event | None] = [None, None]
        self._next = 0

    @contextlib.contextmanager
    def gather(self, source: torch.Tensor, indices) -> Iterator[torch.Tensor]:
        """Columns `indices` of `source` [T, N, ...] as a pinned [T, n, ...] tensor, for
        the body of the `with` to copy to the GPU (non-blocking) and no further."""
        i, self._next = self._next, 1 - self._next
        if self._events[i] is not None:
            self._events[i].synchronize()
        shape = (source.shape[0], len(indices), *source.shape[2:])
        numel = math.prod(shape)
        buffer = self._buffers[i]
        if buffer is None or buffer.numel() < numel or buffer.dtype != source.dtype:
            buffer = self._buffers[i] = torch.empty(numel, dtype=source.dtype).pin_memory()
        rows = buffer[:numel].view(shape)
        torch.index_select(source, 1, torch.as_tensor(list(indices)), out=rows)
        yield rows
        self._events[i] = torch.cuda.Event()
        self._events[i].record()


class PolicyLearner:
    """`policy_id`'s agent, replays and weights; `updates` counts its optimizer
    updates (batches), the version of the weights it publishes."""

    def __init__(self, policy_id: int, agent: Agent, mixer: BatchMixer, weights,
                 updates: int = 0, cfg=None):
        """`mixer.pool` is the run's slot pool, which received rollouts are read from;
        `cfg`: the policy's `training.config.Config` (its flags, saved with its part of
        a checkpoint: a resumed run of several policies rebuilds each one's from them)."""
        self.policy_id = policy_id
        self.cfg = cfg
        self.agent = agent
        self.mixer = mixer
        self.weights = weights
        self.updates = updates
        self.prefetcher: Prefetcher | None = None
        self._staging = PinnedStaging()

    def start(self, caching: bool, cache_size: int) -> None:
        """With `caching`, batches are prepared ahead by a background thread."""
        self.mixer.set_updates(self.updates)
        if caching:
            self.prefetcher = Prefetcher(self.mixer, cache_size,
                                         pin_memory=self.agent.device.type == "cuda")

    def publish(self) -> None:
        """Offer the acting model's weights to the actors, as version `updates`."""
        self.weights.publish(self.agent.acting_model, self.updates)

    # --- data --------------------------------------------------------------------------
    def receive(self, rollout: FinishedRollout) -> None:
        """Fold a finished rollout's observations (rows 0..T-1) into the input
        statistics, once, then offer its slots to the replays (which free them)."""
        if self.agent.normalizes_inputs:  # the rows are copied out of the slots only then
            obs = self.mixer.pool.buffers["obs"][:-1]
            if self.agent.device.type == "cuda":
                with self._staging.gather(obs, rollout.indices) as rows:
                    self.agent.observe(rows)
            else:
                self.agent.observe(obs[:, list(rollout.indices)])
        for i in rollout.indices:
            self.mixer.add(i)

    def ready(self) -> bool:
        """Whether a batch can be had now."""
        if self.prefetcher is not None:
            return not self.prefetcher.batches.empty()
        return self.mixer.ready()

    def next_batch(self) -> dict[str, torch.Tensor] | None:
        """A batch `[T+1, B, ...]` if one is ready, else None."""
        if self.prefetcher is not None:
            return self.prefetcher.get(timeout=0.0)
        return self.mixer.sample() if self.mixer.ready() else None

    # --- training ----------------------------------------------------------------------
    def train(self, batch: dict[str, torch.Tensor], progress: float
              ) -> tuple[dict[str, float], tuple[float, float]]:
        """One update on `batch` at `progress` of the run, then publish the weights.
        Returns the agent's statistics and the batch's policy lag (mean, max) in
        updates."""
        lag = metrics.policy_lag(batch["version"], self.updates)
        stats = self.agent.update(batch, progress)
        self.updates += 1
        self.mixer.set_updates(self.updates)  # the clock of the replays' schedules
        self.publish()
        return stats, lag

    # --- reporting, checkpoints, stopping ----------------------------------------------
    def state_dict(self, include_replay_data: bool) -> dict:
        """This policy's part of a checkpoint (training/checkpoint.py); with
        "acting_model" where the agent acts with a part of its model (test mode and
        `acting_weights` read it)."""
        part = {"agent": self.agent.state_dict(), "updates": self.updates,
                "replays": self.mixer.state_dict(include_data=include_replay_data),
                **({"config": self.cfg.to_dict()} if self.cfg is not None else {})}
        if self.agent.acting_model is not self.agent.model:
            part["acting_model"] = self.agent.acting_model.state_dict()
        return part

    def close(self) -> int:
        """Stop preparing batches and free every slot the replays still hold; returns
        how many rollouts were received but never trained on."""
        if self.prefetcher is not None:
            self.prefetcher.close()
        return self.mixer.release_all()
