"""Input and return normalisation (agents/normalize.py) against NumPy references, and
their statistics travelling to the actors with the weights."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from agents.agent import OptimConfig
from agents.model_spec import build_model
from agents.networks import step_model
from agents.normalize import (
    RunningMeanStd,
    batch_moments,
    uint8_moments,
    update_inputs,
    update_returns,
)
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


@pytest.mark.parametrize("n", [1, 5, 256, 257, 700])
def test_uint8_moments_are_exact_before_rounding(n):
    """Frames' moments from integer sums (exact below 2^24 in float32 chunks of 256 rows)
    against NumPy in float64, scaled as the Nature CNN scales its input; a pixel that
    never changes has variance 0 exactly; the float path agrees to float32 rounding."""
    rng = np.random.default_rng(n)
    x = rng.integers(0, 256, (n, 3, 5, 5), dtype=np.uint8)
    x[:, 0] = 255  # constant pixels, the largest squares
    count, mean, var = uint8_moments(torch.from_numpy(x), (3, 5, 5), 1 / 255)
    ref = x.astype(np.float64) / 255
    assert count == n and mean.dtype == var.dtype == torch.float32
    np.testing.assert_allclose(mean.numpy(), ref.mean(0), rtol=1e-7, atol=0)
    np.testing.assert_allclose(var.numpy(), ref.var(0), rtol=1e-6, atol=1e-12)
    assert (var[0] == 0).all()
    _, mean32, var32 = batch_moments(torch.from_numpy(x).float() / 255, (3, 5, 5))
    torch.testing.assert_close(mean, mean32, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(var, var32, rtol=1e-5, atol=1e-7)
    assert uint8_moments(torch.from_numpy(x[:0]), (3, 5, 5), 1 / 255)[0] == 0


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


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="no GPU here (the GPU machine runs it)"))])
def test_received_rollouts_fold_in_rows_0_to_T_minus_1_once_and_replays_never(tmp_path, device):
    """Input statistics come from fresh rollouts at receipt (training/policy_learner.py),
    each step once; training on batches, replayed rollouts among them, adds nothing. On
    a GPU the rows go through pinned buffers that two receipts in a row reuse."""
    from option_flags import default_values
    from training.config import make_config
    from training.factory import build_driver
    from training.plan import make_plan
    from training.run_dir import RunDir
    from workers.actor_pool import FinishedRollout

    cfg, errors = make_config(default_values(
        env="CartPole-v1", worker_count=1, envs_per_worker=2, batch_size=4, r_f_steps=5,
        normalize_input=True, hidden_size=8, replays="standard", training_fill_in_factor=0.0,
        device=device), given={"replays"})
    assert not errors, errors
    driver = build_driver(cfg, make_plan(cfg), RunDir(str(tmp_path), cfg.env, cfg.to_dict(),
                                                      echo=False))
    (learner,) = driver.learners
    norm = learner.agent.model.obs_norm
    buffers = driver.slots.buffers
    g = torch.Generator().manual_seed(0)
    fed, replayed = [], 0
    try:
        for _ in range(12):
            taken = driver.slots.take(2)
            for v in buffers.values():
                if v.dtype.is_floating_point:
                    v[:, taken] = torch.randn(v[:, taken].shape, generator=g) * 2 + 1
            fed.append(buffers["obs"][:-1, taken].reshape(-1, 4).clone())
            driver._receive([FinishedRollout(tuple(taken), [])])
            while (batch := learner.next_batch()) is not None:
                replayed += int(batch["replayed"].sum())
                learner.train(batch, 0.0)
            rows = torch.cat(fed).double().numpy()
            assert float(norm.count) == len(rows)
        assert len(rows) == 12 * 2 * cfg.r_f_steps
        assert replayed > 0  # the standard replay's share was trained on too
        np.testing.assert_allclose(norm.mean.cpu().numpy(), rows.mean(0), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(norm.var.cpu().numpy(), rows.var(0), rtol=1e-4, atol=1e-5)
    finally:
        driver.close()
