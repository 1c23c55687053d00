"""The learners that train one policy together, as an agent's losses see them.

Data-parallel learners (`--learner_count=N`, training/ranks/group.py) each hold a
share of the group's batch and take identical optimizer steps. An agent reaches its
partners through its `group` only, so the same losses serve one learner and N:

- each rank's loss is its *share of the group's loss*: a mean over the group's
  batch is `group.mean(x)` = (this rank's sum) / (the group's count), and
  `reduce_gradients` sums the ranks' gradients; with equal shares that is the
  average of the ranks' gradients (CleanRL's and Cleanba's all-reduce);
- whatever normalises over a batch does so over the group's: `standardize`,
  `sum` (a weight's total), and `gather_moments` for the running statistics
  (agents/normalize.py).

Every rank must make the same calls in the same order (each is a collective).
`Group` itself is the lone learner, rank 0 of 1: every method is the local formula,
so a run without data parallelism computes exactly what it did before groups.
"""

from __future__ import annotations

import torch

# one batch's moments: (count, mean [*shape], variance [*shape], population)
Moments = tuple[float, torch.Tensor, torch.Tensor]


class Group:
    """A lone learner: rank 0 of a group of 1."""

    rank = 0
    size = 1

    def sum(self, x: torch.Tensor) -> torch.Tensor:
        """The group's sum of `x` (same shape; no gradient through it)."""
        return x

    def mean(self, x: torch.Tensor) -> torch.Tensor:
        """This rank's share of the mean of `x` over the group's elements: its sum over
        the group's count (keeps the gradient)."""
        return x.mean()

    def standardize(self, x: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
        """(x - mean) / (std + eps), the mean and the (n - 1) std over the group's
        elements of `x`."""
        return (x - x.mean()) / (x.std() + eps)

    def reduce_gradients(self, params: list[torch.Tensor]) -> None:
        """Sum the gradients of `params` over the group, in place (a lone learner's are
        already the group's)."""

    def gather_moments(self, moments: Moments) -> list[Moments]:
        """Every rank's `moments` in rank order (to fold into running statistics the
        same way on every rank)."""
        return [moments]


ALONE = Group()  # the lone learner: the default group of every agent and loss
