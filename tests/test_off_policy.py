"""The off-policy agents' maths against NumPy: the tanh-squashed Gaussian, the
n-step transitions over the counting env's episode ends, and SAC's and TD3's losses
for a fixed batch and fixed networks."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from agents.agent import OptimConfig
from agents.distributions import NoisyDeterministic, TanhGaussian
from agents.model_spec import ModelSpec
from agents.off_policy import sac_model, single_model, transitions, twin_model
from agents.sac import SACAgent
from agents.td3 import DDPGAgent, TD3Agent
from tests.counting_env import end_flags, episode_length
from workers.actor import ActorConfig, RandomPolicy, Roller
from wrappers.envs import EnvOptions

LOW, HIGH = np.array([-2.0, 0.0]), np.array([2.0, 1.0])
SCALE, BIAS = (HIGH - LOW) / 2, (HIGH + LOW) / 2


def np_log_std(raw):
    return -5.0 + 0.5 * 7.0 * (np.tanh(raw) + 1)


def np_tanh_log_prob(mean, log_std, u):
    """log pi(a) of a = bias + scale tanh(u): the Gaussian density of u over |da/du|."""
    std = np.exp(log_std)
    gauss = (-0.5 * ((u - mean) / std) ** 2 - log_std - 0.5 * np.log(2 * np.pi)).sum(-1)
    return gauss - np.log(SCALE * (1 - np.tanh(u) ** 2)).sum(-1)


def test_tanh_gaussian_log_prob_and_mode_against_numpy():
    torch.manual_seed(0)
    params = torch.randn(5, 4, dtype=torch.float64).float()
    dist = TanhGaussian(params, torch.tensor(SCALE, dtype=torch.float32),
                        torch.tensor(BIAS, dtype=torch.float32))
    g = torch.Generator().manual_seed(3)
    action, logp = dist.rsample(g)
    noise = torch.randn(5, 2, generator=torch.Generator().manual_seed(3)).numpy()
    mean, raw = params[:, :2].double().numpy(), params[:, 2:].double().numpy()
    u = mean + np.exp(np_log_std(raw)) * noise
    np.testing.assert_allclose(action.numpy(), BIAS + SCALE * np.tanh(u), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(logp.numpy(), np_tanh_log_prob(mean, np_log_std(raw), u),
                               rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(dist.log_prob(action).numpy(), logp.numpy(), rtol=1e-3,
                               atol=1e-3)
    np.testing.assert_allclose(dist.mode().numpy(), BIAS + SCALE * np.tanh(mean), rtol=1e-6)
    assert ((action >= torch.tensor(LOW)) & (action <= torch.tensor(HIGH))).all()


def test_tanh_gaussian_entropy_against_monte_carlo():
    params = torch.tensor([[0.3, -1.5, 0.2, -0.8], [2.0, 0.0, -0.5, 0.9]])
    dist = TanhGaussian(params, torch.tensor(SCALE, dtype=torch.float32),
                        torch.tensor(BIAS, dtype=torch.float32))
    rng = np.random.default_rng(0)
    mean, log_std = params[:, :2].double().numpy(), np_log_std(params[:, 2:].double().numpy())
    u = mean + np.exp(log_std) * rng.standard_normal((200_000, 2, 2))
    reference = -np_tanh_log_prob(mean, log_std, u).mean(0)  # H = -E log pi(a)
    np.testing.assert_allclose(dist.entropy().numpy(), reference, atol=0.01)


def test_noisy_deterministic_acts_within_bounds_around_its_mode():
    params = torch.tensor([[0.5, -3.0, math.log(0.1), math.log(0.1)]]).repeat(4000, 1)
    dist = NoisyDeterministic(params, torch.tensor(SCALE, dtype=torch.float32),
                              torch.tensor(BIAS, dtype=torch.float32))
    mode = BIAS + SCALE * np.tanh([0.5, -3.0])
    np.testing.assert_allclose(dist.mode()[0].numpy(), mode, rtol=1e-5, atol=1e-7)
    a = dist.sample(torch.Generator().manual_seed(0))
    assert ((a >= torch.tensor(LOW)) & (a <= torch.tensor(HIGH))).all()
    free = a[:, 0].numpy()  # far from the bounds: Gaussian, std 0.1 x scale
    assert abs(free.mean() - mode[0]) < 0.01 and abs(free.std() - 0.1 * SCALE[0]) < 0.01


# --- n-step transitions over the counting env ----------------------------------------

def counting_rollouts(unroll: int, n: int) -> list[dict]:
    """`n` consecutive rollouts of one counting env, with "final_obs"."""
    from agents.model_spec import ModelSpec

    cfg = ActorConfig("tests.counting_env:Counting-v0", EnvOptions(), 1, unroll,
                      ModelSpec((4,), 3, 8), seed=0, policy=RandomPolicy,
                      store_final_obs=True)
    roller = Roller(cfg, None)
    out = []
    for _ in range(n):
        rows = []
        roller.rollout(lambda t, row, rows=rows: rows.append({k: v.clone() for k, v in
                                                              row.items()}))
        out.append({k: torch.stack([r[k] for r in rows]) for k in rows[0]})
    roller.close()
    return out


def expected(obs, n, gamma, rows_left):
    """NumPy reference from the counting env's rules: (return, discount, next obs's
    (episode, step), whether next obs is a final one) of the transition from obs."""
    k, s = int(obs[2]), int(obs[3])
    length = episode_length(k)
    m = min(n, length - s, rows_left)
    ret = sum(gamma ** (j - 1) * (1000.0 * k + s + j) for j in range(1, m + 1))
    ended = s + m == length
    terminated, truncated = end_flags(k) if ended else (False, False)
    terminated = terminated  # both flags raised: a termination (gymnasium's precedence)
    discount = 0.0 if terminated else gamma ** m
    return ret, discount, (k, s + m), ended and not terminated and truncated


@pytest.mark.parametrize("n", [1, 3, 5])
def test_n_step_transitions_over_episode_ends(n):
    gamma, unroll = 0.9, 6
    for batch in counting_rollouts(unroll, 12):
        b = {k: v for k, v in batch.items()}
        for t in range(unroll):
            tr = transitions(b, torch.tensor([t]), n, gamma)
            ret, discount, (k, s), final = expected(b["obs"][t, 0].numpy(), n, gamma, unroll - t)
            assert tr["reward"][0].item() == pytest.approx(ret, rel=1e-6)
            assert tr["discount"][0].item() == pytest.approx(discount, rel=1e-6)
            if discount > 0:  # a terminated transition's next obs is never read
                assert tr["next_obs"][0, 2:].tolist() == [k, s], (t, b["obs"][:, 0])
            assert torch.equal(tr["obs"][0], b["obs"][t, 0])
            assert torch.equal(tr["action"][0], b["action"][t, 0])
            if final:  # the episode's last obs, not the reset obs that follows
                assert tr["next_obs"][0, 3].item() == episode_length(k)


# --- SAC's, TD3's and DDPG's losses ---------------------------------------------------

B, D, A = 32, 3, 2
FROZEN = OptimConfig(optimizer="adam", lr=0.0, lr_end_value=0.0)  # the losses, no steps


def np_mlp(x, layers):
    """ReLU MLP of torch nn.Linear layers, in float64."""
    for i, layer in enumerate(layers):
        x = x @ layer.weight.detach().double().numpy().T + layer.bias.detach().double().numpy()
        if i < len(layers) - 1:
            x = np.maximum(x, 0)
    return x


def np_actor(model, obs):
    a = model.actor
    return np_mlp(obs, [a.torso[1], a.torso[3], a.policy])


def np_critics(critic, obs, action):
    """Q [n, B] of every member of the ensemble."""
    x = np.concatenate([obs, action], -1)
    out = []
    for k in range(critic.n):
        h = x
        for i, (w, b) in enumerate(zip(critic.weights, critic.biases, strict=True)):
            h = h @ w[k].detach().double().numpy() + b[k].detach().double().numpy()
            if i < len(critic.weights) - 1:
                h = np.maximum(h, 0)
        out.append(h[:, 0])
    return np.stack(out)


def fixed_batch(seed=1):
    g = torch.Generator().manual_seed(seed)
    return {"obs": torch.randn(B, D, generator=g), "next_obs": torch.randn(B, D, generator=g),
            "action": (torch.rand(B, A, generator=g) * 2 - 1) * torch.tensor(SCALE).float()
            + torch.tensor(BIAS).float(),
            "reward": torch.randn(B, generator=g),
            "discount": torch.where(torch.rand(B, generator=g) < 0.2, 0.0, 0.99 ** 3)}


def spec(kind):
    return ModelSpec((D,), A, 16, action_kind=kind, action_low=tuple(LOW),
                     action_high=tuple(HIGH))


def test_sac_losses_against_numpy():
    torch.manual_seed(0)
    model = sac_model(spec("tanh_gaussian"))
    agent = SACAgent(model, FROZEN, FROZEN, torch.device("cpu"), gamma=0.99, n_step=3,
                     tau=0.005, policy_frequency=1, target_frequency=1, autotune=True,
                     alpha=0.2, seed=5)
    tr = fixed_batch()
    stats = agent.learn(tr)
    g = torch.Generator().manual_seed(5)  # the agent's draws, in its order
    eps_next, eps = (torch.randn(B, A, generator=g).double().numpy() for _ in range(2))
    np_tr = {k: v.double().numpy() for k, v in tr.items()}

    def policy(obs, noise):
        out = np_actor(model, obs)
        mean, log_std = out[:, :A], np_log_std(out[:, A:])
        u = mean + np.exp(log_std) * noise
        return BIAS + SCALE * np.tanh(u), np_tanh_log_prob(mean, log_std, u)

    alpha = 1.0  # exp(0): autotune's first temperature
    a2, logp2 = policy(np_tr["next_obs"], eps_next)
    soft = np_critics(agent.target_critic, np_tr["next_obs"], a2).min(0) - alpha * logp2
    target = np_tr["reward"] + np_tr["discount"] * soft
    q = np_critics(model.critic, np_tr["obs"], np_tr["action"])
    critic_loss = ((q - target) ** 2).mean(1).sum()
    a, logp = policy(np_tr["obs"], eps)
    actor_loss = (alpha * logp - np_critics(model.critic, np_tr["obs"], a).min(0)).mean()
    alpha_loss = (-alpha * (logp - A)).mean()  # target entropy -|A|
    assert stats["critic_loss"] == pytest.approx(critic_loss, rel=1e-4)
    assert stats["target_mean"] == pytest.approx(target.mean(), rel=1e-4, abs=1e-4)
    assert stats["actor_loss"] == pytest.approx(actor_loss, rel=1e-4)
    assert stats["alpha_loss"] == pytest.approx(alpha_loss, rel=1e-4)
    assert stats["entropy"] == pytest.approx(-logp.mean(), rel=1e-4)


@pytest.mark.parametrize("name", ["td3", "ddpg"])
def test_td3_and_ddpg_losses_against_numpy(name):
    torch.manual_seed(0)
    cls, build = (TD3Agent, twin_model) if name == "td3" else (DDPGAgent, single_model)
    model = build(spec("deterministic"))
    smoothing = 0.2 if name == "td3" else 0.0
    agent = cls(model, FROZEN, FROZEN, torch.device("cpu"), gamma=0.99, n_step=1, tau=0.005,
                policy_frequency=2 if name == "td3" else 1, policy_noise=smoothing,
                noise_clip=0.5, exploration_noise=0.1, seed=5)
    tr = fixed_batch()
    stats = agent.learn(tr)
    np_tr = {k: v.double().numpy() for k, v in tr.items()}
    mu2 = BIAS + SCALE * np.tanh(np_actor(model, np_tr["next_obs"]))
    if smoothing:
        eps = torch.randn(B, A, generator=torch.Generator().manual_seed(5)).double().numpy()
        mu2 = np.clip(mu2 + np.clip(eps * smoothing, -0.5, 0.5) * SCALE, LOW, HIGH)
    target = np_tr["reward"] + np_tr["discount"] * \
        np_critics(agent.target_critic, np_tr["next_obs"], mu2).min(0)
    q = np_critics(model.critic, np_tr["obs"], np_tr["action"])
    assert q.shape[0] == (2 if name == "td3" else 1)
    assert stats["critic_loss"] == pytest.approx(((q - target) ** 2).mean(1).sum(), rel=1e-4)
    mu = BIAS + SCALE * np.tanh(np_actor(model, np_tr["obs"]))
    actor_loss = -np_critics(model.critic, np_tr["obs"], mu)[0].mean()  # Q_1 only
    assert stats["actor_loss"] == pytest.approx(actor_loss, rel=1e-4)


def test_actor_step_leaves_the_critics_alone_and_targets_follow_by_polyak():
    torch.manual_seed(0)
    model = twin_model(spec("deterministic"))
    moving = OptimConfig(optimizer="adam", lr=1e-2, lr_end_value=1e-2)
    agent = TD3Agent(model, moving, FROZEN, torch.device("cpu"), gamma=0.99, n_step=1,
                     tau=0.25, policy_frequency=1, policy_noise=0.2, noise_clip=0.5,
                     exploration_noise=0.1, seed=0)
    critic = [p.detach().clone() for p in model.critic.parameters()]
    target_actor = [p.detach().clone() for p in agent.target_actor.parameters()]
    agent.learn(fixed_batch())
    for before, after in zip(critic, model.critic.parameters(), strict=True):
        assert torch.equal(before, after)  # the critics' lr is 0; the actor's step adds nothing
    for old, new, online in zip(target_actor, agent.target_actor.parameters(),
                                model.actor.parameters(), strict=True):
        torch.testing.assert_close(new, 0.75 * old + 0.25 * online)
