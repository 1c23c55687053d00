"""Elite and attentive sampling math: distances between feature sets and the strategies
that pick n of M candidate rollouts. Pure functions of tensors: no model, no state.

Elite replay, one batch share of n rollouts:

1. `candidate_count(n, lam, available)` rollouts are drawn uniformly without
   replacement from the storage (`draw_candidates`); `lam` anneals to 1 over training
   (`annealed_lambda`), when the candidates are the sample itself.
2. For each candidate a distance between the features stored with it (behaviour
   policy) and the features the current network computes for the same observations:
   `ln_norm`, `cos_dist` or `kl_div` (on logits), each float32 [M], LOWER = MORE
   SIMILAR = closer to on-policy.
3. A strategy picks n of the M candidates from the distances and the number of times
   each candidate was already sampled (`STRATEGIES`, `select`).

Attentive replay replaces step 2 by `attentive_distances`: how far a candidate's
states are from the states the actors visit now (lower = more relevant), so the same
strategies apply.

Every strategy returns exactly n indices into the M candidates, distinct when
M >= n. With M < n (fewer candidates than wanted) it returns all M in its order of
preference, then repeats that order from the best one until there are n:
`order[i % M]`. Ties keep the lower index first (stable sorts); NaN distances rank
last.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch

from agents.distributions import Categorical

# ---------------------------------------------------------------------- distances


def _check_pair(behaviour: torch.Tensor, current: torch.Tensor) -> None:
    if behaviour.shape != current.shape or behaviour.dim() != 3:
        raise ValueError(
            "expected two tensors [T+1, M, K] of the same shape, got "
            f"{list(behaviour.shape)} and {list(current.shape)}"
        )


def _unit(x: torch.Tensor, eps: float) -> torch.Tensor:
    """x / ||x|| along the last dim; a vector of norm < eps becomes the zero vector."""
    norm = torch.linalg.vector_norm(x, dim=-1, keepdim=True)
    return torch.where(norm < eps, torch.zeros_like(x), x / norm.clamp_min(eps))


def ln_norm(behaviour: torch.Tensor, current: torch.Tensor, p: float = 2.0) -> torch.Tensor:
    """Mean over steps of the L_p distance ||behaviour - current||_p.

    Args:
        behaviour, current: float32 [T+1, M, K], features per step of M candidates.
        p: the norm's order (2: Euclidean, 1: Manhattan, inf: max).
    Returns:
        float32 [M], >= 0.
    """
    _check_pair(behaviour, current)
    return torch.linalg.vector_norm(behaviour - current, ord=p, dim=-1).mean(0)


def cos_dist(behaviour: torch.Tensor, current: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """Mean over steps of 1 - cosine similarity: 0 same direction, 1 orthogonal, 2 opposite.

    A zero vector (norm < eps) has cosine 0 with everything, itself and another zero
    vector included: distance 1, never NaN.

    Args:
        behaviour, current: float32 [T+1, M, K].
    Returns:
        float32 [M] in [0, 2].
    """
    _check_pair(behaviour, current)
    cos = (_unit(behaviour, eps) * _unit(current, eps)).sum(-1).clamp(-1.0, 1.0)
    return (1.0 - cos).mean(0)


def kl_div(behaviour_logits: torch.Tensor, current_logits: torch.Tensor,
           distribution: type = Categorical) -> torch.Tensor:
    """Mean over steps of KL(behaviour || current) between the policies, exact for
    `distribution` (agents/distributions.py). For the softmax policies (the default),
    KL = sum_a pi_b(a) (log pi_b(a) - log pi_c(a)); actions with pi_b(a) = 0 add 0.

    Args:
        behaviour_logits, current_logits: float32 [T+1, M, P], the params.
    Returns:
        float32 [M], >= 0 (0 for identical params; inf where the current policy gives
        probability 0 to an action the behaviour policy takes).
    """
    _check_pair(behaviour_logits, current_logits)
    kl = distribution(behaviour_logits).kl(distribution(current_logits))
    return kl.clamp_min(0.0).mean(0)


DISTANCES: dict[str, Callable[..., torch.Tensor]] = {
    "ln_norm": ln_norm,
    "cos_dist": cos_dist,
    "kl_div": kl_div,
}


def attentive_distances(
    candidate_features: torch.Tensor,
    state_features: torch.Tensor,
    reduce: str = "max",
    eps: float = 1e-8,
    chunk_elements: int = 1 << 22,
) -> torch.Tensor:
    """How far each candidate rollout is from the states the actors visit now.

    For step t of candidate m and recent state s, c(t, m, s) = cosine similarity of
    their features (a zero vector has cosine 0, as in `cos_dist`). A step's relevance
    is the max over s of c ("is this state near any state visited now", the default)
    or the mean over s; a candidate's is the mean over its steps. Returned as
    distance = 1 - relevance, so lower = more similar and the strategies apply.

    Args:
        candidate_features: float32 [T+1, M, K], features of the candidates' steps.
        state_features: float32 [N, K], N >= 1 recent states of the actors.
        reduce: "max" or "mean" over the N states.
        chunk_elements: "max" works on candidates in chunks of at most this many
            [T+1, m, N] similarities, to bound memory.
    Returns:
        float32 [M] in [0, 2].
    """
    if candidate_features.dim() != 3 or state_features.dim() != 2 \
            or candidate_features.shape[-1] != state_features.shape[-1]:
        raise ValueError(
            "expected candidate_features [T+1, M, K] and state_features [N, K], got "
            f"{list(candidate_features.shape)} and {list(state_features.shape)}"
        )
    if state_features.shape[0] == 0:
        raise ValueError("attentive_distances needs at least one recent state (N >= 1)")
    a = _unit(candidate_features, eps)
    b = _unit(state_features, eps)
    t1, m, _ = a.shape
    if reduce == "mean":  # mean_s <a, b_s> = <a, mean_s b_s>
        sim = a @ b.mean(0)
    elif reduce == "max":
        step = max(1, chunk_elements // max(1, t1 * b.shape[0]))
        sim = torch.cat([(a[:, i:i + step] @ b.T).amax(-1) for i in range(0, m, step)], dim=1) \
            if m else a.new_zeros((t1, 0))
    else:
        raise ValueError(f"reduce must be 'max' or 'mean', got {reduce!r}")
    return (1.0 - sim.clamp(-1.0, 1.0)).mean(0)


# ---------------------------------------------------------------------- strategies


def _check(distances: torch.Tensor, counts: torch.Tensor | None, n: int) -> torch.Tensor:
    if distances.dim() != 1 or distances.numel() == 0:
        raise ValueError(f"distances must be a non-empty 1-D tensor [M], got "
                         f"{list(distances.shape)}")
    if counts is not None and counts.shape != distances.shape:
        raise ValueError(f"counts {list(counts.shape)} must match distances "
                         f"{list(distances.shape)}")
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    return torch.nan_to_num(distances.detach().double(), nan=math.inf)


def _by_distance(d: torch.Tensor) -> torch.Tensor:
    return torch.sort(d, stable=True).indices


def _by_count_then_distance(d: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    order = _by_distance(d)
    return order[torch.sort(counts[order], stable=True).indices]


def _take(order: torch.Tensor, n: int) -> torch.Tensor:
    """The first n of `order`, cycling through it when it is shorter than n."""
    m = order.numel()
    return order[:n] if m >= n else order[torch.arange(n) % m]


def _group_bounds(m: int, n: int) -> torch.Tensor:
    """Start of each of n groups of m ranks: group i = ranks [i*m//n, (i+1)*m//n)."""
    return torch.arange(n, dtype=torch.int64) * m // n


def lowest_distance(distances: torch.Tensor, counts: torch.Tensor | None, n: int) -> torch.Tensor:
    """Strategy 1: the n candidates with the lowest distance.

    Args:
        distances: float [M], lower = better. counts: ignored (int64 [M] or None).
    Returns:
        int64 [n], best first.
    """
    d = _check(distances, counts, n)
    return _take(_by_distance(d), n)


def grouped_lowest(distances: torch.Tensor, counts: torch.Tensor | None, n: int) -> torch.Tensor:
    """Strategy 2: sort by distance, cut the M ranks into n consecutive groups, group i
    holding ranks [floor(i*M/n), floor((i+1)*M/n)) (sizes differ by at most 1, none is
    empty when M >= n), and take the lowest of each group: a spread over the range.

    Args:
        distances: float [M]. counts: ignored.
    Returns:
        int64 [n], group by group (best first). M < n: as the module docstring says.
    """
    d = _check(distances, counts, n)
    order = _by_distance(d)
    m = order.numel()
    if m <= n or n == 0:
        return _take(order, n)
    return order[_group_bounds(m, n)]


def least_sampled_lowest(distances: torch.Tensor, counts: torch.Tensor, n: int) -> torch.Tensor:
    """Strategy 3: the n best by (sample count, distance): the fewest-sampled
    candidates first, ties broken by the lower distance.

    Args:
        distances: float [M]. counts: int64 [M], times each candidate was sampled.
    Returns:
        int64 [n], best first.
    """
    d = _check(distances, counts, n)
    return _take(_by_count_then_distance(d, counts), n)


def grouped_least_sampled(distances: torch.Tensor, counts: torch.Tensor, n: int) -> torch.Tensor:
    """Strategy 4: the groups of strategy 2; within each group the fewest-sampled
    candidate, ties broken by the lower distance.

    Args:
        distances: float [M]. counts: int64 [M].
    Returns:
        int64 [n], group by group. M < n: all M by (count, distance), then repeated.
    """
    d = _check(distances, counts, n)
    m = d.numel()
    if m <= n or n == 0:
        return _take(_by_count_then_distance(d, counts), n)
    order = _by_distance(d)
    ranks = torch.arange(m, dtype=torch.int64)
    group = torch.searchsorted(_group_bounds(m, n), ranks, right=True) - 1
    key = counts.to(torch.int64)[order] * m + ranks  # (count, rank by distance)
    best = torch.full((n,), torch.iinfo(torch.int64).max, dtype=torch.int64)
    best.scatter_reduce_(0, group, key, reduce="amin")
    return order[best % m]


STRATEGIES: dict[int, Callable[[torch.Tensor, torch.Tensor | None, int], torch.Tensor]] = {
    1: lowest_distance,
    2: grouped_lowest,
    3: least_sampled_lowest,
    4: grouped_least_sampled,
}


def select(strategy: int, distances: torch.Tensor, counts: torch.Tensor | None,
           n: int) -> torch.Tensor:
    """Pick n of the M candidates with strategy 1-4; int64 [n] indices into [0, M)."""
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {sorted(STRATEGIES)}, got {strategy!r}")
    if strategy in (3, 4) and counts is None:
        raise ValueError(f"strategy {strategy} needs the sample counts")
    return STRATEGIES[strategy](distances, counts, n)


# ---------------------------------------------------------------------- candidates


def candidate_count(n: int, lam: float, available: int) -> int:
    """How many distinct candidates to draw: min(available, max(n, round(lam * n))).

    round is half up (2.5 -> 3), not Python's half to even. With lam <= 1 it is n
    (or `available` when fewer are stored: the strategies then repeat).
    """
    if n < 0 or available < 0:
        raise ValueError(f"n and available must be >= 0, got {n} and {available}")
    return min(available, max(n, math.floor(lam * n + 0.5)))


def draw_candidates(available: int, count: int,
                    generator: torch.Generator | None = None) -> torch.Tensor:
    """`count` distinct positions of [0, available), uniformly, without replacement.

    Returns int64 [count]: a prefix of `torch.randperm(available)`, or where `count` is
    under a sixteenth of `available`, draws with replacement whose repeats are
    dropped (the same distribution: sequential draws rejecting repeats; a randperm of
    a replay of 125,000 rollouts cost 1.4 ms a batch).
    """
    if not 0 <= count <= available:
        raise ValueError(f"cannot draw {count} distinct candidates of {available}")
    if count * 16 > available:
        return torch.randperm(available, generator=generator)[:count]
    picked = torch.empty(0, dtype=torch.int64)
    while picked.numel() < count:
        drawn = torch.cat([picked, torch.randint(available, (count,), generator=generator)])
        _, first = np.unique(drawn.numpy(), return_index=True)
        picked = drawn[np.sort(first)]
    return picked[:count]


def annealed_lambda(lambda0: float, progress_updates: float, schedule_updates: float,
                    alfa: float) -> float:
    """lambda0 at update 0, linearly to 1 at update alfa * schedule_updates, then 1.

    A horizon alfa * schedule_updates <= 0 means no annealing: always 1.
    """
    horizon = alfa * schedule_updates
    if horizon <= 0 or progress_updates >= horizon:
        return 1.0
    frac = max(0.0, progress_updates) / horizon
    return lambda0 + (1.0 - lambda0) * frac
