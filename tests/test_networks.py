"""The networks: which one an observation shape gets, shapes out, and the start policy."""

from __future__ import annotations

import torch

from agents.model_spec import build_model
from agents.networks import MLP, MinAtarCNN, NatureCNN, step_model


def test_build_model_picks_the_net_for_the_observation_kind():
    assert isinstance(build_model((4, 84, 84), 6, 512), NatureCNN)
    assert isinstance(build_model((4, 10, 10), 3, 256), MinAtarCNN)
    assert isinstance(build_model((7, 10, 10), 6, 256), MinAtarCNN)  # other MinAtar games
    assert isinstance(build_model((4,), 2, 64), MLP)


def test_minatar_net_shapes_and_raw_binary_input():
    torch.manual_seed(0)
    net = build_model((4, 10, 10), 3, 32)
    obs = torch.randint(0, 2, (5, 4, 10, 10), dtype=torch.uint8)
    logits, value, hidden, state = step_model(net, obs)
    assert logits.shape == (5, 3) and value.shape == (5,) and hidden.shape == (5, 32)
    assert state == ()  # feed-forward
    # 0/1 channels are taken as they are: scaling them like 0..255 pixels would make
    # the input 255 times weaker, so the output must depend on the input at this scale
    zeros = step_model(net, torch.zeros_like(obs))[1]
    assert (value - zeros).abs().max() > 1e-2


def test_conv_nets_start_near_uniform_policy():
    torch.manual_seed(0)
    for shape, n in (((4, 84, 84), 6), ((4, 10, 10), 3)):
        net = build_model(shape, n, 64)
        obs = torch.randint(0, 256 if shape[1] == 84 else 2, (16, *shape), dtype=torch.uint8)
        probs = torch.softmax(step_model(net, obs)[0], -1)
        assert (probs - 1 / n).abs().max() < 0.02, shape


def test_nature_cnn_channels_last_is_the_same_function():
    """The torso reads its input channels-last (faster on the CPU): outputs and
    gradients match the plain NCHW convolutions it replaces."""
    torch.manual_seed(0)
    net = build_model((4, 84, 84), 6, 64)
    obs = torch.randint(0, 256, (1, 8, 4, 84, 84), dtype=torch.uint8)
    done = torch.zeros(1, 8, dtype=torch.bool)
    logits, value, _, _ = net.forward_with_hidden(obs, (), done)
    x = obs[0].float() / 255.0
    ref = net.fc(net.torso(x))  # NCHW all the way
    assert torch.allclose(net.policy(ref), logits[0], atol=1e-5)
    assert torch.allclose(net.baseline(ref).squeeze(-1), value[0], atol=1e-5)
    (logits.sum() + value.sum()).backward()
    got = net.torso[0].weight.grad.clone()
    net.zero_grad()
    (net.policy(ref).sum() + net.baseline(ref).sum()).backward()
    assert torch.allclose(net.torso[0].weight.grad, got, rtol=1e-4, atol=1e-5)


def test_a_shared_mlp_torso_feeds_both_heads():
    torch.manual_seed(0)
    separate = build_model((3,), 2, 8, normalize_returns=True)
    shared = build_model((3,), 2, 8, normalize_returns=True, mlp_shared_torso=True)
    assert shared.value_torso is None and separate.value_torso is not None
    obs = torch.randn(20, 3)
    _, value, hidden, _ = step_model(shared, obs)
    # the value head reads the policy torso's features, in return units
    features = shared.policy_torso(obs)
    torch.testing.assert_close(hidden, features)
    torch.testing.assert_close(value, shared._value(shared.baseline(features)).reshape(20))
    n_torso = sum(p.numel() for p in separate.value_torso.parameters())
    assert sum(p.numel() for p in separate.parameters()) - \
        sum(p.numel() for p in shared.parameters()) == n_torso
