"""Action distributions: the one home of the policy's maths.

A model's policy head emits distribution parameters, float32 [..., P]; the actors
store them with each step (the slots' `logits` field, named for the categorical
case) and everything that samples an action, scores one or compares two policies
builds a distribution from them and asks it: the actors and the evaluation worker
(`sample`, `mode`), the losses and V-trace (`log_prob`, `entropy`, `kl`) and the
replays' `kl_div` distance.

The kinds, picked by the env's action space (`DISTRIBUTIONS`, keyed by the
`action_kind` of `wrappers.envs.EnvInfo`) and, for a Box, by the agent
(`agents/registry.py`: an entry maps the env's kind to its distribution):
  * "discrete": `Categorical`, P = A unnormalised log-probabilities (logits) over A
    actions; an action is int64 [...].
  * "box": `DiagGaussian`, P = 2A: the mean and the log standard deviation of each
    of A independent action dimensions; an action is float32 [..., A], unbounded
    (the env wrapper clips it to the space's bounds, `wrappers.envs`).
  * "tanh_gaussian": `TanhGaussian` (SAC), P = 2A: a Gaussian's mean and raw log-std
    per dimension, the sample squashed by tanh into the action space's bounds.
  * "deterministic": `NoisyDeterministic` (TD3, DDPG), P = 2A: the pre-tanh action
    and the log of the exploration noise's std, a fraction of the bounds' half-width.
The two bounded kinds take the space's `scale` = (high - low) / 2 and `bias` =
(high + low) / 2 (float32 [A], or 1 and 0: the box [-1, 1]); a model binds them
(`model.distribution`, agents/off_policy.py).
A new kind is one more class with the same five methods and three class
attributes, and one entry in `DISTRIBUTIONS`.
"""

from __future__ import annotations

import math
from functools import cached_property

import numpy as np
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


LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0  # TanhGaussian's log-std range (CleanRL's, SpinningUp's)
# Gauss-Hermite (probabilists') nodes and weights / sqrt(2 pi): E f(u), u ~ N(m, s^2),
# = sum_k w_k f(m + s x_k); 32 nodes: within 0.002 of the log-Jacobian's mean up to std 2.7
_HERMITE_X, _HERMITE_W = (torch.tensor(a / d, dtype=torch.float32) for a, d in zip(
    np.polynomial.hermite_e.hermegauss(32), (1.0, math.sqrt(2 * math.pi)), strict=True))


def _on(x, params: torch.Tensor):
    """A bound (float, or tensor on any device) where `params` are: a model's buffers
    meet params stored on the CPU (the replays' distances)."""
    return x.to(params.device) if isinstance(x, torch.Tensor) else x


def log_one_minus_tanh2(u: torch.Tensor) -> torch.Tensor:
    """log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u)), finite for any u (the
    change of variables of tanh; SpinningUp's form)."""
    return 2.0 * (math.log(2.0) - u - F.softplus(-2.0 * u))


