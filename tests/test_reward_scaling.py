"""--scale_rewards: an actor's stored rewards are gymnasium's NormalizeReward of the raw
ones, and the episode returns it reports stay raw."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch

from option_flags import default_values
from tests.actor_harness import COUNTING, actors
from tests.counting_env import episode_length
from training.config import make_config
from training.factory import actor_config
from wrappers.envs import EnvOptions, env_info

GAMMA, ENVS, T, ROLLOUTS = 0.9, 3, 5, 8


def gymnasium_reference(steps: int) -> np.ndarray:
    """float32 [steps, ENVS]: gymnasium's vector NormalizeReward over the counting env
    (whose rewards and ends do not depend on the actions), SAME_STEP autoreset as ours."""
    env = gym.wrappers.vector.NormalizeReward(gym.make_vec(
        COUNTING, num_envs=ENVS, vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}), gamma=GAMMA)
    env.reset(seed=0)
    out = [env.step(np.zeros(ENVS, dtype=np.int64))[1] for _ in range(steps)]
    env.close()
    return np.asarray(out, dtype=np.float32)


def test_an_actor_stores_gymnasiums_normalized_rewards_and_reports_raw_returns():
    stored, episodes = [], []
    with actors(envs=ENVS, unroll=T, reward_scale_gamma=GAMMA) as h:
        while len(stored) < ROLLOUTS:
            for done in h.rollouts():
                rows = h.slots.gather(torch.tensor(done.indices))["reward"][1:]  # [T, E]
                h.slots.release(done.indices)
                stored.append(rows.numpy())
                episodes.extend(done.episodes)
    stored = np.concatenate(stored[:ROLLOUTS])  # [ROLLOUTS * T, E], the actor's steps
    reference = gymnasium_reference(len(stored))
    np.testing.assert_allclose(stored, reference, rtol=1e-5)
    # scaled, not raw: the last rollout's raw rewards are in the thousands
    assert np.abs(stored[-T:]).max() < 5 and stored[-T:].min() > 0
    # the episodes' returns are the raw rewards' sums: episode k pays 1000 k + 1..L_k
    assert len(episodes) >= 4 * ENVS
    for k, (ret, length) in enumerate(episodes[:ENVS * 4:ENVS]):
        assert length == episode_length(k)
        assert ret == sum(1000.0 * k + i for i in range(1, length + 1))


def test_scale_rewards_reaches_the_actors_with_the_runs_gamma():
    env = "CartPole-v1"
    info = env_info(env, EnvOptions())
    off, _ = make_config(default_values(env=env))
    on, _ = make_config(default_values(env=env, scale_rewards=True, gamma=0.97))
    assert actor_config(off, info).reward_scale_gamma is None
    assert actor_config(on, info).reward_scale_gamma == 0.97
