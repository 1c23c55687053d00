"""The networks: which one an observation shape gets, shapes out, and the start policy."""

from __future__ import annotations

import torch

from agents.networks import MLP, MinAtarCNN, NatureCNN, build_model, step_model


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
