"""bench/bf16_grads.py: on a fresh model the policy's gradient in the shared torso is a
small share of the value's (the small policy head), bf16 keeps each loss's own
gradient close to float32's, and only layers both losses reach are compared."""

from __future__ import annotations

from bench.bf16_grads import compare, play, targets
from tests.test_bench_bf16_ratio import ENV_ID, fresh_model


def test_a_fresh_models_torso_gradients_in_bf16():
    cfg, _, model = fresh_model()
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
