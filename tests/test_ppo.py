"""PPO and Truly PPO against NumPy references written from the papers: the clipped
surrogate on both sides, the rollback only where KL >= delta and r A > A, the
per-minibatch advantage normalisation, and GAE with terminations and truncations."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats
from torch import nn

from agents.agent import OptimConfig
from agents.distributions import Categorical, DiagGaussian
from agents.impala import transition_targets
from agents.ppo import PPOAgent, PPOConfig, gae, policy_objective


def test_clipped_surrogate_clips_on_both_sides():
    cfg = PPOConfig(clip=0.2)
    ratio = np.array([1.5, 1.5, 0.5, 0.5, 1.1, 0.9])
    adv = np.array([2.0, -2.0, 2.0, -2.0, 1.0, -1.0])
    # min(r A, clip(r) A): A > 0 caps the gain at (1 + eps) A, A < 0 at (1 - eps) A
    expected = np.array([1.2 * 2, 1.5 * -2, 0.5 * 2, 0.8 * -2, 1.1, -0.9])
    clipped = np.array([1, 0, 0, 1, 0, 0], dtype=float)
    obj, active = policy_objective(torch.tensor(np.log(ratio)), torch.tensor(adv),
                                   torch.zeros(6, dtype=torch.float64), cfg)
    np.testing.assert_allclose(obj.numpy(), expected, rtol=1e-12)
    np.testing.assert_array_equal(active.numpy(), clipped)


def test_truly_ppo_rolls_back_only_outside_the_trust_region_and_improving():
    cfg = PPOConfig(truly=True, kl_delta=0.01, kl_alpha=20.0)
    ratio = np.array([1.5, 1.5, 0.5, 0.5, 1.5, 0.5, 1.0])
    adv = np.array([2.0, -2.0, -2.0, 2.0, 2.0, -2.0, 3.0])
    kl = np.array([0.02, 0.02, 0.02, 0.02, 0.005, 0.005, 0.02])
    fires = (kl >= 0.01) & (ratio * adv > adv)  # rows 0 and 2 only
    assert fires.tolist() == [True, False, True, False, False, False, False]
    expected = ratio * adv - np.where(fires, 20.0 * kl, 0.0)
    obj, active = policy_objective(torch.tensor(np.log(ratio)), torch.tensor(adv),
                                   torch.tensor(kl), cfg)
    np.testing.assert_allclose(obj.numpy(), expected, rtol=1e-12)
    np.testing.assert_array_equal(active.numpy(), fires.astype(float))


def naive_gae(rewards, dones, truncs, boot_values, values, last_value, gamma, lam):
    """GAE as a sum over the future, written out: A_t = sum_l (gamma lam)^l delta_{t+l},
    the sum stopping at the end of the episode (a termination or truncation cuts it;
    a truncation's reward carries gamma x V(final obs))."""
    t_len = len(rewards)
    v_next = np.append(values[1:], last_value)
    deltas = []
    for t in range(t_len):
        ended = dones[t] or truncs[t]
        r = rewards[t] + (gamma * boot_values[t] if truncs[t] else 0.0)
        deltas.append(r + (0.0 if ended else gamma * v_next[t]) - values[t])
    adv = np.zeros(t_len)
    for t in range(t_len):
        total, weight = 0.0, 1.0
        for k in range(t, t_len):
            total += weight * deltas[k]
            if dones[k] or truncs[k]:
                break
            weight *= gamma * lam
        adv[t] = total
    return adv


def test_gae_matches_the_naive_sum_with_terminations_and_truncations():
    rng = np.random.default_rng(0)
    t_len, b, gamma, lam = 9, 3, 0.97, 0.9
    batch = {"reward": torch.tensor(rng.normal(size=(t_len + 1, b))),
             "done": torch.zeros(t_len + 1, b, dtype=torch.bool),
             "truncated": torch.zeros(t_len + 1, b, dtype=torch.bool),
             "bootstrap_value": torch.tensor(rng.normal(size=(t_len + 1, b)))}
    batch["done"][3, 0] = batch["done"][7, 1] = True
    batch["truncated"][5, 0] = batch["truncated"][2, 2] = True
    values = torch.tensor(rng.normal(size=(t_len + 1, b)))
    cfg = PPOConfig(gamma=gamma, clip_rewards=False)
    rewards, discounts = transition_targets(batch, cfg)
    got = gae(rewards, discounts, values[:-1], values[-1], lam)
    for j in range(b):
        ref = naive_gae(batch["reward"][1:, j].numpy(), batch["done"][1:, j].numpy(),
                        batch["truncated"][1:, j].numpy(),
                        batch["bootstrap_value"][1:, j].numpy(), values[:-1, j].numpy(),
                        values[-1, j].item(), gamma, lam)
        np.testing.assert_allclose(got[:, j].numpy(), ref, rtol=1e-6)  # float32 discounts


class TableModel(nn.Module):
    """obs holds an index into a table of logits and values (float64)."""

    def __init__(self, logits: np.ndarray, values: np.ndarray):
        super().__init__()
        self.logits = nn.Parameter(torch.tensor(logits))
        self.values = nn.Parameter(torch.tensor(values))

    def initial_state(self, batch_size: int) -> tuple:
        return ()

    distribution = Categorical

    def forward(self, obs, state, done):
        """obs [T, B, 1] -> (logits [T, B, A], value [T, B], state): the model interface."""
        i = obs.reshape(obs.shape[:2]).long()
        return self.logits[i], self.values[i], state


def log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def np_objective(ratio, kl, adv, truly):
    """The surrogate of the configs below (clip 0.2; truly: delta 0.05, alpha 5) on
    advantages normalised over the minibatch."""
    norm = (adv - adv.mean()) / (adv.std(ddof=1) + 1e-8)
    if truly:
        fires = (kl >= 0.05) & (ratio * norm > norm)
        return ratio * norm - np.where(fires, 5.0 * kl, 0.0)
    return np.minimum(ratio * norm, np.clip(ratio, 0.8, 1.2) * norm)


@pytest.mark.parametrize("truly", [False, True])
def test_minibatch_loss_matches_numpy_with_normalised_advantages(truly):
    rng = np.random.default_rng(1)
    t_len, b, a = 5, 2, 3
    n = (t_len + 1) * b
    table_logits, table_values = rng.normal(size=(n, a)), rng.normal(size=n)
    model = TableModel(table_logits, table_values)
    cfg = PPOConfig(clip=0.2, value_clip=0.3, value_loss_weight=0.5,
                    entropy_loss_weight=0.01, truly=truly, kl_delta=0.05, kl_alpha=5.0)
    agent = PPOAgent(model, cfg, OptimConfig(optimizer="adam"), torch.device("cpu"))
    obs = torch.arange(n, dtype=torch.float64).reshape(t_len + 1, b, 1)
    behaviour = rng.normal(size=(t_len + 1, b, a))
    actions = rng.integers(0, a, size=(t_len + 1, b))
    no_end = torch.zeros(t_len + 1, b, dtype=torch.bool)
    batch = {"obs": obs, "logits": torch.tensor(behaviour), "action": torch.tensor(actions),
             "done": no_end, "truncated": no_end}
    adv = rng.normal(2.0, 3.0, size=(t_len, b))  # far from mean 0, std 1
    returns, old_values = rng.normal(size=(t_len, b)), rng.normal(size=(t_len, b))
    loss, stats = agent.minibatch_loss(batch, torch.tensor(adv), torch.tensor(returns),
                                       torch.tensor(old_values))

    idx = np.arange(n).reshape(t_len + 1, b)[:-1]
    lp, mu = log_softmax(table_logits[idx]), log_softmax(behaviour[:-1])
    act = actions[:-1][..., None]
    ratio = np.exp(np.take_along_axis(lp, act, -1) - np.take_along_axis(mu, act, -1))[..., 0]
    kl = (np.exp(mu) * (mu - lp)).sum(-1)
    objective = np_objective(ratio, kl, adv, truly)
    v = table_values[idx]
    v_clipped = old_values + np.clip(v - old_values, -0.3, 0.3)
    value_loss = 0.5 * np.maximum((v - returns) ** 2, (v_clipped - returns) ** 2).mean()
    entropy = -(np.exp(lp) * lp).sum(-1).mean()
    expected = -objective.mean() + 0.5 * value_loss - 0.01 * entropy
    assert loss.item() == pytest.approx(expected, rel=1e-10)
    assert stats["value_loss"] == pytest.approx(value_loss, rel=1e-10)
    assert stats["kl"] == pytest.approx(kl.mean(), rel=1e-10)


class GaussianTableModel(TableModel):
    """TableModel whose table rows are Gaussian params (A means, A log-stds)."""

    distribution = DiagGaussian


def np_gaussian_log_prob(params, actions):
    mean, log_std = np.split(params, 2, -1)
    return stats.norm.logpdf(actions, mean, np.exp(log_std)).sum(-1)


@pytest.mark.parametrize("truly", [False, True])
def test_minibatch_loss_with_gaussian_actions_matches_numpy(truly):
    rng = np.random.default_rng(2)
    t_len, b, a = 4, 3, 2
    n = (t_len + 1) * b
    table, table_values = rng.normal(size=(n, 2 * a)) * 0.5, rng.normal(size=n)
    model = GaussianTableModel(table, table_values)
    cfg = PPOConfig(clip=0.2, value_clip=0.0, value_loss_weight=0.5,
                    entropy_loss_weight=0.01, truly=truly, kl_delta=0.05, kl_alpha=5.0)
    agent = PPOAgent(model, cfg, OptimConfig(optimizer="adam"), torch.device("cpu"))
    obs = torch.arange(n, dtype=torch.float64).reshape(t_len + 1, b, 1)
    behaviour = rng.normal(size=(t_len + 1, b, 2 * a)) * 0.5
    actions = rng.normal(size=(t_len + 1, b, a)) * 2  # some far outside any bounds
    no_end = torch.zeros(t_len + 1, b, dtype=torch.bool)
    batch = {"obs": obs, "logits": torch.tensor(behaviour), "action": torch.tensor(actions),
             "done": no_end, "truncated": no_end}
    adv = rng.normal(1.0, 2.0, size=(t_len, b))
    returns, old_values = rng.normal(size=(t_len, b)), rng.normal(size=(t_len, b))
    loss, stats_ = agent.minibatch_loss(batch, torch.tensor(adv), torch.tensor(returns),
                                        torch.tensor(old_values))

    pi = table[np.arange(n).reshape(t_len + 1, b)[:-1]]
    mu, act = behaviour[:-1], actions[:-1]
    ratio = np.exp(np_gaussian_log_prob(pi, act) - np_gaussian_log_prob(mu, act))
    (m1, s1), (m2, s2) = (np.split(mu, 2, -1), np.split(pi, 2, -1))
    kl = (s2 - s1 + (np.exp(2 * s1) + (m1 - m2) ** 2) / (2 * np.exp(2 * s2)) - 0.5).sum(-1)
    objective = np_objective(ratio, kl, adv, truly)
    v = table_values[np.arange(n).reshape(t_len + 1, b)[:-1]]
    value_loss = 0.5 * ((v - returns) ** 2).mean()
    entropy = stats.norm.entropy(0, np.exp(np.split(pi, 2, -1)[1])).sum(-1).mean()
    expected = -objective.mean() + 0.5 * value_loss - 0.01 * entropy
    assert loss.item() == pytest.approx(expected, rel=1e-10)
    assert stats_["kl"] == pytest.approx(kl.mean(), rel=1e-10)
    assert stats_["entropy"] == pytest.approx(entropy, rel=1e-10)


def _table_batch(rng, t_len, b, a):
    """A batch [T+1, B] whose obs name their step: obs of (t, b) = t*B + b."""
    n = (t_len + 1) * b
    return {"obs": torch.arange(n, dtype=torch.float64).reshape(t_len + 1, b, 1),
            "logits": torch.tensor(rng.normal(size=(t_len + 1, b, a))),
            "action": torch.tensor(rng.integers(0, a, size=(t_len + 1, b))),
            "reward": torch.tensor(rng.normal(size=(t_len + 1, b))),
            "done": torch.tensor(rng.random(size=(t_len + 1, b)) < 0.2),
            "truncated": torch.zeros(t_len + 1, b, dtype=torch.bool),
            "bootstrap_value": torch.zeros(t_len + 1, b, dtype=torch.float64)}


def test_an_update_takes_epochs_times_minibatches_steps_over_whole_rollouts():
    rng = np.random.default_rng(2)
    t_len, b, a = 4, 6, 2
    n = (t_len + 1) * b
    model = TableModel(rng.normal(size=(n, a)), rng.normal(size=n))
    agent = PPOAgent(model, PPOConfig(epochs=3, minibatches=2, clip_rewards=False),
                     OptimConfig(optimizer="adam", lr=1e-3), torch.device("cpu"))
    seen = []
    original = agent.minibatch_loss

    def spy(part, *args):
        seen.append(part["obs"][0, :, 0].long().tolist())  # row 0 indices name the columns
        return original(part, *args)

    agent.minibatch_loss = spy
    before = model.logits.detach().clone()
    stats = agent.update(_table_batch(rng, t_len, b, a), progress=0.0)
    assert len(seen) == 3 * 2
    for epoch in range(3):  # each epoch covers every rollout once, 3 per minibatch
        cols = seen[2 * epoch] + seen[2 * epoch + 1]
        assert sorted(cols) == list(range(b)) and len(seen[2 * epoch]) == 3
    assert not torch.equal(model.logits, before)
    assert {"policy_loss", "value_loss", "entropy", "kl", "clip_fraction", "grad_norm",
            "lr", "step_over_lr", "explained_variance"} <= set(stats)


def test_an_updates_statistics_are_floats_the_means_of_its_steps_read_back_once():
    """The minibatch steps' figures stay tensors until the update ends
    (`agents.agent.host_stats`); each statistic is then the mean of its own figure."""
    rng = np.random.default_rng(3)
    t_len, b, a = 4, 6, 2
    model = TableModel(rng.normal(size=((t_len + 1) * b, a)), rng.normal(size=(t_len + 1) * b))
    agent = PPOAgent(model, PPOConfig(epochs=2, minibatches=3, clip_rewards=False),
                     OptimConfig(optimizer="adam", lr=1e-3), torch.device("cpu"))
    figures, norms = [], []
    loss_of, step = agent.minibatch_loss, agent.step

    def spy_loss(*args):
        loss, stats = loss_of(*args)
        figures.append({k: float(v) for k, v in stats.items()})
        return loss, stats

    def spy_step(loss):
        norm = step(loss)
        norms.append(float(norm))
        return norm

    agent.minibatch_loss, agent.step = spy_loss, spy_step
    stats = agent.update(_table_batch(rng, t_len, b, a), progress=0.0)
    assert len(figures) == 6 and all(type(v) is float for v in stats.values())
    for name in ("policy_loss", "value_loss", "entropy", "kl", "clip_fraction", "mean_rho"):
        assert stats[name] == pytest.approx(np.mean([f[name] for f in figures]), rel=1e-6)
    assert stats["grad_norm"] == pytest.approx(np.mean(norms), rel=1e-6)
    assert len({stats[k] for k in ("policy_loss", "value_loss", "entropy", "kl")}) == 4


def test_minibatches_of_steps_cover_every_step_once_per_epoch_across_rollouts():
    rng = np.random.default_rng(3)
    t_len, b, a = 4, 6, 2
    model = TableModel(rng.normal(size=((t_len + 1) * b, a)), rng.normal(size=(t_len + 1) * b))
    agent = PPOAgent(model, PPOConfig(epochs=2, minibatches=4, shuffle="steps",
                                      clip_rewards=False),
                     OptimConfig(optimizer="adam", lr=1e-3), torch.device("cpu"))
    seen = []
    original = agent.minibatch_loss

    def spy(part, adv, returns, old_values):
        assert part["obs"].shape[:2] == (2, 6) and adv.shape == (1, 6)
        assert part["obs"].stride(0) == 0  # row 1, never read, is row 0's view, not a copy
        seen.append(part["obs"][0, :, 0].long().tolist())
        return original(part, adv, returns, old_values)

    agent.minibatch_loss = spy
    agent.update(_table_batch(rng, t_len, b, a), progress=0.0)
    assert len(seen) == 2 * 4
    for epoch in range(2):  # the T x B steps (obs 0..23; never row T's), each once
        assert sorted(sum(seen[4 * epoch:4 * epoch + 4], [])) == list(range(t_len * b))
    # a minibatch draws from several rollouts (columns) and times (rows)
    assert all(len({i % b for i in part}) > 1 and len({i // b for i in part}) > 1
               for part in seen)


def test_one_minibatch_of_all_steps_is_the_update_of_all_rollouts():
    """The same steps, advantages and targets in another order: the same update."""
    rng = np.random.default_rng(4)
    t_len, b, a = 5, 3, 3
    batch = _table_batch(rng, t_len, b, a)
    logits, values = rng.normal(size=((t_len + 1) * b, a)), rng.normal(size=(t_len + 1) * b)
    after = []
    for shuffle in ("rollouts", "steps"):
        model = TableModel(logits, values)
        agent = PPOAgent(model, PPOConfig(epochs=1, minibatches=1, shuffle=shuffle,
                                          clip_rewards=False, entropy_loss_weight=0.01),
                         OptimConfig(optimizer="adam", lr=1e-2), torch.device("cpu"))
        stats = agent.update(dict(batch), progress=0.0)
        after.append((model.logits.detach().clone(), model.values.detach().clone(), stats))
    torch.testing.assert_close(after[0][0], after[1][0], rtol=0, atol=1e-12)
    torch.testing.assert_close(after[0][1], after[1][1], rtol=0, atol=1e-12)
    for key in ("policy_loss", "value_loss", "entropy", "kl"):
        assert after[0][2][key] == pytest.approx(after[1][2][key], rel=1e-12)


def test_gae_from_the_actors_values_runs_no_pass_and_equals_the_learners_when_they_agree():
    """`values="actor"`: the advantages are GAE (the naive sum) of the stored "value";
    the model is not run for them; and where the stored values are the model's own
    (no lag), the update is bit for bit the one that recomputes them."""
    rng = np.random.default_rng(5)
    t_len, b, a, gamma, lam = 5, 4, 3, 0.97, 0.9
    n = (t_len + 1) * b
    logits, values = rng.normal(size=(n, a)), rng.normal(size=n)
    batch = _table_batch(rng, t_len, b, a)
    batch["truncated"][2, 1] = True
    batch["bootstrap_value"][2, 1] = 0.7
    batch["value"] = torch.tensor(values).reshape(t_len + 1, b)  # the model's: no lag
    after = []
    for source in ("learner", "actor"):
        model = TableModel(logits, values)
        cfg = PPOConfig(epochs=2, minibatches=2, clip_rewards=False, gamma=gamma,
                        gae_lambda=lam, values=source)
        agent = PPOAgent(model, cfg, OptimConfig(optimizer="adam", lr=1e-2),
                         torch.device("cpu"))
        calls = [0]
        forward = model.forward

        def counted(*args, forward=forward, calls=calls):
            calls[0] += 1
            return forward(*args)
        model.forward = counted
        adv, returns, old_values, _ = agent.targets(dict(batch))
        assert calls[0] == (source == "learner")
        for j in range(b):
            ref = naive_gae(batch["reward"][1:, j].numpy(), batch["done"][1:, j].numpy(),
                            batch["truncated"][1:, j].numpy(),
                            batch["bootstrap_value"][1:, j].numpy(),
                            batch["value"][:-1, j].numpy(), batch["value"][-1, j].item(),
                            gamma, lam)
            np.testing.assert_allclose(adv[:, j].numpy(), ref, rtol=1e-6)
        torch.testing.assert_close(returns, adv + batch["value"][:-1], rtol=0, atol=0)
        agent.update(dict(batch), progress=0.0)
        after.append((model.logits.detach().clone(), model.values.detach().clone()))
    assert torch.equal(after[0][0], after[1][0]) and torch.equal(after[0][1], after[1][1])
    # stale stored values (another critic's) give other advantages: the path is taken
    model = TableModel(logits, values)
    agent = PPOAgent(model, PPOConfig(clip_rewards=False, values="actor"),
                     OptimConfig(optimizer="adam", lr=1e-2), torch.device("cpu"))
    stale = {**batch, "value": batch["value"] + 1.0}
    assert not torch.equal(agent.targets(stale)[0], agent.targets(dict(batch))[0])


def _pong_update(**flags):
    """(config, env info, a random batch [T+1=7, B=4] of Pong frames) for one small
    update of Pong's defaults with `flags`."""
    from option_flags import default_values
    from training.config import make_config
    from wrappers.envs import EnvInfo

    cfg, errors = make_config(default_values(env="PongNoFrameskip-v4", batch_size=4,
                                             r_f_steps=6, worker_count=1, ppo_minibatches=2,
                                             **flags))
    assert not errors, errors
    info = EnvInfo(obs_shape=(4, 84, 84), obs_dtype="uint8", num_actions=6, kind="atari",
                   frames_per_step=4, frame_stack=4)
    g = torch.Generator().manual_seed(0)
    t, b = cfg.r_f_steps, 4
    batch = {"obs": torch.randint(0, 255, (t + 1, b, 4, 84, 84), generator=g,
                                  dtype=torch.uint8),
             "action": torch.randint(0, 6, (t + 1, b), generator=g),
             "logits": torch.randn(t + 1, b, 6, generator=g), "value": torch.zeros(t + 1, b),
             "reward": torch.randn(t + 1, b, generator=g),
             "done": torch.zeros(t + 1, b, dtype=torch.bool),
             "truncated": torch.zeros(t + 1, b, dtype=torch.bool),
             "bootstrap_value": torch.zeros(t + 1, b)}
    return cfg, info, batch


@pytest.mark.parametrize("agent_name", ["ppo", "impact"])
def test_an_update_normalises_its_inputs_once_and_trains_bit_for_bit_as_before(agent_name):
    """ppo's epochs read the batch's observations prepared once (scaled and normalised:
    `ActorCritic.prepare`), not once per forward pass; the update is the same bit for
    bit as one that normalises in every pass (Atari's uint8 frames, input statistics)."""
    from training.factory import make_agent

    cfg, info, batch = _pong_update(agent=agent_name, normalize_input=True)
    agents, passes = [], []
    for prepare_once in (True, False):
        torch.manual_seed(0)
        agent = make_agent(cfg, info)
        agent.observe(batch["obs"][:-1])
        if not prepare_once:  # every forward pass scales and normalises, as before
            agent.with_input = lambda batch: batch
        calls = [0]
        normalize = agent.model._input

        def counted(x, normalize=normalize, calls=calls):
            calls[0] += 1
            return normalize(x)
        agent.model._input = counted
        agent.update(batch, progress=0.0)
        agents.append(agent)
        passes.append(calls[0])
    steps = cfg.ppo_epochs * cfg.ppo_minibatches
    assert cfg.gae_values == "learner"  # one pass for the targets, then one a minibatch
    assert passes == [1, 1 + steps]
    for (name, p1), p2 in zip(agents[0].model.state_dict().items(),
                              agents[1].model.state_dict().values(), strict=True):
        assert torch.equal(p1, p2), name


@pytest.mark.parametrize("shuffle", ["steps", "rollouts"])
def test_the_cnns_input_is_prepared_channels_last_and_minibatches_keep_it(shuffle):
    """The Nature CNN's prepared batch is laid out channels-last, as its convolutions
    read it, and so is every minibatch gathered from it: no pass re-lays its input
    (on Pong's update 5% faster, `bench.learner_step`). The update is the same bit for
    bit as with the plain NCHW input (the net's `input_format` at preserve_format)."""
    from training.factory import make_agent

    cfg, info, batch = _pong_update(agent="ppo", ppo_shuffle=shuffle)
    models, layouts = [], []
    for input_format in (torch.channels_last, torch.preserve_format):
        torch.manual_seed(0)
        agent = make_agent(cfg, info)
        assert agent.model.obs_norm is not None  # Atari's defaults normalise inputs
        agent.model.input_format = input_format
        agent.observe(batch["obs"][:-1])
        seen = []
        features = agent.model._features

        def spy(x, features=features, seen=seen):
            seen.append(x.is_contiguous(memory_format=torch.channels_last))
            return features(x)
        agent.model._features = spy
        agent.update(dict(batch), progress=0.0)
        models.append(agent.model)
        layouts.append(seen)
    steps = cfg.ppo_epochs * cfg.ppo_minibatches
    assert layouts[0] == [True] * (1 + steps)  # the targets' pass, then every minibatch's
    assert not any(layouts[1])
    for (name, p1), p2 in zip(models[0].state_dict().items(),
                              models[1].state_dict().values(), strict=True):
        assert torch.equal(p1, p2), name
