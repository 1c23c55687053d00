"""The short-corridor grid world of Sutton & Barto (2018), Example 13.1, Fig. 13.1.

Four states in a row, S = 0 ... G = 3. Actions: 0 = left, 1 = right. Every step
gives reward -1 and the episode ends on reaching G. In state 1 the actions are
reversed. The agent sees no state signal (a constant observation), so the best
it can do is a stochastic policy: with gamma = 1 the optimum is
p(right) = 2 - sqrt(2) ~= 0.586, with value -11.66 from S.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np


class ShortCorridorEnv(gym.Env):
    metadata = {"render_modes": []}

    def __init__(self):
        self.observation_space = gym.spaces.Box(0.0, 1.0, shape=(1,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self._state = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._state = 0
        return np.ones(1, dtype=np.float32), {}

    def step(self, action):
        move = 1 if int(action) == 1 else -1
        if self._state == 1:
            move = -move
        self._state = max(0, self._state + move)
        terminated = self._state == 3
        return np.ones(1, dtype=np.float32), -1.0, terminated, False, {}


def register() -> None:
    if "ShortCorridor-v0" not in gym.envs.registry:
        gym.register(
            id="ShortCorridor-v0",
            entry_point="wrappers.short_corridor:ShortCorridorEnv",
            max_episode_steps=1000,
        )
