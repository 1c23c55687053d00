"""The LSTM core (--use_lstm): the actors' stored states against the learner's unroll,
and the losses against a step-by-step recomputation of the core."""

from __future__ import annotations

import pytest
import torch

from agents.agent import OptimConfig, host_stats
from agents.impala import LossConfig, impala_loss
from agents.model_spec import ModelSpec
from agents.networks import (
    LSTMCore,
    mask_state,
    pack_state,
    step_model,
    unpack_state,
    unroll_start,
)
from agents.ppo import PPOAgent, PPOConfig
from tests.actor_harness import collect_rollouts

UNROLL = 6


def test_the_learner_unrolls_the_states_the_actor_had_across_episode_ends():
    by_env, model = collect_rollouts(8, workers=1, envs=2, unroll=UNROLL, lstm_size=8)
    starts_seen = truncations = 0
    for rollouts in by_env.values():
        for k, r in enumerate(rollouts):
            assert r["core_state"].shape == (UNROLL + 1, 2, 8)
            if k > 0:  # row 0 repeats the previous rollout's last row, its state too
                assert torch.equal(r["core_state"][0], rollouts[k - 1]["core_state"][-1])
            batch = {key: v.unsqueeze(1) for key, v in r.items()}
            state, done = unroll_start(model, batch)
            starts_seen += int(done[1:].sum())
            with torch.no_grad():
                logits, value, _ = model(batch["obs"], state, done)
                torch.testing.assert_close(logits[:, 0], r["logits"], atol=1e-6, rtol=0)
                torch.testing.assert_close(value[:, 0], r["value"], atol=1e-6, rtol=0)
                for t in range(1, UNROLL + 1):  # the state after rows 0..t-1, then x_t's reset
                    _, _, after = model(batch["obs"][:t], state, done[:t])
                    read_with = pack_state(mask_state(after, done[t]))[0]
                    torch.testing.assert_close(read_with, r["core_state"][t], atol=1e-6, rtol=0)
                    if r["truncated"][t]:  # the cut episode's final obs, read on from x_{t-1}
                        prev = r["obs"][t - 1]
                        final = torch.stack([prev[0], prev[1] + 1, prev[2], prev[3] + 1])
                        v_final = step_model(model, final[None], after,
                                             torch.zeros(1, dtype=torch.bool))[1][0]
                        torch.testing.assert_close(r["bootstrap_value"][t], v_final,
                                                   atol=1e-6, rtol=0)
                        truncations += 1
            if done[0, 0]:  # a reset at row 0: the stored state is zero
                assert not r["core_state"][0].any()
    assert starts_seen >= 4 and truncations >= 1  # episode ends inside rollouts were crossed


def stepwise_core(self, x, state, done):
    """The reference: `LSTMCore.forward` one row at a time, resetting at every start."""
    out = []
    for t in range(x.shape[0]):
        h, c = mask_state(state, done[t])
        y, (h, c) = self.lstm(x[t:t + 1], (h[None], c[None]))
        state = (h[0], c[0])
        out.append(y)
    return torch.cat(out), state


def lstm_batch(t: int, b: int, seed: int = 0):
    """A random batch [T+1, B] of CartPole-shaped rollouts with episode starts inside
    and stored states at row 0, and its model (an MLP with an LSTM core)."""
    torch.manual_seed(seed)
    model = ModelSpec((4,), 2, 16, use_lstm=True, lstm_size=8).build()
    done = torch.rand(t + 1, b) < 0.25
    done[2, 0] = done[4, 1] = True
    batch = {"obs": torch.randn(t + 1, b, 4), "action": torch.randint(0, 2, (t + 1, b)),
             "reward": torch.randn(t + 1, b), "done": done,
             "truncated": torch.zeros(t + 1, b, dtype=torch.bool),
             "bootstrap_value": torch.zeros(t + 1, b),
             "core_state": torch.randn(t + 1, b, 2, 8) * 0.5}
    with torch.no_grad():
        logits, value, _ = model(batch["obs"], *unroll_start(model, batch))
    batch["logits"] = logits + 0.3 * torch.randn_like(logits)  # off-policy behaviour
    batch["value"] = value
    return model, batch


def loss_and_grads(loss_fn, model):
    model.zero_grad()
    loss, stats = loss_fn()
    loss.backward()
    return loss.item(), host_stats(stats), [p.grad.clone() for p in model.parameters()]


