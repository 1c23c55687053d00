"""Run real actor processes (through the real ActorPool) without a learner."""

from __future__ import annotations

import contextlib
import logging
import time

import torch
import torch.multiprocessing as mp

from agents.networks import build_model
from workers.actor import ActorConfig
from workers.pool import ActorPool
from workers.slots import SlotPool, rollout_spec
from workers.weights import SharedWeights
from wrappers.envs import EnvOptions, env_info

COUNTING = "tests.counting_env:Counting-v0"


class Harness:
    def __init__(self, slots: SlotPool, pool: ActorPool, model, weights):
        self.slots, self.pool, self.model, self.weights = slots, pool, model, weights

    def rollouts(self, timeout: float = 30.0):
        """Finished rollouts (`FinishedRollout`: slot indices, episodes), at least one,
        granting slots meanwhile."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            self.pool.grant()
            got = self.pool.poll(0.05)
            if got:
                return got
        raise TimeoutError("no rollout from the actors")


@contextlib.contextmanager
def actors(env_id=COUNTING, workers=1, envs=3, unroll=5, num_slots=None, seed=0, hidden=16,
           max_restarts=0, store_features=False):
    """Yields a Harness; the model's weights are published as version 0. With
    `store_features` the actors also write "features" (float16 [T+1, S, hidden])."""
    info = env_info(env_id, EnvOptions())
    torch.manual_seed(seed)
    model = build_model(info.obs_shape, info.num_actions, hidden)
    spec = rollout_spec(unroll, info.obs_shape, info.obs_dtype, info.num_actions,
                        feature_size=hidden if store_features else 0)
    slots = SlotPool(spec, num_slots or 4 * workers * envs)
    weights = SharedWeights(model)
    weights.publish(model, 0)
    cfg = ActorConfig(env_id=env_id, env_options=EnvOptions(), envs_per_worker=envs,
                      unroll_length=unroll, obs_shape=info.obs_shape,
                      num_actions=info.num_actions, hidden_size=hidden, seed=seed,
                      store_features=store_features)
    pool = ActorPool(mp.get_context("spawn"), cfg, workers, slots, weights,
                     logging.getLogger("actor-harness"), max_restarts)
    pool.start()
    try:
        yield Harness(slots, pool, model, weights)
    finally:
        t0 = time.time()
        pool.close(timeout=10)
        assert time.time() - t0 < 10, "actors did not stop within 10 s of the stop flag"
