"""A counting environment for testing rollouts (importable by spawned actors as
`tests.counting_env:Counting-v0`).

Observation float32 [4]: (env marker, global step counter, episode index, step in
episode). The reward of a step is 1000 * episode + step number it arrives at, so
every transition is identifiable. Episode k lasts 3 + (k * 7) % 11 steps; every
third episode is truncated (time limit) instead of terminated, and episodes with
k % 5 == 4 (when not truncated) end with both flags raised, as gymnasium's
TimeLimit does when the last allowed step is also terminal.
"""

from __future__ import annotations

import time

import gymnasium as gym
import numpy as np


def episode_length(k: int) -> int:
    return 3 + (k * 7) % 11


def end_flags(k: int) -> tuple[bool, bool]:
    """(terminated, truncated) as the env returns them at the end of episode k."""
    if k % 3 == 2:
        return False, True
    return True, k % 5 == 4


class CountingEnv(gym.Env):
    def __init__(self):
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, shape=(4,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(3)
        self.marker = 0.0
        self.counter = 0
        self.episode = -1
        self.step_in_episode = 0

    def _obs(self):
        return np.array([self.marker, self.counter, self.episode, self.step_in_episode],
                        dtype=np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if seed is not None:
            self.marker = float(seed)
        self.episode += 1
        self.step_in_episode = 0
        return self._obs(), {}

    def step(self, action):
        self.counter += 1
        self.step_in_episode += 1
        reward = 1000.0 * self.episode + self.step_in_episode
        end = self.step_in_episode >= episode_length(self.episode)
        terminated, truncated = end_flags(self.episode) if end else (False, False)
        return self._obs(), reward, terminated, truncated, {}


if "Counting-v0" not in gym.envs.registry:
    gym.register(id="Counting-v0", entry_point="tests.counting_env:CountingEnv")


class ExplodingEnv(CountingEnv):
    """Raises after 50 steps: an actor failure."""

    def step(self, action):
        if self.counter >= 50:
            raise RuntimeError("boom: the exploding env went off")
        return super().step(action)


if "Exploding-v0" not in gym.envs.registry:
    gym.register(id="Exploding-v0", entry_point="tests.counting_env:ExplodingEnv")


class EchoBoxEnv(gym.Env):
    """Box actions in [-1, 1]^2; each observation is the action the env received at
    the step that led to it (zeros after a reset), so a rollout shows what reached
    the env. Episodes are cut after 4 steps (truncated)."""

    def __init__(self):
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, shape=(2,), dtype=np.float32)
        self.action_space = gym.spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)
        self.steps = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.steps = 0
        return np.zeros(2, dtype=np.float32), {}

    def step(self, action):
        self.steps += 1
        return np.asarray(action, dtype=np.float32), 0.0, False, self.steps >= 4, {}


if "EchoBox-v0" not in gym.envs.registry:
    gym.register(id="EchoBox-v0", entry_point="tests.counting_env:EchoBoxEnv")


class DictActionEnv(CountingEnv):
    """A Dict action space: not supported, refused naming the space."""

    def __init__(self):
        super().__init__()
        self.action_space = gym.spaces.Dict({"move": gym.spaces.Discrete(2)})


if "DictAction-v0" not in gym.envs.registry:
    gym.register(id="DictAction-v0", entry_point="tests.counting_env:DictActionEnv")


class SlowBoxEnv(EchoBoxEnv):
    """EchoBox taking 2 ms a step: actors slower than a small learner."""

    def step(self, action):
        time.sleep(0.002)
        return super().step(action)


if "SlowBox-v0" not in gym.envs.registry:
    gym.register(id="SlowBox-v0", entry_point="tests.counting_env:SlowBoxEnv")
