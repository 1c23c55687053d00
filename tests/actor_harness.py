"""Run real actor processes (through the real ActorPool) without a learner."""

from __future__ import annotations

import collections
import contextlib
import logging
import time

import torch
import torch.multiprocessing as mp

from agents.model_spec import ModelSpec
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
           max_restarts=0, store_features=False, lstm_size=0, reward_scale_gamma=None):
    """Yields a Harness; the model's weights are published as version 0. With
    `store_features` the actors also write "features" (float16 [T+1, S, H]); with
    `lstm_size` the model has an LSTM core and they write "core_state"."""
    info = env_info(env_id, EnvOptions())
    torch.manual_seed(seed)
    model_spec = ModelSpec(info.obs_shape, info.num_actions, hidden,
                           use_lstm=lstm_size > 0, lstm_size=lstm_size,
                           action_kind=info.action_kind)
    model = model_spec.build()
    spec = rollout_spec(unroll, info.obs_shape, info.obs_dtype, info.num_actions,
                        feature_size=model_spec.feature_size if store_features else 0,
                        state_shape=model_spec.state_shape, action_kind=info.action_kind)
    slots = SlotPool(spec, num_slots or 4 * workers * envs)
    weights = SharedWeights(model)
    weights.publish(model, 0)
    cfg = ActorConfig(env_id=env_id, env_options=EnvOptions(), envs_per_worker=envs,
                      unroll_length=unroll, model=model_spec, seed=seed,
                      store_features=store_features, reward_scale_gamma=reward_scale_gamma)
    pool = ActorPool(mp.get_context("spawn"), cfg, workers, slots, weights,
                     logging.getLogger("actor-harness"), max_restarts)
    pool.start()
    try:
        yield Harness(slots, pool, model, weights)
    finally:
        t0 = time.time()
        pool.close(timeout=10)
        assert time.time() - t0 < 10, "actors did not stop within 10 s of the stop flag"


def collect_rollouts(min_per_env: int, workers: int, envs: int, unroll: int, **kwargs):
    """(per env marker the list of its rollouts, dicts of [T+1, ...] tensors, in order,
    at least `min_per_env` for each of the workers x envs envs of the counting env;
    the model). `kwargs` go to `actors`."""
    by_env = collections.defaultdict(list)
    with actors(unroll=unroll, workers=workers, envs=envs, **kwargs) as h:
        while len(by_env) < workers * envs or min(map(len, by_env.values())) < min_per_env:
            for done in h.rollouts():
                batch = h.slots.gather(torch.tensor(done.indices))
                h.slots.release(done.indices)
                for j in range(len(done.indices)):
                    rollout = {k: v[:, j] for k, v in batch.items()}
                    by_env[float(rollout["obs"][0, 0])].append(rollout)
    return by_env, h.model
