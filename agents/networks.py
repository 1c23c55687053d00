"""Actor-critic networks: the Nature CNN for uint8 pixels, an MLP for vectors.

Both map a flat batch of observations to policy logits and a state value:
    forward(obs: [N, *obs_shape]) -> (logits float32 [N, A], value float32 [N])
and, in the same single pass, can also return the last hidden layer of the policy
path (`hidden_size` = H wide), which the replays may use as features:
    forward_with_hidden(obs) -> (logits [N, A], value [N], hidden float32 [N, H])
Pixels arrive as uint8 [N, C, H, W] and are scaled to [0, 1] inside the model, so
uint8 travels all the way from the emulator to the first convolution.
"""

from __future__ import annotations

import math

import torch
from torch import nn


class NatureCNN(nn.Module):
    """Mnih et al. (2015) torso with policy and value heads.

    Input: uint8 [N, C, H, W] (C = stacked frames). Output: logits [N, A], value [N];
    `forward_with_hidden` adds the fc output float32 [N, hidden_size] (after its ReLU).
    """

    def __init__(self, obs_shape: tuple[int, ...], num_actions: int, hidden_size: int = 512):
        super().__init__()
        c, h, w = obs_shape
        self.hidden_size = hidden_size
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

    def _hidden(self, obs: torch.Tensor) -> torch.Tensor:
        x = obs.float().mul_(1.0 / 255.0)
        return self.fc(self.torso(x))

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self._hidden(obs)
        return self.policy(h), self.baseline(h).squeeze(-1)

    def forward_with_hidden(self, obs: torch.Tensor
                            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(logits [N, A], value [N], hidden [N, hidden_size]), one pass."""
        h = self._hidden(obs)
        return self.policy(h), self.baseline(h).squeeze(-1), h


class MLP(nn.Module):
    """Separate two-layer tanh torsos for the policy and the value (as CleanRL does
    for vector tasks: value gradients, of the scale of the returns, do not swamp
    the policy's features).

    Input: float32 [N, D]. Output: logits [N, A], value [N]; `forward_with_hidden`
    adds the policy torso's output float32 [N, hidden_size] (after its tanh).
    """

    def __init__(self, obs_shape: tuple[int, ...], num_actions: int, hidden_size: int = 64):
        super().__init__()
        n_in = int(math.prod(obs_shape))
        self.hidden_size = hidden_size

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
        logits, value, _ = self.forward_with_hidden(obs)
        return logits, value

    def forward_with_hidden(self, obs: torch.Tensor
                            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(logits [N, A], value [N], hidden [N, hidden_size]), one pass."""
        x = obs.float()
        h = self.policy_torso(x)
        value = self.baseline(self.value_torso(x)).squeeze(-1)
        return self.policy(h), value, h


def build_model(obs_shape: tuple[int, ...], num_actions: int, hidden_size: int) -> nn.Module:
    """The Nature CNN for [C, H, W] observations, the MLP for anything flatter."""
    if len(obs_shape) == 3:
        return NatureCNN(obs_shape, num_actions, hidden_size)
    return MLP(obs_shape, num_actions, hidden_size)
