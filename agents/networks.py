"""Actor-critic networks: the Nature CNN for uint8 pixels, an MLP for vectors.

Both map a flat batch of observations to policy logits and a state value:
    forward(obs: [N, *obs_shape]) -> (logits float32 [N, A], value float32 [N])
Pixels arrive as uint8 [N, C, H, W] and are scaled to [0, 1] inside the model, so
uint8 travels all the way from the emulator to the first convolution.
"""

from __future__ import annotations

import math

import torch
from torch import nn


class NatureCNN(nn.Module):
    """Mnih et al. (2015) torso with policy and value heads.

    Input: uint8 [N, C, H, W] (C = stacked frames). Output: logits [N, A], value [N].
    """

    def __init__(self, obs_shape: tuple[int, ...], num_actions: int, hidden_size: int = 512):
        super().__init__()
        c, h, w = obs_shape
        self.torso = nn.Sequential(
            nn.Conv2d(c, 32, kernel_size=8, stride=4),
            nn.ReLU(),
            nn.Conv2d(32, 64, kernel_size=4, stride=2),
            nn.ReLU(),
            nn.Conv2d(64, 64, kernel_size=3, stride=1),
            nn.ReLU(),
            nn.Flatten(),
        )
        with torch.no_grad():
            n_flat = self.torso(torch.zeros(1, c, h, w)).shape[1]
        self.fc = nn.Sequential(nn.Linear(n_flat, hidden_size), nn.ReLU())
        self.policy = nn.Linear(hidden_size, num_actions)
        self.baseline = nn.Linear(hidden_size, 1)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = obs.float().mul_(1.0 / 255.0)
        h = self.fc(self.torso(x))
        return self.policy(h), self.baseline(h).squeeze(-1)


class MLP(nn.Module):
    """Separate two-layer tanh torsos for the policy and the value (as CleanRL does
    for vector tasks: value gradients, of the scale of the returns, do not swamp
    the policy's features).

    Input: float32 [N, D]. Output: logits [N, A], value [N].
    """

    def __init__(self, obs_shape: tuple[int, ...], num_actions: int, hidden_size: int = 64):
        super().__init__()
        n_in = int(math.prod(obs_shape))

        def torso() -> nn.Sequential:
            return nn.Sequential(
                nn.Flatten(),
                nn.Linear(n_in, hidden_size),
                nn.Tanh(),
                nn.Linear(hidden_size, hidden_size),
                nn.Tanh(),
            )

        self.policy_torso = torso()
        self.value_torso = torso()
        self.policy = nn.Linear(hidden_size, num_actions)
        self.baseline = nn.Linear(hidden_size, 1)
        nn.init.orthogonal_(self.policy.weight, gain=0.01)
        nn.init.zeros_(self.policy.bias)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = obs.float()
        logits = self.policy(self.policy_torso(x))
        value = self.baseline(self.value_torso(x)).squeeze(-1)
        return logits, value


def build_model(obs_shape: tuple[int, ...], num_actions: int, hidden_size: int) -> nn.Module:
    """The Nature CNN for [C, H, W] observations, the MLP for anything flatter."""
    if len(obs_shape) == 3:
        return NatureCNN(obs_shape, num_actions, hidden_size)
    return MLP(obs_shape, num_actions, hidden_size)