class TanhGaussian(DiagGaussian):
    """SAC's policy: a = bias + scale * tanh(u), u ~ N(mean, std^2) per dimension.

    params: float32 [..., 2A], the means then raw log-stds, squashed into
    [LOG_STD_MIN, LOG_STD_MAX] by tanh (CleanRL's bound). `scale`, `bias`: float32
    [A] (or floats). Log-probabilities include the change of variables:
    log pi(a) = log N(u; mean, std^2) - sum_i log(scale_i (1 - tanh(u_i)^2)).
    """

    def __init__(self, params: torch.Tensor, scale=1.0, bias=0.0):
        scale, bias = _on(scale, params), _on(bias, params)
        mean, raw = params.chunk(2, dim=-1)
        log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (torch.tanh(raw) + 1)
        super().__init__(torch.cat([mean, log_std], -1))
        self.params = params
        self.scale, self.bias = scale, bias

    def _squash(self, u: torch.Tensor) -> torch.Tensor:
        return self.bias + self.scale * torch.tanh(u)

    def _log_det(self, u: torch.Tensor) -> torch.Tensor:
        """sum_i log |da_i / du_i|, float32 [...]."""
        return (log_one_minus_tanh2(u) + torch.log(torch.as_tensor(self.scale))).sum(-1)

    def rsample(self, generator: torch.Generator | None = None
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """(action float32 [..., A], log pi(action) float32 [...]), differentiable in
        the params (the reparameterisation trick)."""
        noise = torch.randn(self.mean.shape, generator=generator, dtype=self.mean.dtype,
                            device=self.mean.device)
        u = self.mean + self.log_std.exp() * noise
        return self._squash(u), super().log_prob(u) - self._log_det(u)

    def sample(self, generator: torch.Generator | None = None) -> torch.Tensor:
        return self.rsample(generator)[0]

    def mode(self) -> torch.Tensor:
        """The squashed mean, float32 [..., A] (the greedy policy)."""
        return self._squash(self.mean)

    def log_prob(self, action: torch.Tensor) -> torch.Tensor:
        """log pi(action) of actions inside the bounds (clamped 1e-6 inside them)."""
        y = ((action - self.bias) / self.scale).clamp(-1 + 1e-6, 1 - 1e-6)
        u = torch.atanh(y)
        return super().log_prob(u) - self._log_det(u)

    def entropy(self) -> torch.Tensor:
        """H(a) = H(u) + E_u sum_i log(scale_i (1 - tanh(u_i)^2)): the Gaussian's plus
        the expected log-Jacobian, by 32-point Gauss-Hermite quadrature per dimension
        (deterministic; tests check it against a Monte Carlo estimate)."""
        x = _HERMITE_X.to(self.mean.device)
        w = _HERMITE_W.to(self.mean.device)
        u = self.mean.unsqueeze(-1) + self.log_std.exp().unsqueeze(-1) * x  # [..., A, K]
        jac = (log_one_minus_tanh2(u) * w).sum(-1) + torch.log(torch.as_tensor(self.scale))
        return super().entropy() + jac.sum(-1)

    def kl(self, other: DiagGaussian) -> torch.Tensor:
        """KL(self || other): that of the Gaussians before the squash (the same
        bijection of both leaves a KL unchanged)."""
        return super().kl(other)


class NoisyDeterministic(DiagGaussian):
    """TD3's and DDPG's acting: a deterministic action mu = bias + scale * tanh(x)
    plus Gaussian noise of std scale * sigma, clipped to the bounds.

    params: float32 [..., 2A], the pre-tanh actions x then log sigma (the
    `--exploration_noise` as a fraction of the half-width, a buffer of the model).
    `log_prob`, `entropy` and `kl` are those of the unclipped Gaussian N(mu,
    (scale sigma)^2) (what the replays' distances compare; the losses read none).
    """

    def __init__(self, params: torch.Tensor, scale=1.0, bias=0.0):
        scale, bias = _on(scale, params), _on(bias, params)
        x, log_sigma = params.chunk(2, dim=-1)
        self.scale, self.bias = scale, bias
        mu = bias + scale * torch.tanh(x)
        super().__init__(torch.cat([mu, log_sigma + torch.log(torch.as_tensor(scale))], -1))
        self.params = params

    def sample(self, generator: torch.Generator | None = None) -> torch.Tensor:
        """mu + noise, clipped to [bias - scale, bias + scale], float32 [..., A]."""
        a = super().sample(generator)
        return torch.minimum(torch.maximum(a, self.bias - torch.as_tensor(self.scale)),
                             self.bias + torch.as_tensor(self.scale))


# the env's action kind (`wrappers.envs.EnvInfo.action_kind`) -> its distribution
DISTRIBUTIONS: dict[str, type[Categorical] | type[DiagGaussian]] = {
    "discrete": Categorical,
    "box": DiagGaussian,
    "tanh_gaussian": TanhGaussian,
    "deterministic": NoisyDeterministic,
}
BOUNDED = ("tanh_gaussian", "deterministic")  # the kinds that take the bounds
