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
    # auto: bf16 for ppo on the Nature CNN on a CPU with AMX only
    monkeypatch.setattr(precision, "native_bf16", lambda device: "this CPU has AMX")
    monkeypatch.setattr(precision, "has_amx", lambda device: device.type == "cpu")
    dtype, why = choose_precision("auto", CPU, False, ppo_on_pixels=True)
    assert dtype is torch.bfloat16 and "AMX" in why and "--precision=fp32" in why
    dtype, why = choose_precision("auto", CPU, False, ppo_on_pixels=False)
    assert dtype is None and "Nature CNN" in why
    assert choose_precision("auto", CPU, True, ppo_on_pixels=True)[0] is None  # off-policy
    assert choose_precision("auto", torch.device("cuda"), False, ppo_on_pixels=True)[0] is None
    monkeypatch.setattr(precision, "native_bf16", lambda device: "this CPU has AVX512-BF16")
    monkeypatch.setattr(precision, "has_amx", lambda device: False)
    dtype, why = choose_precision("auto", CPU, False, ppo_on_pixels=True)
    assert dtype is None and "AMX only" in why


def test_auto_runs_ppo_on_the_nature_cnn_in_bf16_where_the_cpu_has_amx(monkeypatch):
    """make_agent tells choose_precision what the agent and its model are."""
    monkeypatch.setattr(precision, "native_bf16", lambda device: "this CPU has AMX")
    monkeypatch.setattr(precision, "has_amx", lambda device: device.type == "cpu")
    pong = EnvInfo((4, 84, 84), "uint8", 6, "atari", 4, 4, "discrete")
    for env, info, agent, expected in [("PongNoFrameskip-v4", pong, "ppo", torch.bfloat16),
                                       ("PongNoFrameskip-v4", pong, "impala", None),
                                       ("MinAtar/Breakout-v1", MINATAR, "ppo", None)]:
        cfg, errors = make_config({**default_values(), "env": env, "agent": agent,
                                   "device": "cpu"})
        assert not errors, errors
        assert make_agent(cfg, info).autocast is expected, (env, agent)


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


def test_bf16_starts_after_its_warmup_in_float32():
    """--bf16_warmup_steps: make_agent turns the env steps into updates (64 env steps
    an update here: 100 steps -> 2 updates) and says so; `update` trains in float32 before
    update `autocast_after`, bit for bit as an fp32 agent does, and in bf16 from it on."""
    values = {**default_values(), "env": "MinAtar/Breakout-v1", "agent": "ppo",
              "device": "cpu", "batch_size": 8, "r_f_steps": 8, "ppo_epochs": 1,
              "ppo_minibatches": 1, "bf16_warmup_steps": 100}

    def fresh(name):  # the same weights and a fresh optimizer every time
        cfg, errors = make_config({**values, "precision": name})
        assert not errors, errors
        torch.manual_seed(0)
        return cfg, make_agent(cfg, MINATAR)

    cfg, bf16 = fresh("bf16")
    assert bf16.autocast is torch.bfloat16 and bf16.autocast_after == 2
    assert "fp32 for the first 100 env steps" in bf16.precision_reason
    _, fp32 = fresh("fp32")
    assert fp32.autocast_after == 0 and "first" not in fp32.precision_reason
    torch.manual_seed(1)
    batch = synthetic_batch(cfg, MINATAR, CPU)
    with torch.no_grad():
        batch["logits"] = fp32.model(batch["obs"], fp32.model.initial_state(8), batch["done"])[0]

    def step(name, updates):
        agent = fresh(name)[1]
        agent.update(dict(batch), 0.0, updates)
        return torch.cat([p.flatten() for p in agent.model.parameters()])

    assert torch.equal(step("bf16", 1), step("fp32", 1))  # still warming up: float32
    assert not torch.equal(step("bf16", 2), step("fp32", 2))  # bf16 from update 2 on
    assert torch.equal(step("fp32", 2), step("fp32", 1))
    cfg, errors = make_config({**values, "bf16_warmup_steps": -1})
    assert cfg is None and errors == ["--bf16_warmup_steps: must be >= 0, got -1"]
