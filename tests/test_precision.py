"""--precision (agents/precision.py): what auto, fp32 and bf16 choose, and a bf16
update against the float32 one from the same weights on the same on-policy batch
(one optimizer step): float32 outputs, parameters and optimizer state, and nearly
the same losses and step."""

from __future__ import annotations

import copy

import pytest
import torch

from agents import precision
from agents.precision import choose_precision
from bench.throughput import synthetic_batch
from option_flags import default_values
from training.config import make_config
from training.factory import make_agent
from wrappers.envs import EnvInfo

CPU = torch.device("cpu")


def test_choices(monkeypatch):
    assert choose_precision("fp32", CPU, False)[0] is None
    assert choose_precision("bf16", CPU, False)[0] is torch.bfloat16
    dtype, why = choose_precision("bf16", CPU, True)
    assert dtype is None and "off-policy" in why
    monkeypatch.setattr(precision, "native_bf16", lambda device: None)
    dtype, why = choose_precision("auto", CPU, False)
    assert dtype is None and "no native bf16" in why
    assert "emulated" in choose_precision("bf16", CPU, False)[1]
    # auto: float32 even with native bf16 (it learned Pong slower per frame)
    monkeypatch.setattr(precision, "native_bf16", lambda device: "this CPU has AMX")
    monkeypatch.setattr(precision, "has_amx", lambda device: True)
    for device in (CPU, torch.device("cuda")):
        dtype, why = choose_precision("auto", device, False)
        assert dtype is None and "AMX" in why and "--precision=bf16" in why


def test_auto_trains_ppo_on_the_nature_cnn_in_float32_even_with_amx(monkeypatch):
    """make_agent's choice for every agent and model: float32 unless asked for bf16."""
    monkeypatch.setattr(precision, "native_bf16", lambda device: "this CPU has AMX")
    monkeypatch.setattr(precision, "has_amx", lambda device: True)
    pong = EnvInfo((4, 84, 84), "uint8", 6, "atari", 4, 4, "discrete")
    for env, info, agent, asked, expected in [
            ("PongNoFrameskip-v4", pong, "ppo", "auto", None),
            ("PongNoFrameskip-v4", pong, "impala", "auto", None),
            ("MinAtar/Breakout-v1", MINATAR, "ppo", "auto", None),
            ("PongNoFrameskip-v4", pong, "ppo", "bf16", torch.bfloat16)]:
        cfg, errors = make_config({**default_values(), "env": env, "agent": agent,
                                   "device": "cpu", "precision": asked})
        assert not errors, errors
        assert make_agent(cfg, info).autocast is expected, (env, agent, asked)


# MinAtar Breakout's shapes: the conv net, no emulator needed
MINATAR = EnvInfo((4, 10, 10), "float32", 3, "minatar", 1, 0, "discrete")


@pytest.mark.parametrize("agent_name,use_lstm", [("ppo", False), ("impala", True)])
def test_a_bf16_update_stays_close_to_fp32(agent_name, use_lstm):
    values = {**default_values(), "env": "MinAtar/Breakout-v1", "agent": agent_name,
              "device": "cpu", "use_lstm": use_lstm, "batch_size": 8, "r_f_steps": 8}
    if agent_name == "ppo":  # one optimizer step: both start from the same weights
        values.update(ppo_epochs=1, ppo_minibatches=1)
    agents = {}
    for name in ("fp32", "bf16"):
        cfg, errors = make_config({**values, "precision": name})
        assert not errors, errors
        torch.manual_seed(0)
        agents[name] = make_agent(cfg, MINATAR)
    assert agents["bf16"].autocast is torch.bfloat16 and agents["fp32"].autocast is None
    torch.manual_seed(1)
    batch = synthetic_batch(cfg, MINATAR, CPU)
    model = agents["fp32"].model
    with torch.no_grad():  # on-policy data: the behaviour is the model itself
        batch["logits"] = model(batch["obs"], model.initial_state(8), batch["done"])[0]
    before = copy.deepcopy(model.state_dict())
    stats = {}
    for name, agent in agents.items():
        agent.model.load_state_dict(before)
        stats[name] = agent.update(batch, 0.0)
        for k, v in agent.model.state_dict().items():
            assert v.dtype == before[k].dtype, k
    # the model's outputs are float32 even when its layers ran in bf16
    with torch.autocast("cpu", dtype=torch.bfloat16):
        model = agents["bf16"].model
        logits, value, state = model(batch["obs"], model.initial_state(8), batch["done"])
    assert logits.dtype == value.dtype == torch.float32
    assert all(s.dtype == torch.float32 for s in state)
    for k in ("policy_loss", "value_loss", "entropy"):
        a, b = stats["fp32"][k], stats["bf16"][k]
        assert abs(a - b) <= 0.05 * abs(a) + 1e-3, (k, a, b)
    steps = [torch.cat([(p - before[n]).flatten() for n, p in a.model.state_dict().items()
                        if p.dtype.is_floating_point and "norm" not in n])
             for a in agents.values()]
    cosine = torch.nn.functional.cosine_similarity(steps[0], steps[1], dim=0)
    assert cosine > 0.9, cosine
    assert not torch.equal(steps[0], steps[1])  # bf16 did run
    state = agents["bf16"].optimizers["main"].state_dict()["state"]
    assert all(t.dtype == torch.float32 for s in state.values() for t in s.values()
               if t.is_floating_point())
