"""Input and return normalisation (agents/normalize.py) against NumPy references, and
their statistics travelling to the actors with the weights."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from agents.agent import OptimConfig
from agents.networks import build_model, step_model
from agents.normalize import RunningMeanStd, update_inputs, update_returns
from agents.ppo import PPOAgent, PPOConfig
from workers.weights import SharedWeights


@pytest.mark.parametrize("shape", [(), (3,), (2, 4, 4)])
def test_running_statistics_equal_those_of_all_samples_at_once(shape):
    rng = np.random.default_rng(0)
    batches = [rng.normal(3.0, 2.0, (n, *shape)) for n in (1, 7, 50, 3)]
    norm = RunningMeanStd(shape)
    for b in batches:
        norm.update(torch.tensor(b, dtype=torch.float32))
    every = np.concatenate(batches).astype(np.float64)
    np.testing.assert_allclose(norm.mean.numpy(), every.mean(0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(norm.var.numpy(), every.var(0), rtol=1e-4, atol=1e-5)
    assert float(norm.count) == len(every)


def test_normalize_clips_and_denormalize_inverts():
    norm = RunningMeanStd((2,), clip=5.0)
    norm.update(torch.tensor([[0.0, 10.0], [2.0, 30.0]]))  # mean (1, 20), var (1, 100)
    x = torch.tensor([[2.0, 40.0], [1.0, 1000.0]])
    std = np.sqrt(np.array([1.0, 100.0]) + norm.eps)
    ref = np.clip((x.numpy() - np.array([1.0, 20.0])) / std, -5, 5)
    np.testing.assert_allclose(norm.normalize(x).numpy(), ref, rtol=1e-6)
    y = torch.tensor([0.5, -1.5])
    np.testing.assert_allclose(norm.normalize(norm.denormalize(y)).numpy(), y.numpy(),
                               rtol=1e-5)


def test_the_model_reads_normalised_pixels_and_outputs_values_in_return_units():
    torch.manual_seed(0)
    model = build_model((2, 10, 10), 3, 16, normalize_input=True, normalize_returns=True)
    obs = torch.randint(0, 2, (5, 2, 10, 10), dtype=torch.uint8)
    update_inputs(model, obs.unsqueeze(1))  # [T=5, B=1, ...]
    update_returns(model, torch.tensor([[1.0, 3.0], [5.0, 7.0]]))  # mean 4, var 5
    x = obs.float().numpy()
    ref_in = np.clip((x - x.mean(0)) / np.sqrt(x.var(0) + 1e-5), -5, 5)
    np.testing.assert_allclose(model._input(obs).numpy(), ref_in, rtol=1e-4, atol=1e-5)
    _, value, hidden, _ = step_model(model, obs)
    head = model.baseline(hidden).squeeze(-1)
    np.testing.assert_allclose(value.detach().numpy(),
                               head.detach().numpy() * np.sqrt(5.0 + 1e-5) + 4.0, rtol=1e-5)


def test_ppo_value_loss_is_the_loss_of_the_normalised_prediction():
    torch.manual_seed(1)
    model = build_model((4,), 2, 8, normalize_returns=True)
    update_returns(model, torch.tensor([10.0, 20.0, 30.0, 40.0]))
    agent = PPOAgent(model, PPOConfig(value_loss_weight=1.0, entropy_loss_weight=0.0),
                     OptimConfig(optimizer="adam", lr=1e-3), torch.device("cpu"))
    t, b = 3, 2
    batch = {"obs": torch.randn(t + 1, b, 4), "action": torch.randint(0, 2, (t + 1, b)),
             "logits": torch.randn(t + 1, b, 2),
             "done": torch.zeros(t + 1, b, dtype=torch.bool),
             "truncated": torch.zeros(t + 1, b, dtype=torch.bool)}
    returns = torch.randn(t, b) * 10 + 25
    with torch.no_grad():
        _, values, _, _ = step_model(model, batch["obs"][:-1].reshape(t * b, 4))
    _, stats = agent.minibatch_loss(batch, torch.randn(t, b), returns, values.view(t, b))
    norm = model.return_norm
    head = (values.view(t, b) - norm.mean) / norm.std()
    target = (returns - norm.mean) / norm.std()
    ref = 0.5 * np.mean((head.numpy() - target.numpy()) ** 2)
    assert stats["value_loss"] == pytest.approx(float(ref), rel=1e-5)


def test_actors_receive_the_statistics_with_the_weights():
    torch.manual_seed(2)
    learner = build_model((4, 84, 84), 6, 32, normalize_input=True, normalize_returns=True)
    actor = build_model((4, 84, 84), 6, 32, normalize_input=True, normalize_returns=True)
    weights = SharedWeights(learner)
    update_inputs(learner, torch.randint(0, 255, (3, 2, 4, 84, 84), dtype=torch.uint8))
    update_returns(learner, torch.randn(5, 2) * 3 + 1)
    weights.publish(learner, 1)
    assert weights.pull(actor, 0) == 1
    for name, buf in learner.named_buffers():
        torch.testing.assert_close(dict(actor.named_buffers())[name].float(), buf.float())
    obs = torch.randint(0, 255, (2, 4, 84, 84), dtype=torch.uint8)
    with torch.no_grad():
        torch.testing.assert_close(step_model(actor, obs), step_model(learner, obs))


def test_an_update_folds_in_rows_0_to_T_minus_1_once():
    model = build_model((3,), 2, 8, normalize_input=True)
    agent = PPOAgent(model, PPOConfig(epochs=1, minibatches=1), OptimConfig(optimizer="adam"),
                     torch.device("cpu"))
    t, b = 4, 2
    obs = torch.arange((t + 1) * b * 3, dtype=torch.float32).view(t + 1, b, 3)
    batch = {"obs": obs, "action": torch.zeros(t + 1, b, dtype=torch.long),
             "logits": torch.zeros(t + 1, b, 2), "value": torch.zeros(t + 1, b),
             "reward": torch.ones(t + 1, b), "done": torch.zeros(t + 1, b, dtype=torch.bool),
             "truncated": torch.zeros(t + 1, b, dtype=torch.bool),
             "bootstrap_value": torch.zeros(t + 1, b)}
    agent.update(batch, 0.0)
    rows = obs[:-1].reshape(-1, 3).numpy()
    assert float(model.obs_norm.count) == t * b
    np.testing.assert_allclose(model.obs_norm.mean.numpy(), rows.mean(0), rtol=1e-6)
