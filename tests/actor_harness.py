"""Run real actor processes against a slot pool, without a learner."""

from __future__ import annotations

import contextlib
import queue
import time

import torch
import torch.multiprocessing as mp

from agents.networks import build_model
from workers.actor import ActorConfig, run_actor
from workers.slots import SlotPool, rollout_spec
from workers.weights import SharedWeights
from wrappers.envs import EnvOptions, env_info

COUNTING = "tests.counting_env:Counting-v0"


@contextlib.contextmanager
def actors(env_id=COUNTING, workers=1, envs=3, unroll=5, num_slots=None, seed=0, hidden=16):
    """Yields (pool, model, weights, events); the model's weights are published."""
    ctx = mp.get_context("spawn")
    info = env_info(env_id, EnvOptions())
    torch.manual_seed(seed)
    model = build_model(info.obs_shape, info.num_actions, hidden)
    spec = rollout_spec(unroll, info.obs_shape, info.obs_dtype, info.num_actions)
    pool = SlotPool(spec, num_slots or 4 * workers * envs, ctx)
    weights = SharedWeights(model, ctx)
    weights.publish(model, 0)
    events, stop = ctx.Queue(), ctx.Event()
    cfg = ActorConfig(env_id=env_id, env_options=EnvOptions(), envs_per_worker=envs,
                      unroll_length=unroll, obs_shape=info.obs_shape,
                      num_actions=info.num_actions, hidden_size=hidden, seed=seed)
    procs = [ctx.Process(target=run_actor, args=(i, cfg, pool, weights, events, stop),
                         daemon=True) for i in range(workers)]
    for p in procs:
        p.start()
    stuck = []
    try:
        yield pool, model, weights, events
    finally:
        stop.set()
        deadline = time.time() + 10
        for p in procs:
            while p.is_alive() and time.time() < deadline:
                _drain(pool.full)  # a child exits only once its queue feeders have flushed
                _drain(events)
                p.join(timeout=0.05)
            if p.is_alive():
                stuck.append(p.name)
                p.kill()
    assert not stuck, f"actors did not stop within 10 s of the stop event: {stuck}"


def _drain(q) -> None:
    try:
        while True:
            q.get_nowait()
    except queue.Empty:
        pass
