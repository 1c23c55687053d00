"""`--serial`: the actors stepped inline in the learner's process, in a fixed order.

Sample Factory's serial mode, for runs that repeat bit for bit: with the same
`--seed` on the same machine, a run gives the same rollouts, batches, updates and
curve every time (`tests/test_serial.py`). Nothing runs concurrently. While the
learner has a batch in hand (it polls with `timeout` 0) nothing is stepped; else
each `poll()` takes every actor once, round robin from where the last poll left
off, through one rollout of its `envs_per_worker` envs into slots of the shared
pool (the same `Roller` an actor process runs), as far as free slots allow, and the
learner trains on what came back before the next `poll()`.
Weights are pulled at the start of each rollout from the `SharedWeights` the
learner just published, so the policy lag is fixed by the schedule, not by timing.

It keeps the contract of `workers/actor_pool.py`; an actor that raises raises in
the learner (the run saves a checkpoint and exits 1), so there are no restarts.
"""

from __future__ import annotations

import dataclasses
import time

import torch

from workers.actor import ActorConfig, Roller, write_row
from workers.actor_pool import ActorPoolBase, FinishedRollout, actor_seed, per_policy


class SerialActorPool(ActorPoolBase):
    def __init__(self, cfg: ActorConfig | list[ActorConfig], worker_count: int, slots, weights,
                 log, resumes: int = 0):
        """`cfg` and `weights`: the one policy's, or each policy's (actor i acts for
        policy i mod K)."""
        super().__init__(log)
        self.configs = per_policy(cfg)
        self.cfg = self.configs[0]
        self.worker_count = worker_count
        self.slots = slots
        self.weights = per_policy(weights)
        self.resumes = resumes
        self.rollers: list[Roller] = []
        self.next_actor = 0  # where the next poll starts its round

    def start(self) -> None:
        k = len(self.configs)
        self.rollers = [
            Roller(dataclasses.replace(self.configs[i % k], seed=actor_seed(
                self.cfg.seed, i, 0, self.resumes)), self.weights[i % k])
            for i in range(self.worker_count)]

    def poll(self, timeout: float = 0.05) -> list[FinishedRollout]:
        """Nothing with `timeout` 0 (the learner has a batch to train on first); else one
        rollout of each actor in turn, from `next_actor` on, while an actor's envs all
        find free slots."""
        out = []
        n = self.cfg.envs_per_worker
        for _ in range(len(self.rollers) if timeout > 0 else 0):
            if len(self.slots.free) < n:
                break
            roller = self.rollers[self.next_actor]
            self.next_actor = (self.next_actor + 1) % len(self.rollers)
            taken = self.slots.take(n)
            index = torch.tensor(taken, dtype=torch.int64)
            episodes = roller.rollout(
                lambda t, row, index=index: write_row(self.slots.buffers, t, index, row))
            self.count_seconds(roller.take_seconds())
            out.append(FinishedRollout(tuple(taken), episodes, roller.cfg.policy_id))
        if not out:
            time.sleep(min(timeout, 0.01))
        return out

    def close(self, timeout: float = 10.0) -> list[FinishedRollout]:
        """Close the envs; nothing is in flight between polls."""
        for roller in self.rollers:
            roller.close()
        self.rollers = []
        return []
