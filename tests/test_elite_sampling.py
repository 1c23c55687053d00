"""Elite / attentive sampling math: distances, the four strategies, candidates, annealing."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from agents.distributions import DiagGaussian
from replay.sampling import (
    STRATEGIES,
    annealed_lambda,
    attentive_distances,
    candidate_count,
    cos_dist,
    draw_candidates,
    grouped_least_sampled,
    grouped_lowest,
    kl_div,
    least_sampled_lowest,
    ln_norm,
    lowest_distance,
    select,
)

# the hand-made example: distances and their order
#   index:     0    1    2    3    4    5    6
D = torch.tensor([0.7, 0.2, 0.5, 0.1, 0.9, 0.3, 0.6])
C = torch.tensor([0, 2, 1, 3, 0, 1, 0])
# by distance: 3 (0.1), 1 (0.2), 5 (0.3), 2 (0.5), 6 (0.6), 0 (0.7), 4 (0.9)
# n=3 groups of ranks [0,2) [2,4) [4,7): {3, 1}, {5, 2}, {6, 0, 4}


def ids(x):
    return x.tolist()


# ---------------------------------------------------------------------- strategies


def test_strategy_1_lowest_distance():
    assert ids(lowest_distance(D, C, 3)) == [3, 1, 5]
    assert ids(lowest_distance(torch.tensor([0.5, 0.1, 0.9, 0.3]), None, 2)) == [1, 3]


def test_strategy_2_lowest_of_each_group():
    assert ids(grouped_lowest(D, C, 3)) == [3, 5, 6]
    # M=10, n=4: groups of ranks [0,2) [2,5) [5,7) [7,10); distances = the ranks reversed
    d = torch.arange(10, 0, -1, dtype=torch.float32)  # index 9 is best, index 0 worst
    assert ids(grouped_lowest(d, None, 4)) == [9, 7, 4, 2]
    assert ids(grouped_lowest(D, C, 1)) == [3]


def test_strategy_3_fewest_samples_then_distance():
    # count 0: indices 0 (0.7), 4 (0.9), 6 (0.6) -> 6, 0, 4; then count 1: 5 (0.3), 2 (0.5)
    assert ids(least_sampled_lowest(D, C, 3)) == [6, 0, 4]
    assert ids(least_sampled_lowest(D, C, 5)) == [6, 0, 4, 5, 2]


def test_strategy_4_fewest_samples_within_each_group():
    # {3: c3, 1: c2} -> 1; {5: c1, 2: c1} -> 5 (lower distance); {6, 0, 4: all c0} -> 6
    assert ids(grouped_least_sampled(D, C, 3)) == [1, 5, 6]
    c = torch.tensor([0, 2, 1, 3, 5, 1, 4])  # last group {6: c4, 0: c0, 4: c5} -> 0
    assert ids(grouped_least_sampled(D, c, 3)) == [1, 5, 0]


def test_select_dispatches_and_checks():
    for k, fn in STRATEGIES.items():
        assert ids(select(k, D, C, 3)) == ids(fn(D, C, 3))
    with pytest.raises(ValueError, match="strategy"):
        select(5, D, C, 3)
    with pytest.raises(ValueError, match="counts"):
        select(3, D, None, 3)
    with pytest.raises(ValueError, match="non-empty"):
        select(1, torch.empty(0), None, 3)
    with pytest.raises(ValueError, match="match"):
        select(4, D, C[:3], 3)


# ---------------------------------------------------------------------- degenerate cases


def test_fewer_candidates_than_n_repeat_the_best():
    d = torch.tensor([0.3, 0.1])
    c = torch.tensor([0, 1])
    assert ids(lowest_distance(d, c, 5)) == [1, 0, 1, 0, 1]
    assert ids(grouped_lowest(d, c, 5)) == [1, 0, 1, 0, 1]
    assert ids(least_sampled_lowest(d, c, 3)) == [0, 1, 0]
    assert ids(grouped_least_sampled(d, c, 3)) == [0, 1, 0]
    one = torch.tensor([4.0])
    for fn in STRATEGIES.values():
        assert ids(fn(one, torch.tensor([7]), 4)) == [0, 0, 0, 0]


def test_m_equals_n_returns_every_candidate():
    for fn in STRATEGIES.values():
        assert sorted(ids(fn(D, C, 7))) == list(range(7))


def test_all_distances_equal_keep_index_order():
    d = torch.full((6,), 0.25)
    c = torch.zeros(6, dtype=torch.int64)
    assert ids(lowest_distance(d, c, 3)) == [0, 1, 2]
    assert ids(grouped_lowest(d, c, 3)) == [0, 2, 4]
    assert ids(least_sampled_lowest(d, c, 3)) == [0, 1, 2]
    assert ids(grouped_least_sampled(d, c, 3)) == [0, 2, 4]


def test_nan_and_inf_distances_rank_last():
    d = torch.tensor([math.nan, 0.5, math.inf, 0.1])
    assert ids(lowest_distance(d, None, 4)) == [3, 1, 2, 0]


def test_lambda_one_draws_exactly_n_and_takes_them_all():
    n = 5
    count = candidate_count(n, 1.0, 100)
    assert count == n
    cand = draw_candidates(100, count, torch.Generator().manual_seed(0))
    d = torch.rand(count)
    for fn in STRATEGIES.values():
        picked = fn(d, torch.zeros(count, dtype=torch.int64), n)
        assert sorted(ids(cand[picked])) == sorted(ids(cand))


def test_n_zero_is_empty():
    for fn in STRATEGIES.values():
        assert fn(D, C, 0).numel() == 0


@settings(max_examples=200, deadline=None)
@given(
    m=st.integers(1, 40),
    n=st.integers(1, 50),
    data=st.data(),
)
def test_strategies_always_return_n_valid_indices(m, n, data):
    values = st.sampled_from([0.0, 0.5, 1.0, math.nan, math.inf]) | st.floats(-10, 10)
    d = torch.tensor(data.draw(st.lists(values, min_size=m, max_size=m)), dtype=torch.float32)
    c = torch.tensor(data.draw(st.lists(st.integers(0, 5), min_size=m, max_size=m)))
    for fn in STRATEGIES.values():
        out = fn(d, c, n)
        assert out.dtype == torch.int64 and out.shape == (n,)
        assert bool(((out >= 0) & (out < m)).all())
        if m >= n:
            assert len(set(ids(out))) == n
        else:
            assert set(ids(out)) == set(range(m))


# ---------------------------------------------------------------------- distances


def test_ln_norm_is_the_mean_over_steps_of_the_norm():
    b = torch.zeros((2, 2, 2))
    cur = torch.tensor([[[3.0, 4.0], [1.0, 0.0]], [[0.0, 0.0], [1.0, 1.0]]])  # [T+1=2, M=2, K=2]
    assert torch.allclose(ln_norm(b, cur), torch.tensor([2.5, (1 + math.sqrt(2)) / 2]))
    assert torch.allclose(ln_norm(b, cur, p=1), torch.tensor([3.5, 1.5]))
    with pytest.raises(ValueError):
        ln_norm(b, cur[:, :1])


def test_cos_dist_ranks_the_more_similar_first():
    cur = torch.tensor([1.0, 0.0, 0.0]).expand(4, 3, 3)  # [T+1=4, M=3, K=3]
    b = torch.stack([
        torch.tensor([2.0, 0.0, 0.0]),  # same direction: 0
        torch.tensor([1.0, 1.0, 0.0]),  # 45 degrees: 1 - 1/sqrt(2)
        torch.tensor([-1.0, 0.0, 0.0]),  # opposite: 2
    ]).expand(4, 3, 3)
    d = cos_dist(b, cur)
    assert torch.allclose(d, torch.tensor([0.0, 1 - 1 / math.sqrt(2), 2.0]), atol=1e-6)
    assert ids(lowest_distance(d, None, 3)) == [0, 1, 2]


def test_cos_dist_of_zero_vectors_is_one_not_nan():
    z = torch.zeros((2, 2, 3))
    x = torch.ones((2, 2, 3))
    assert torch.equal(cos_dist(z, x), torch.ones(2))
    assert torch.equal(cos_dist(z, z), torch.ones(2))
    assert torch.equal(attentive_distances(z, torch.zeros((4, 3))), torch.ones(2))


def test_kl_div_zero_for_identical_and_matches_manual():
    logits = torch.randn((3, 4, 5), generator=torch.Generator().manual_seed(0))
    assert torch.allclose(kl_div(logits, logits), torch.zeros(4), atol=1e-6)
    b = torch.tensor([[[0.0, math.log(3.0)]]])  # p = (1/4, 3/4)
    c = torch.tensor([[[0.0, 0.0]]])  # q = (1/2, 1/2)
    manual = 0.25 * math.log(0.25 / 0.5) + 0.75 * math.log(0.75 / 0.5)
    assert kl_div(b, c).item() == pytest.approx(manual, rel=1e-6)
    # two steps, two candidates: the mean over steps
    bb = torch.cat([b, c]).expand(2, 2, 2)
    cc = c.expand(2, 2, 2)
    assert torch.allclose(kl_div(bb, cc), torch.full((2,), manual / 2))
    # KL is not symmetric: KL(b || c) != KL(c || b)
    assert kl_div(c, b).item() != pytest.approx(manual)
    # a behaviour probability of 0 adds nothing (no NaN)
    masked = torch.tensor([[[0.0, -math.inf]]])
    assert kl_div(masked, c).item() == pytest.approx(math.log(2.0))


def test_kl_div_of_gaussian_params_is_the_mean_over_steps_of_the_exact_kl():
    """Continuous actions: the params are (mean, log-std); 1-D N(0, 1) against
    N(1, 2^2) has KL log 2 + (1 + 1) / 8 - 1/2."""
    b = torch.tensor([[[0.0, 0.0]]])
    c = torch.tensor([[[1.0, math.log(2.0)]]])
    manual = math.log(2.0) + 2.0 / 8.0 - 0.5
    assert kl_div(b, c, DiagGaussian).item() == pytest.approx(manual, rel=1e-6)
    assert kl_div(torch.cat([b, b]), torch.cat([c, b]), DiagGaussian).item() == \
        pytest.approx(manual / 2, rel=1e-6)


def test_attentive_distances_prefer_candidates_near_recent_states():
    states = torch.tensor([[1.0, 0.0], [0.0, 1.0]])  # [N=2, K=2]
    cand = torch.stack([
        torch.tensor([[1.0, 0.0], [0.0, 2.0]]),  # candidate 0: both steps on a recent state
        torch.tensor([[1.0, 1.0], [1.0, 1.0]]),  # candidate 1: between them
        torch.tensor([[-1.0, 0.0], [0.0, -1.0]]),  # candidate 2: away from them
    ], dim=1)  # [T+1=2, M=3, K=2]
    d_max = attentive_distances(cand, states)
    assert torch.allclose(d_max, torch.tensor([0.0, 1 - 1 / math.sqrt(2), 1.0]), atol=1e-6)
    assert ids(lowest_distance(d_max, None, 3)) == [0, 1, 2]
    d_mean = attentive_distances(cand, states, reduce="mean")
    assert torch.allclose(d_mean, torch.tensor([0.5, 1 - 1 / math.sqrt(2), 1.5]), atol=1e-6)
    # chunking gives the same result
    assert torch.allclose(attentive_distances(cand, states, chunk_elements=1), d_max)
    with pytest.raises(ValueError, match="N >= 1"):
        attentive_distances(cand, torch.empty((0, 2)))
    with pytest.raises(ValueError, match="reduce"):
        attentive_distances(cand, states, reduce="min")


# ---------------------------------------------------------------------- candidates, lambda


def test_candidate_count():
    assert candidate_count(4, 1.0, 100) == 4
    assert candidate_count(4, 2.5, 100) == 10
    assert candidate_count(5, 1.5, 100) == 8  # 7.5 rounds half up
    assert candidate_count(4, 2.5, 7) == 7  # not more than stored
    assert candidate_count(4, 2.5, 2) == 2  # fewer than n: the strategies repeat
    assert candidate_count(4, 0.5, 100) == 4  # never fewer than n
    assert candidate_count(4, 2.0, 0) == 0


def test_draw_candidates_distinct_and_uniform():
    gen = torch.Generator().manual_seed(123)
    available, count, draws = 10, 3, 20000
    freq = torch.zeros(available)
    for _ in range(draws):
        c = draw_candidates(available, count, gen)
        assert c.numel() == count and len(set(c.tolist())) == count
        freq[c] += 1
    expected = draws * count / available
    chi2 = float(((freq - expected) ** 2 / expected).sum())
    assert chi2 < 40.0, (chi2, freq)  # 9 degrees of freedom: P(chi2 > 40) ~ 1e-5
    assert ids(draw_candidates(4, 4, gen).sort().values) == [0, 1, 2, 3]
    with pytest.raises(ValueError):
        draw_candidates(3, 4)


def test_draw_candidates_from_a_large_replay_rejects_repeats_and_stays_uniform():
    """Few of many (the off-policy batches of a replay of 125,000 rollouts): draws
    with replacement, repeats dropped; every position and every place equally likely."""
    gen = torch.Generator().manual_seed(7)
    available, count, draws = 160, 8, 20000
    freq, first = torch.zeros(available), torch.zeros(available)
    for _ in range(draws):
        c = draw_candidates(available, count, gen)
        assert c.numel() == count and len(set(c.tolist())) == count
        freq[c] += 1
        first[c[0]] += 1
    expected = draws * count / available
    assert float(((freq - expected) ** 2 / expected).sum()) < 280  # 159 dof: mean 159, sd 18
    expected = draws / available
    assert float(((first - expected) ** 2 / expected).sum()) < 280


def test_annealed_lambda():
    assert annealed_lambda(4.0, 0, 1000, 0.5) == 4.0
    assert annealed_lambda(4.0, 250, 1000, 0.5) == pytest.approx(2.5)
    assert annealed_lambda(4.0, 500, 1000, 0.5) == 1.0
    assert annealed_lambda(4.0, 10**6, 1000, 0.5) == 1.0
    assert annealed_lambda(4.0, -5, 1000, 0.5) == 4.0
    assert annealed_lambda(4.0, 0, 1000, 0.0) == 1.0  # no horizon: no annealing
    assert annealed_lambda(1.0, 123, 1000, 0.5) == 1.0
