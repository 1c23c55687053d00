"""The action distributions against NumPy and SciPy references: the categorical
and the diagonal Gaussian (closed forms, and numerical integration for its KL)."""

import numpy as np
import pytest
import torch
from scipy import integrate, stats

from agents.distributions import Categorical, DiagGaussian


def np_log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def test_log_prob_entropy_kl_and_mode_match_numpy():
    rng = np.random.default_rng(0)
    a = rng.normal(size=(5, 3, 4)).astype(np.float64) * 3
    b = rng.normal(size=(5, 3, 4)).astype(np.float64)
    actions = rng.integers(0, 4, size=(5, 3))
    la, lb = np_log_softmax(a), np_log_softmax(b)
    p = np.exp(la)
    da, db = Categorical(torch.from_numpy(a)), Categorical(torch.from_numpy(b))
    np.testing.assert_allclose(da.log_prob(torch.from_numpy(actions)).numpy(),
                               np.take_along_axis(la, actions[..., None], -1)[..., 0],
                               rtol=1e-12)
    np.testing.assert_allclose(da.entropy().numpy(), -(p * la).sum(-1), rtol=1e-12)
    np.testing.assert_allclose(da.kl(db).numpy(), (p * (la - lb)).sum(-1), rtol=1e-12)
    np.testing.assert_array_equal(da.mode().numpy(), a.argmax(-1))
    assert da.kl(da).abs().max() == 0


def test_kl_ignores_actions_the_first_policy_never_takes():
    # p(a=1) = 0 exactly; q gives it probability 0 too: 0 log 0 terms add 0, not NaN
    p = torch.tensor([[0.0, -float("inf")]])
    q = torch.tensor([[1.0, -float("inf")]])
    assert Categorical(p).kl(Categorical(q)).item() == 0.0
    # q gives 0 to an action p takes: infinite
    assert Categorical(q.flip(-1)).kl(Categorical(q)).item() == float("inf")


def test_samples_follow_the_probabilities_and_the_generator():
    logits = torch.log(torch.tensor([[0.1, 0.2, 0.7], [0.5, 0.5, 0.0]]))
    dist = Categorical(logits.expand(20000, 2, 3))
    draws = dist.sample(torch.Generator().manual_seed(1))
    assert draws.shape == (20000, 2) and draws.dtype == torch.int64
    freq0 = torch.bincount(draws[:, 0], minlength=3) / 20000
    freq1 = torch.bincount(draws[:, 1], minlength=3) / 20000
    # 5 standard deviations of a frequency of 20000 draws is at most 0.018
    assert torch.allclose(freq0, torch.tensor([0.1, 0.2, 0.7]), atol=0.018)
    assert torch.allclose(freq1, torch.tensor([0.5, 0.5, 0.0]), atol=0.018)
    assert freq1[2] == 0
    again = dist.sample(torch.Generator().manual_seed(1))
    assert torch.equal(draws, again)


def gaussian_params(rng, shape, dims):
    """Random (mean, log-std) params float64 [*shape, 2 * dims] and the split."""
    mean = rng.normal(size=(*shape, dims)) * 2
    log_std = rng.normal(size=(*shape, dims)) * 0.5
    return np.concatenate([mean, log_std], -1), mean, log_std


def test_gaussian_log_prob_entropy_and_mode_match_scipy():
    rng = np.random.default_rng(1)
    params, mean, log_std = gaussian_params(rng, (4, 3), 2)
    actions = rng.normal(size=(4, 3, 2)) * 3
    d = DiagGaussian(torch.from_numpy(params))
    np.testing.assert_allclose(
        d.log_prob(torch.from_numpy(actions)).numpy(),
        stats.norm.logpdf(actions, mean, np.exp(log_std)).sum(-1), rtol=1e-12)
    np.testing.assert_allclose(d.entropy().numpy(),
                               stats.norm.entropy(mean, np.exp(log_std)).sum(-1), rtol=1e-12)
    np.testing.assert_array_equal(d.mode().numpy(), mean)


def test_gaussian_kl_matches_numerical_integration():
    rng = np.random.default_rng(2)
    p_params, pm, ps = gaussian_params(rng, (3,), 2)
    q_params, qm, qs = gaussian_params(rng, (3,), 2)
    got = DiagGaussian(torch.from_numpy(p_params)).kl(DiagGaussian(torch.from_numpy(q_params)))
    for i in range(3):
        expected = 0.0
        for j in range(2):  # independent dimensions: the KLs add
            p = stats.norm(pm[i, j], np.exp(ps[i, j]))
            q = stats.norm(qm[i, j], np.exp(qs[i, j]))
            expected += integrate.quad(lambda x, p=p, q=q: p.pdf(x) * (p.logpdf(x) - q.logpdf(x)),
                                       -np.inf, np.inf, epsabs=1e-12)[0]
        assert got[i].item() == pytest.approx(expected, rel=1e-6)
    same = DiagGaussian(torch.from_numpy(p_params))
    assert same.kl(same).abs().max() == 0


def test_gaussian_samples_have_the_mean_and_std_and_follow_the_generator():
    params = torch.tensor([[1.5, -2.0, np.log(0.5), np.log(3.0)]],
                          dtype=torch.float32).expand(200_000, 4)
    d = DiagGaussian(params)
    x = d.sample(torch.Generator().manual_seed(0))
    assert x.shape == (200_000, 2) and x.dtype == torch.float32
    np.testing.assert_allclose(x.mean(0).numpy(), [1.5, -2.0], atol=0.02)
    np.testing.assert_allclose(x.std(0).numpy(), [0.5, 3.0], rtol=0.01)
    again = d.sample(torch.Generator().manual_seed(0))
    assert torch.equal(x, again)


def test_the_two_kinds_describe_their_actions_and_params():
    assert (Categorical.param_size(6), Categorical.action_shape(6)) == (6, ())
    assert (DiagGaussian.param_size(3), DiagGaussian.action_shape(3)) == (6, (3,))
    assert Categorical.action_dtype == torch.int64
    assert DiagGaussian.action_dtype == torch.float32
