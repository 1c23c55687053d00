"""Action distributions: the one home of the policy's maths.

A model's policy head emits distribution parameters, float32 [..., P]; the actors
store them with each step (the slots' `logits` field, named for the categorical
case) and everything that samples an action, scores one or compares two policies
builds a distribution from them and asks it: the actors and the evaluation worker
(`sample`, `mode`), the losses and V-trace (`log_prob`, `entropy`, `kl`) and the
replays' `kl_div` distance.

Two kinds, picked by the env's action space (`DISTRIBUTIONS`, keyed by the
`action_kind` of `wrappers.envs.EnvInfo`):
  * "discrete": `Categorical`, P = A unnormalised log-probabilities (logits) over A
    actions; an action is int64 [...].
  * "box": `DiagGaussian`, P = 2A: the mean and the log standard deviation of each
    of A independent action dimensions; an action is float32 [..., A], unbounded
    (the env wrapper clips it to the space's bounds, `wrappers.envs`).
A new kind is one more class with the same five methods and three class
attributes, and one entry in `DISTRIBUTIONS`.
"""

from __future__ import annotations

import math
from functools import cached_property

import torch
import torch.nn.functional as F

LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


class Categorical:
    """Categorical distributions over A actions, one per leading index.

    params: float32 [..., A] logits. Actions are int64 [...]; every method returns
    float32 [...] (one figure per distribution) unless it says otherwise.
    """

    action_dtype = torch.int64

    @staticmethod
    def param_size(n: int) -> int:
        """P for n actions."""
        return n

    @staticmethod
    def action_shape(n: int) -> tuple[int, ...]:
        """The shape of one action: a scalar index."""
        return ()

    def __init__(self, params: torch.Tensor):
        self.params = params

    @cached_property
    def log_probs(self) -> torch.Tensor:
        """log pi(a) for every action, float32 [..., A]."""
        return F.log_softmax(self.params, dim=-1)

    def sample(self, generator: torch.Generator | None = None) -> torch.Tensor:
        """One action per distribution, int64 [...], drawn from `generator`'s stream."""
        probs = torch.softmax(self.params, dim=-1)
        flat = probs.reshape(-1, probs.shape[-1])
        return torch.multinomial(flat, 1, generator=generator).view(probs.shape[:-1])

    def mode(self) -> torch.Tensor:
        """The most likely action, int64 [...] (the greedy policy)."""
        return self.params.argmax(-1)

    def log_prob(self, action: torch.Tensor) -> torch.Tensor:
        """log pi(action), for action int64 [...]."""
        return self.log_probs.gather(-1, action.unsqueeze(-1)).squeeze(-1)

    def entropy(self) -> torch.Tensor:
        """-sum_a pi(a) log pi(a)."""
        return -(self.log_probs.exp() * self.log_probs).sum(-1)

    def kl(self, other: Categorical) -> torch.Tensor:
        """KL(self || other) = sum_a p(a) (log p(a) - log q(a)); actions with p(a) = 0
        add 0 (inf where q(a) = 0 and p(a) > 0)."""
        p = self.log_probs.exp()
        terms = p * (self.log_probs - other.log_probs)
        return torch.where(p > 0, terms, torch.zeros_like(terms)).sum(-1)


class DiagGaussian:
    """Gaussians over A action dimensions with a diagonal covariance, one per leading
    index.

    params: float32 [..., 2A], the means [..., :A] then the log standard deviations
    [..., A:]. Actions are float32 [..., A]. Log-probabilities and entropies are sums
    over the A dimensions (the dimensions are independent); every method returns
    float32 [...] unless it says otherwise.
    """

    action_dtype = torch.float32

    @staticmethod
    def param_size(n: int) -> int:
        """P for n action dimensions: a mean and a log-std each."""
        return 2 * n

    @staticmethod
    def action_shape(n: int) -> tuple[int, ...]:
        """The shape of one action: a vector of n dimensions."""
        return (n,)

    def __init__(self, params: torch.Tensor):
        self.params = params
        self.mean, self.log_std = params.chunk(2, dim=-1)

    def sample(self, generator: torch.Generator | None = None) -> torch.Tensor:
        """mean + std * N(0, 1) noise from `generator`'s stream, float32 [..., A]."""
        noise = torch.randn(self.mean.shape, generator=generator, dtype=self.mean.dtype,
                            device=self.mean.device)
        return self.mean + self.log_std.exp() * noise

    def mode(self) -> torch.Tensor:
        """The mean, float32 [..., A] (the greedy policy)."""
        return self.mean

    def log_prob(self, action: torch.Tensor) -> torch.Tensor:
        """sum_i log N(action_i; mean_i, std_i^2), for action float32 [..., A]."""
        z = (action - self.mean) * torch.exp(-self.log_std)
        return (-0.5 * z.pow(2) - self.log_std - LOG_SQRT_2PI).sum(-1)

    def entropy(self) -> torch.Tensor:
        """sum_i (1/2 + log(sqrt(2 pi)) + log std_i)."""
        return (0.5 + LOG_SQRT_2PI + self.log_std).sum(-1)

    def kl(self, other: DiagGaussian) -> torch.Tensor:
        """KL(self || other), exact: sum_i log(s2/s1) + (s1^2 + (m1 - m2)^2) / (2 s2^2)
        - 1/2."""
        var_ratio = torch.exp(2 * (self.log_std - other.log_std))
        gap = (self.mean - other.mean) * torch.exp(-other.log_std)
        return (0.5 * (var_ratio + gap.pow(2) - 1) - (self.log_std - other.log_std)).sum(-1)


# the env's action kind (`wrappers.envs.EnvInfo.action_kind`) -> its distribution
DISTRIBUTIONS: dict[str, type[Categorical] | type[DiagGaussian]] = {
    "discrete": Categorical,
    "box": DiagGaussian,
}
