"""Reward scaling by a running estimate of the discounted return's std (`--scale_rewards`).

CleanRL's way (gymnasium's `NormalizeReward`; SB3's VecNormalize `norm_reward` is alike):
each env keeps its discounted return G <- gamma * G * (1 - terminated) + r, every
step's G of all envs updates one running mean and variance (gymnasium's
`RunningMeanStd`), and the reward is divided by sqrt(var + eps); the mean is not
subtracted. Sample Factory normalises the value targets instead (`--normalize_returns`);
both can be on.

    scaler = RewardScaler(num_envs=E, gamma=0.99)
    scaled = scaler(reward, terminated, truncated)  # float32 [E]

The same arithmetic as gymnasium's vector `NormalizeReward` over a SAME_STEP
autoreset env (`tests/test_reward_scaling.py` compares them): an env that ended starts
its next return from 0. Each actor holds its own statistics (as each CleanRL process
does); they are not checkpointed and start again after a resume or an actor restart.
"""

from __future__ import annotations

import numpy as np
from gymnasium.wrappers.utils import RunningMeanStd


class RewardScaler:
    def __init__(self, num_envs: int, gamma: float, epsilon: float = 1e-8):
        self.gamma = gamma
        self.epsilon = epsilon
        self.returns = np.zeros(num_envs, dtype=np.float64)  # G per env
        self.rms = RunningMeanStd(shape=())

    def __call__(self, reward: np.ndarray, terminated: np.ndarray,
                 truncated: np.ndarray) -> np.ndarray:
        """reward float32 [E], terminated and truncated bool [E] -> the scaled rewards
        float32 [E]; the statistics take this step's returns first."""
        self.returns = self.returns * self.gamma * (1 - terminated) + reward
        self.rms.update(self.returns)
        self.returns[terminated | truncated] = 0.0
        return (reward / np.sqrt(self.rms.var + self.epsilon)).astype(np.float32)
