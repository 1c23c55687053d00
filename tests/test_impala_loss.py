"""The IMPALA loss on a hand-checkable batch: on-policy, V-trace reduces to n-step
returns, so the value loss and policy-gradient loss can be computed by hand."""

from __future__ import annotations

import math

import torch

from agents.impala import (
    LossConfig,
    clip_rewards,
    explained_variance,
    impala_loss,
    scale_advantages,
)
from agents.networks import MLP, step_model


def _batch(model, t: int, b: int, gamma_cut: tuple[int, int]):
    torch.manual_seed(0)
    obs = torch.randn(t + 1, b, 3)
    with torch.no_grad():
        logits, values, _, _ = step_model(model, obs.reshape(-1, 3))
    done = torch.zeros(t + 1, b, dtype=torch.bool)
    done[gamma_cut] = True
    return {
        "obs": obs,
        "action": torch.randint(0, 2, (t + 1, b)),
        "logits": logits.view(t + 1, b, 2),
        "value": values.view(t + 1, b),
        "reward": torch.randn(t + 1, b),
        "done": done,
        "truncated": torch.zeros(t + 1, b, dtype=torch.bool),
        "bootstrap_value": torch.zeros(t + 1, b),
    }, values.view(t + 1, b), logits.view(t + 1, b, 2)


def test_on_policy_loss_equals_n_step_returns():
    t, b, gamma = 6, 3, 0.9
    model = MLP((3,), 2, hidden_size=8)
    batch, values, logits = _batch(model, t, b, gamma_cut=(3, 1))
    cfg = LossConfig(gamma=gamma, clip_rewards=False, entropy_loss_weight=0.0,
                     value_loss_weight=1.0)
    loss, stats = impala_loss(model, batch, cfg)

    # hand computation: returns G_s = r_{s+1} + gamma (1 - done_{s+1}) G_{s+1}, G_T = V(x_T)
    returns = torch.zeros(t, b)
    g = values[t]
    for s in reversed(range(t)):
        g = batch["reward"][s + 1] + gamma * (~batch["done"][s + 1]).float() * g
        returns[s] = g
    value_loss = 0.5 * (returns - values[:t]).pow(2).mean()
    next_returns = torch.cat([returns[1:], values[t:]], 0)
    adv = batch["reward"][1:] + gamma * (~batch["done"][1:]).float() * next_returns - values[:t]
    logp = torch.log_softmax(logits[:t], -1).gather(-1, batch["action"][:t, :, None])[..., 0]
    pg_loss = -(logp * adv).mean()
    assert abs(stats["value_loss"] - value_loss.item()) < 1e-5
    assert abs(stats["policy_loss"] - pg_loss.item()) < 1e-5
    assert abs(stats["mean_rho"] - 1.0) < 1e-6
    assert abs(loss.item() - (pg_loss + value_loss).item()) < 1e-5

    # the gradient raises the log-probability of actions with positive advantage
    loss.backward()
    with torch.no_grad():
        for p in model.parameters():
            p -= 0.01 * p.grad
        new_logp = torch.log_softmax(step_model(model, batch["obs"][:t].reshape(-1, 3))[0], -1)
        new_logp = new_logp.view(t, b, 2).gather(-1, batch["action"][:t, :, None])[..., 0]
    assert ((new_logp - logp) * adv).sum() > 0


def test_normalized_advantages_are_the_on_policy_ones_scaled():
    t, b, gamma = 6, 3, 0.9
    model = MLP((3,), 2, hidden_size=8)
    batch, values, logits = _batch(model, t, b, gamma_cut=(3, 1))
    cfg = LossConfig(gamma=gamma, clip_rewards=False, entropy_loss_weight=0.0,
                     value_loss_weight=1.0, normalize_advantages=True)
    _, stats = impala_loss(model, batch, cfg)
    _, plain = impala_loss(model, batch, LossConfig(gamma=gamma, clip_rewards=False))
    # by hand, as above: n-step advantages, then A / std over all T x B steps
    returns = torch.zeros(t, b)
    g = values[t]
    for s in reversed(range(t)):
        g = batch["reward"][s + 1] + gamma * (~batch["done"][s + 1]).float() * g
        returns[s] = g
    next_returns = torch.cat([returns[1:], values[t:]], 0)
    adv = batch["reward"][1:] + gamma * (~batch["done"][1:]).float() * next_returns - values[:t]
    assert abs(adv.mean()) > 0.1 * adv.std()  # a mean to keep
    adv = adv / adv.std()
    logp = torch.log_softmax(logits[:t], -1).gather(-1, batch["action"][:t, :, None])[..., 0]
    assert abs(stats["policy_loss"] - (-(logp * adv).mean()).item()) < 1e-5
    # so the policy gradient only changes length: the plain one over the std
    assert abs(stats["policy_loss"] * plain["adv_std"] - plain["policy_loss"]) < 1e-5
    # the value targets do not change, and the statistics report the raw advantages
    assert abs(stats["value_loss"] - plain["value_loss"]) < 1e-6
    assert abs(stats["adv_std"] - plain["adv_std"]) < 1e-6 and plain["adv_std"] > 0


