"""Hidden-layer features: the networks' forward_with_hidden and the `features` key
of custom replay entries."""

from __future__ import annotations

import pytest
import torch

from agents.networks import MLP, NatureCNN
from replay.config import ReplaySpec, parse_replay_parameters


@pytest.mark.parametrize("model,obs", [
    (MLP((4,), 3, hidden_size=16), torch.randn(5, 4)),
    (NatureCNN((4, 84, 84), 6, hidden_size=32),
     torch.randint(0, 256, (3, 4, 84, 84), dtype=torch.uint8)),
])
def test_forward_with_hidden_matches_forward(model, obs):
    obs = obs.view(1, *obs.shape)  # [T=1, B, ...]
    done = torch.ones(obs.shape[:2], dtype=torch.bool)
    with torch.no_grad():
        logits, value, _ = model(obs, (), done)
        logits_h, value_h, hidden, _ = model.forward_with_hidden(obs, (), done)
    torch.testing.assert_close(logits_h, logits)
    torch.testing.assert_close(value_h, value)
    assert hidden.shape == (*obs.shape[:2], model.hidden_size) and hidden.dtype == torch.float32
    with torch.no_grad():  # the hidden layer is what the policy head reads
        torch.testing.assert_close(model.policy(hidden), logits)


def custom(extra: str) -> tuple[list[ReplaySpec], list[str]]:
    return parse_replay_parameters(
        '[{"type": "queue", "sample_ratio": 0.5}, {"type": "custom", "capacity": 100, '
        f'"sample_ratio": 0.5{extra}}}]', 8)


def test_features_key_defaults_to_logits_and_is_checked():
    entries, errors = custom("")
    assert not errors and entries[1].features == "logits"
    entries, errors = custom(', "features": "hidden"')
    assert not errors and entries[1].features == "hidden"
    _, errors = custom(', "features": "torso"')
    assert errors == ["entry 1: 'features' must be one of logits, hidden, got 'torso'"]
    _, errors = parse_replay_parameters(
        '[{"type": "standard", "capacity": 100, "sample_ratio": 1, "features": "hidden"}]', 8)
    assert errors == ["entry 0: unknown key 'features' for type 'standard'"]


def test_kl_div_needs_logits():
    _, errors = custom(', "features": "hidden", "dist_function": "kl_div"')
    assert len(errors) == 1
    assert errors[0].startswith("entry 1: 'dist_function' 'kl_div' needs 'features' 'logits'")
    assert "'features' 'hidden'" in errors[0]
    assert not custom(', "features": "logits", "dist_function": "kl_div"')[1]
    assert not custom(', "features": "hidden", "dist_function": "cos_dist"')[1]


@pytest.mark.parametrize("extra,stored", [
    (', "features": "hidden"', True),  # elite_sampling reads the stored features
    (', "features": "hidden", "sample_strategy": "uniform", '
     '"insert_strategy": "elite_insertion"', True),
    (', "features": "hidden", "sample_strategy": "uniform"', False),
    (', "features": "hidden", "sample_strategy": "attentive_sampling", '
     '"insert_strategy": "elite_insertion"', False),  # current features only
    ("", False),
])
def test_actors_store_hidden_features_only_for_replays_that_read_them(extra, stored):
    entries, errors = custom(extra)
    assert not errors
    assert entries[1].stores_hidden_features is stored
