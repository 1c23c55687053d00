"""Running mean and variance, for input and return normalisation (Sample Factory's
`normalize_input` and `normalize_returns`).

`RunningMeanStd` keeps the mean and variance of everything it was updated with,
combined batch by batch with Chan et al.'s parallel formula (every sample weighs
the same, whatever batch it came in). Its statistics are buffers of the model
that owns it, so they travel with the weights to the actors (`workers/weights.py`)
and into checkpoints: the actors act on the statistics the learner trains with.

The learner alone updates them: the inputs from each rollout as it arrives
(`agents.agent.Agent.observe`, rows 0..T-1 once each, never a replayed rollout);
the return statistics once per batch (before ppo's epochs, and after impala's loss
is formed, from its V-trace targets):
- inputs: the fresh observations; the model then sees
  clamp((x - mean) / sqrt(var + eps), -clip, clip), per element of the
  observation (per pixel of the scaled frame stack on Atari);
- returns: the batch's value targets; the value head then predicts
  (V - mean) / std, the model's `forward` returns V in return units (so actors,
  GAE and V-trace never see normalised values), and the losses divide the value
  error by std: their value loss is the one of the normalised prediction.

Data-parallel learners (agents/group.py) merge every rank's moments in rank order
at the same points, so their statistics stay equal: the returns' in
`update_returns`; the inputs' accumulated per rank as rollouts arrive and merged
before each agreed update (`training.policy_learner.PolicyLearner`).
"""

from __future__ import annotations

import torch
from torch import nn

from agents.group import ALONE, Group, Moments


class RunningMeanStd(nn.Module):
    """Mean and variance float32 `shape`, and the sample count (float64), as buffers."""

    def __init__(self, shape: tuple[int, ...] = (), eps: float = 1e-5, clip: float = 5.0):
        super().__init__()
        self.eps = eps
        self.clip = clip
        self.register_buffer("mean", torch.zeros(shape))
        self.register_buffer("var", torch.ones(shape))
        self.register_buffer("count", torch.zeros((), dtype=torch.float64))

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> None:
        """Fold in x float [N, *shape] (N samples)."""
        self.merge(batch_moments(x, tuple(self.mean.shape)))

    @torch.no_grad()
    def merge(self, moments: Moments) -> None:
        """Fold in a batch's (count, mean, variance) (`batch_moments`)."""
        n, batch_mean, batch_var = moments
        if n == 0:
            return
        total = self.count + n
        delta = batch_mean - self.mean
        w = float(n / total)
        m2 = self.var * float(self.count) + batch_var * n + delta.pow(2) * float(self.count) * w
        self.mean += delta * w
        self.var.copy_(m2 / float(total))
        self.count.copy_(total)

    def moments(self) -> Moments:
        """(count, mean, variance) of everything folded in so far."""
        return int(self.count), self.mean.clone(), self.var.clone()

    def std(self) -> torch.Tensor:
        return (self.var + self.eps).sqrt()

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        """x float [..., *shape] -> clamp((x - mean) / std, -clip, clip), computed as
        x * (1 / std) - mean / std in one pass, clamped in place (a minibatch of 256
        Pong frame stacks: 6.7 ms from uint8 to normalised, against 10.9 ms as
        subtract, divide and clamp into new tensors). The result has x's memory layout
        (channels-last for the CNNs' inputs); the statistics are laid out as x is for
        the pass, which otherwise reads them across its strides (channels-last Pong frame
        stacks on 2 threads: 47 ms against 33 for 1,032, 0.062 against 0.015 for 4)."""
        inv = 1.0 / self.std()
        shift = -self.mean * inv
        if not x.is_contiguous():
            inv, shift = (torch.empty_like(x[:1]).copy_(t) for t in (inv, shift))
        out = torch.empty_like(x)
        return torch.addcmul(shift, x, inv, out=out).clamp_(-self.clip, self.clip)

    def denormalize(self, y: torch.Tensor) -> torch.Tensor:
        """y float [..., *shape] in normalised units -> y x std + mean."""
        return y * self.std() + self.mean


def batch_moments(x: torch.Tensor, shape: tuple[int, ...]) -> Moments:
    """(N, mean float32 `shape`, population variance float32 `shape`) of x [N, *shape]."""
    x = x.float().reshape(-1, *shape)
    if x.shape[0] == 0:
        return 0, torch.zeros(shape, device=x.device), torch.zeros(shape, device=x.device)
    var, mean = torch.var_mean(x, dim=0, correction=0)
    return x.shape[0], mean, var


def value_scale(model: nn.Module) -> torch.Tensor | float:
    """What the losses divide value errors by: the running std of the returns when
    the model normalises them (`model.return_norm`), else 1."""
    norm = getattr(model, "return_norm", None)
    return 1.0 if norm is None else norm.std().detach()


def update_returns(model: nn.Module, targets: torch.Tensor, group: Group = ALONE) -> None:
    """Fold a batch's value targets float [T, B] into the model's return statistics
    (nothing when it does not normalise returns): the targets of every rank of
    `group`, in rank order (agents/group.py)."""
    norm = getattr(model, "return_norm", None)
    if norm is not None:
        for moments in group.gather_moments(batch_moments(targets.detach(), ())):
            norm.merge(moments)


# rows summed at once in float32 by `uint8_moments`: 256 x 255^2 < 2^24, so every
# partial sum of values and of squares is an integer float32 holds exactly
_EXACT_ROWS = 256


def uint8_moments(x: torch.Tensor, shape: tuple[int, ...], scale: float) -> Moments:
    """(N, mean float32 `shape`, population variance float32 `shape`) of scale x x for
    x uint8 [N, *shape], from exact sums of the values and of their squares (float32
    over chunks of `_EXACT_ROWS` rows, added in float64), rounded to float32 at the
    end. On a rollout of 512 Pong frame stacks 25 ms against 66 ms to scale it and take
    `torch.var_mean` (2 threads)."""
    x = x.reshape(-1, *shape)
    n = x.shape[0]
    if n == 0:
        return batch_moments(x, shape)
    total = torch.zeros(2, *shape, dtype=torch.float64, device=x.device)
    for i in range(0, n, _EXACT_ROWS):
        chunk = x[i:i + _EXACT_ROWS].float()
        total[0] += chunk.sum(0)
        total[1] += chunk.square_().sum(0)
    mean = total[0] / n
    var = (total[1] / n - mean.square()).clamp_(min=0.0)
    return n, (mean * scale).float(), (var * scale * scale).float()


def input_moments(model: nn.Module, obs: torch.Tensor) -> Moments:
    """The moments of observations [T, B, *obs_shape] (uint8 or float) as the model's
    input statistics see them (scaled by its `input_scale`); the model must normalise
    inputs."""
    shape = tuple(model.obs_norm.mean.shape)
    if obs.dtype == torch.uint8:
        return uint8_moments(obs, shape, model.input_scale)
    return batch_moments(model.scale_input(obs.reshape(-1, *shape)), shape)


def update_inputs(model: nn.Module, obs: torch.Tensor) -> None:
    """Fold a batch's observations [T, B, *obs_shape] (uint8 or float) into the
    model's input statistics (nothing when it does not normalise inputs)."""
    norm = getattr(model, "obs_norm", None)
    if norm is not None:
        norm.merge(input_moments(model, obs))
