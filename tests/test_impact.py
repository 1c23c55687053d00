"""IMPACT (`--agent=impact`) against a NumPy reference written from the paper (Luo et
al., 2020): V-trace with importance weights pi_target / mu for the advantages and
value targets, PPO's clipped surrogate on pi / pi_target; the target network's
refresh schedule; its checkpoint; a run through main.py with a replay."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from agents.agent import OptimConfig
from agents.impact import ImpactAgent
from agents.ppo import PPOConfig
from tests.test_ppo import TableModel, log_softmax


def np_vtrace(log_rho, rewards, discounts, values, bootstrap, rho_bar, c_bar, pg_rho_bar):
    """V-trace (Espeholt et al., 2018, eq. 1 and its policy-gradient advantage), time
    step by time step: (vs [T, B], pg advantages [T, B])."""
    rho = np.exp(log_rho)
    t_len = len(rewards)
    vs = np.zeros_like(values)
    nxt_v, nxt_vs = bootstrap, bootstrap  # V(x_{t+1}) and v_{t+1}
    for t in reversed(range(t_len)):
        delta = min_(rho[t], rho_bar) * (rewards[t] + discounts[t] * nxt_v - values[t])
        vs[t] = values[t] + delta + discounts[t] * min_(rho[t], c_bar) * (nxt_vs - nxt_v)
        nxt_v, nxt_vs = values[t], vs[t]
    vs_next = np.concatenate([vs[1:], bootstrap[None]])
    pg_adv = min_(rho, pg_rho_bar) * (rewards + discounts * vs_next - values)
    return vs, pg_adv


def min_(x, bar):
    return np.minimum(x, bar)


def impact_batch(rng, t_len, b, a):
    n = (t_len + 1) * b
    no_end = torch.zeros(t_len + 1, b, dtype=torch.bool)
    done = no_end.clone()
    done[2, 1] = True  # a termination: x_2 of rollout 1 starts a new episode
    return {"obs": torch.arange(n, dtype=torch.float64).reshape(t_len + 1, b, 1),
            "logits": torch.tensor(rng.normal(size=(t_len + 1, b, a))),
            "action": torch.tensor(rng.integers(0, a, size=(t_len + 1, b))),
            "reward": torch.tensor(rng.normal(size=(t_len + 1, b))),
            "bootstrap_value": torch.zeros(t_len + 1, b, dtype=torch.float64),
            "done": done, "truncated": no_end}


@pytest.mark.parametrize("rho_bar", [1.0, 100.0])
def test_first_step_loss_matches_numpy(rho_bar):
    rng = np.random.default_rng(4)
    t_len, b, a, gamma = 6, 3, 4, 0.9
    n = (t_len + 1) * b
    cur_logits, cur_values = rng.normal(size=(n, a)), rng.normal(size=n)
    tgt_logits = cur_logits + rng.normal(scale=0.5, size=(n, a))
    cfg = PPOConfig(gamma=gamma, advantage="vtrace", clip=0.2, epochs=1, minibatches=1,
                    value_loss_weight=0.5, entropy_loss_weight=0.01, clip_rewards=False,
                    rho_const=rho_bar, c_const=1.0)
    agent = ImpactAgent(TableModel(cur_logits, cur_values), cfg, OptimConfig(optimizer="adam"),
                        torch.device("cpu"), target_update=10)
    agent.updates = 1  # the target is not refreshed before this update
    with torch.no_grad():  # the target's values differ too: V must be the model's
        agent.target.logits.copy_(torch.tensor(tgt_logits))
        agent.target.values.copy_(torch.tensor(rng.normal(size=n)))
    losses = []
    agent.step = lambda loss: losses.append(loss.item()) or 0.0
    batch = impact_batch(rng, t_len, b, a)
    stats = agent.train(batch)

    idx = np.arange(n).reshape(t_len + 1, b)
    lp, lt = log_softmax(cur_logits[idx])[:-1], log_softmax(tgt_logits[idx])[:-1]
    mu = log_softmax(batch["logits"].numpy())[:-1]
    act = batch["action"].numpy()[:-1][..., None]
    pick = lambda x: np.take_along_axis(x, act, -1)[..., 0]  # noqa: E731
    # rewards r_t and discounts after x_t: batch rows 1..T (IMPALA's layout)
    rewards = batch["reward"].numpy()[1:]
    discounts = gamma * (1.0 - batch["done"].numpy()[1:])
    values = cur_values[idx]
    vs, pg_adv = np_vtrace(pick(lt) - pick(mu), rewards, discounts, values[:-1], values[-1],
                           rho_bar, 1.0, rho_bar)
    norm = (pg_adv - pg_adv.mean()) / (pg_adv.std(ddof=1) + 1e-8)
    ratio = np.exp(pick(lp) - pick(lt))  # pi / pi_target, not pi / mu
    objective = np.minimum(ratio * norm, np.clip(ratio, 0.8, 1.2) * norm)
    value_loss = 0.5 * ((values[:-1] - vs) ** 2).mean()
    entropy = -(np.exp(lp) * lp).sum(-1).mean()
    expected = -objective.mean() + 0.5 * value_loss - 0.01 * entropy
    # rel 1e-6: transition_targets makes the discounts float32
    assert losses == [pytest.approx(expected, rel=1e-6)]
    assert stats["value_loss"] == pytest.approx(value_loss, rel=1e-6)
    kl_tm = (np.exp(mu) * (mu - lt)).sum(-1).mean()
    assert stats["kl_target_behaviour"] == pytest.approx(kl_tm, rel=1e-9)


def test_the_target_is_refreshed_every_n_updates_and_saved():
    rng = np.random.default_rng(0)
    t_len, b, a = 4, 2, 3
    n = (t_len + 1) * b
    cfg = PPOConfig(advantage="vtrace", epochs=1, minibatches=1, clip_rewards=False)
    agent = ImpactAgent(TableModel(rng.normal(size=(n, a)), rng.normal(size=n)), cfg,
                        OptimConfig(optimizer="adam", lr=0.1), torch.device("cpu"),
                        target_update=3)
    equal_at_start = []
    for _ in range(7):
        agent.target_logits = _spy(agent, equal_at_start)
        agent.train(impact_batch(rng, t_len, b, a))
    # refreshed before updates 0, 3 and 6: equal to the model then, stale otherwise
    assert equal_at_start == [True, False, False, True, False, False, True]
    state = agent.state_dict()
    other = ImpactAgent(TableModel(rng.normal(size=(n, a)), rng.normal(size=n)), cfg,
                        OptimConfig(optimizer="adam"), torch.device("cpu"), target_update=3)
    other.load_state_dict(state)
    assert other.updates == 7
    torch.testing.assert_close(other.target.logits, agent.target.logits)


def _spy(agent, log):
    original = type(agent).target_logits

    def wrapped(batch):
        out = original(agent, batch)
        log.append(torch.equal(agent.target.logits, agent.model.logits))
        return out
    return wrapped


def test_impact_needs_vtrace_advantages():
    with pytest.raises(ValueError, match="vtrace"):
        ImpactAgent(TableModel(np.zeros((2, 2)), np.zeros(2)), PPOConfig(advantage="gae"),
                    OptimConfig(), torch.device("cpu"))
