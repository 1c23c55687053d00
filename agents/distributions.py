"""Action distributions: the one home of the policy's maths.

A model's policy head emits distribution parameters, float32 [..., P]; the actors
store them with each step (the slots' `logits` field) and everything that samples
an action, scores one or compares two policies builds a distribution from them
and asks it: the actors and the evaluation worker (`sample`, `mode`), the losses
and V-trace (`log_prob`, `entropy`, `kl`) and the replays' `kl_div` distance.

`Categorical` is the only kind today: P = A unnormalised log-probabilities
(logits) over A discrete actions, and an action is int64 [...]. Another kind (a
Gaussian over continuous actions, say) implements the same five methods.
"""

from __future__ import annotations

from functools import cached_property

import torch
import torch.nn.functional as F


class Categorical:
    """Categorical distributions over A actions, one per leading index.

    params: float32 [..., A] logits. Actions are int64 [...]; every method returns
    float32 [...] (one figure per distribution) unless it says otherwise.
    """

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