@pytest.mark.parametrize("agent", ["impala", "ppo"])
def test_lstm_losses_equal_a_step_by_step_recomputation(agent, monkeypatch):
    model, batch = lstm_batch(t=7, b=3)
    assert torch.nonzero(batch["done"][1:].any(1)).numel() >= 2  # stretches are split
    if agent == "impala":
        def loss_fn():
            return impala_loss(model, batch, LossConfig(gamma=0.9))
    else:
        ppo = PPOAgent(model, PPOConfig(epochs=1, minibatches=1), OptimConfig(optimizer="adam"),
                       torch.device("cpu"))

        def loss_fn():
            adv, returns, old_values, _ = ppo.targets(batch)
            return ppo.minibatch_loss(batch, adv, returns, old_values)
    fast = loss_and_grads(loss_fn, model)
    monkeypatch.setattr(LSTMCore, "forward", stepwise_core)
    slow = loss_and_grads(loss_fn, model)
    assert fast[0] == pytest.approx(slow[0], abs=1e-6)
    for key in ("policy_loss", "value_loss", "entropy"):
        assert fast[1][key] == pytest.approx(slow[1][key], abs=1e-6), key
    for g_fast, g_slow in zip(fast[2], slow[2], strict=True):
        torch.testing.assert_close(g_fast, g_slow, atol=1e-6, rtol=1e-5)


def test_the_unroll_reads_the_stored_state_of_row_0():
    model, batch = lstm_batch(t=4, b=2, seed=1)
    batch["done"][0] = False
    state, _ = unroll_start(model, batch)
    torch.testing.assert_close(pack_state(state), batch["core_state"][0])
    zero = {**batch, "core_state": torch.zeros_like(batch["core_state"])}
    with torch.no_grad():
        a = model(batch["obs"], *unroll_start(model, batch))[0]
        b = model(zero["obs"], *unroll_start(model, zero))[0]
    assert (a[0] - b[0]).abs().max() > 1e-4  # the state is read, not replaced by zeros


def test_one_step_from_a_state_and_a_reset_zero_it():
    model = ModelSpec((4,), 3, 8, use_lstm=True, lstm_size=4).build()
    obs = torch.randn(2, 4)
    state = unpack_state(torch.randn(2, 2, 4))
    with torch.no_grad():
        reset = step_model(model, obs, state, torch.ones(2, dtype=torch.bool))
        fresh = step_model(model, obs)  # the initial state, every env starting
        kept = step_model(model, obs, state, torch.zeros(2, dtype=torch.bool))
    torch.testing.assert_close(reset[0], fresh[0])
    assert (kept[0] - fresh[0]).abs().max() > 1e-4
    assert ModelSpec((4,), 3, 8).state_shape == () and model.initial_state(2)[0].shape == (2, 4)


def test_a_resume_must_keep_every_architecture_flag():
    from option_flags import default_values
    from training.config import make_config
    from training.session import architecture_problem

    def cfg(**flags):
        c, errors = make_config(default_values(env="CartPole-v1", **flags))
        assert not errors, errors
        return c

    saved = cfg(use_lstm=True, lstm_size=8)
    model = ModelSpec((4,), 2, saved.hidden_size, normalize_returns=saved.normalize_returns,
                      use_lstm=True, lstm_size=8).build()
    def weights(state: dict) -> list[dict]:  # a checkpoint's policies (format 2)
        return [{"agent": {"model": state}}]

    ckpt = {"env_info": {"obs_shape": [4], "num_actions": 2}, "config": saved.to_dict(),
            "policies": weights(model.state_dict())}
    assert architecture_problem(cfg(use_lstm=True, lstm_size=8), ckpt) is None
    assert "--lstm_size=8" in architecture_problem(cfg(use_lstm=True, lstm_size=16), ckpt)
    assert "--use_lstm=True" in architecture_problem(cfg(), ckpt)
    # without the core its width is not read: any --lstm_size resumes a feed-forward run
    ff_model = ModelSpec((4,), 2, saved.hidden_size,
                         normalize_returns=saved.normalize_returns).build().state_dict()
    ff = {**ckpt, "config": cfg().to_dict(), "policies": weights(ff_model)}
    assert architecture_problem(cfg(lstm_size=16), ff) is None
    # weights that do not fit the flags' model, whatever the flags say: refused, named
    odd = {**ff, "policies": weights({k: v for k, v in ff_model.items()
                                      if "value_torso" not in k})}
    assert "--load_model_url" in architecture_problem(cfg(), odd)
