"""bench/bf16_grads.py: on a fresh model the policy's gradient in the shared torso is a
small share of the value's (the small policy head), bf16 keeps each loss's own
gradient close to float32's, and only layers both losses reach are compared."""

from __future__ import annotations

import torch

from bench.bf16_grads import compare, play, targets
from option_flags import default_values
from training.config import make_config
from wrappers.envs import env_info

ENV_ID = "MinAtar/Breakout-v1"


def test_a_fresh_models_torso_gradients_in_bf16():
    cfg, errors = make_config(default_values(env=ENV_ID))
    assert not errors
    info = env_info(ENV_ID, cfg.env_options())
    torch.manual_seed(0)
    model = cfg.model_spec(info).build()
    data = play(model, ENV_ID, cfg.env_options(), envs=4, steps=64)
    assert data["obs"].shape[:2] == data["action"].shape == (64, 4)
    adv, returns = targets(model, data, 0.99, 0.95)
    assert adv.shape == returns.shape == (64, 4) and adv.abs().sum() > 0
    layers = compare(model, data["obs"], data["action"], adv, returns, 0.5, 0.01)
    torso = {n for n, _ in model.named_parameters()
             if not n.startswith(("policy", "baseline"))}
    assert set(layers) == torso
    for name, row in layers.items():
        assert row["policy_over_value"] < 0.2, (name, row)  # the head's gain of 0.01
        assert row["policy_cos"] > 0.98 and row["total_cos"] > 0.98, (name, row)
        assert row["error_over_policy"] > 0, (name, row)  # bf16 did run
