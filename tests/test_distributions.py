"""The categorical distribution against NumPy references."""

import numpy as np
import torch

from agents.distributions import Categorical


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