def test_scaled_advantages_add_no_push_away_from_the_behaviour_policy():
    # one state; the actors' policy mu = (0.6, 0.4) drew 60 and 40 of 100 actions;
    # the learner has since moved to pi = (0.5, 0.5). Every action is worth the same
    # (Q = 1), so the importance-weighted advantages rho(a) x 1 must give no gradient.
    logits = torch.zeros(2, dtype=torch.float64, requires_grad=True)  # exact sums
    mu = torch.tensor([0.6, 0.4], dtype=torch.float64)
    actions = torch.tensor([0] * 60 + [1] * 40)
    adv = (0.5 / mu)[actions].view(100, 1)  # rho = pi / mu, a batch [T=100, B=1]
    weight = torch.ones_like(adv)
    logp = torch.log_softmax(logits, -1)[actions].view(100, 1)

    def grad(a):
        (g,) = torch.autograd.grad((a * logp).sum(), logits, retain_graph=True)
        return g

    zero = torch.zeros(2, dtype=torch.float64)
    assert torch.allclose(grad(adv), zero, atol=1e-9)
    assert torch.allclose(grad(scale_advantages(adv, weight)), zero, atol=1e-9)
    assert torch.allclose(scale_advantages(adv, weight) * adv.std(), adv)
    # shifted to mean 0 as well, the batch would raise a2: away from mu, where pi went
    shifted = grad((adv - adv.mean()) / adv.std())
    assert shifted[1] > shifted[0] + 1.0
    # steps of weight 0 are not counted; a batch with no spread is left as it is
    half = torch.tensor([[1.0], [3.0], [100.0]])
    assert torch.allclose(scale_advantages(half, torch.tensor([[1.0], [1.0], [0.0]])),
                          half / math.sqrt(2.0))
    assert torch.equal(scale_advantages(torch.full((3, 2), 0.7), torch.ones(3, 2)),
                       torch.full((3, 2), 0.7))


def test_explained_variance_of_perfect_constant_and_noisy_critics():
    target = torch.tensor([[1.0, -2.0], [0.5, 3.0]])
    assert explained_variance(target.clone(), target) == 1.0
    assert abs(explained_variance(torch.full_like(target, 7.0), target)) < 1e-6
    noisy = target + torch.tensor([[0.1, -0.1], [0.1, -0.1]])
    expected = 1 - (target - noisy).var() / target.var()
    assert abs(explained_variance(noisy, target) - expected.item()) < 1e-6
    assert math.isnan(explained_variance(target, torch.ones(2, 2)))  # constant target


def test_reward_clipping_methods():
    r = torch.tensor([-7.0, -0.5, 0.0, 0.3, 4.0])
    assert clip_rewards(r, "abs_one_sign").tolist() == [-1, -1, 0, 1, 1]
    assert torch.equal(clip_rewards(r, "abs_one_clamp"), torch.tensor([-1, -0.5, 0, 0.3, 1]))
    soft = clip_rewards(r, "soft_asymmetric")
    assert torch.allclose(soft[4], 5 * torch.tanh(torch.tensor(0.8)))
    assert torch.allclose(soft[0], 0.3 * 5 * torch.tanh(torch.tensor(-1.4)))


def test_kl_mask_drops_off_policy_steps():
    t, b = 5, 4
    model = MLP((3,), 2, hidden_size=8)
    torch.manual_seed(1)
    with torch.no_grad():  # far from uniform, so the entropy differs from step to step
        for p in model.parameters():
            p.normal_()
    batch, _, _ = _batch(model, t, b, gamma_cut=(2, 0))
    # columns 0, 1 far off-policy: the behaviour policy all but always took the action
    # the current one likes least (KL >= log 2 > 0.5)
    least = batch["logits"][:, :2].argmin(-1, keepdim=True)
    batch["logits"][:, :2] += 16.0 * torch.zeros_like(batch["logits"][:, :2]).scatter(
        -1, least, 1.0)
    base = LossConfig(clip_rewards=False)
    masked = LossConfig(clip_rewards=False, kl_div_threshold=0.5)
    loss, stats = impala_loss(model, batch, masked)
    assert stats["masked_fraction"] == 0.5
    # the masked loss is the loss of the on-policy columns alone, entropy term included
    on_policy = {k: v[:, 2:] for k, v in batch.items()}
    loss_on, stats_on = impala_loss(model, on_policy, base)
    for key in ("policy_loss", "value_loss", "entropy"):
        assert abs(stats[key] - stats_on[key]) < 1e-5, key
    assert abs(loss.item() - loss_on.item()) < 1e-5
    everything = LossConfig(clip_rewards=False, kl_div_threshold=1e-9)
    _, stats_all = impala_loss(model, {**batch, "logits": batch["logits"] + 1.0}, everything)
    assert stats_all["masked_fraction"] < 1.0  # a constant shift of logits is no divergence


def test_clear_cloning_applies_to_replayed_columns_only():
    t, b = 4, 4
    model = MLP((3,), 2, hidden_size=8)
    batch, values, logits = _batch(model, t, b, gamma_cut=(1, 1))
    batch["logits"] = batch["logits"] + torch.tensor([1.5, -1.5])
    batch["value"] = batch["value"] + 2.0
    cfg = LossConfig(clip_rewards=False, clear_policy_cloning_weight=0.3,
                     clear_value_cloning_weight=0.2)
    plain, _ = impala_loss(model, batch, LossConfig(clip_rewards=False))
    none_replayed, s0 = impala_loss(model, {**batch, "replayed": torch.zeros(b, dtype=bool)}, cfg)
    assert torch.allclose(plain, none_replayed) and "policy_cloning" not in s0
    replayed = torch.tensor([False, True, False, True])
    loss, stats = impala_loss(model, {**batch, "replayed": replayed}, cfg)
    mu = torch.log_softmax(batch["logits"][:t, replayed], -1)
    pi = torch.log_softmax(logits[:t, replayed], -1)
    kl = (mu.exp() * (mu - pi)).sum(-1).mean()
    vc = (values[:t, replayed] - batch["value"][:t, replayed]).pow(2).mean()
    assert abs(stats["policy_cloning"] - kl.item()) < 1e-5
    assert abs(stats["value_cloning"] - vc.item()) < 1e-4
    assert torch.allclose(loss, plain + 0.3 * kl + 0.2 * vc, atol=1e-5)
