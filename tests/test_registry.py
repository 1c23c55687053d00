"""The agent registry (agents/registry.py) and the agent contract (agents/agent.py):
every registered agent builds from a run's flags, returns only the statistics it
declares, and learner.csv refuses a statistic it was not opened for."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from agents.registry import AGENTS, flag_readers, off_policy
from option_flags import default_values
from training.config import make_config
from training.factory import make_agent
from training.run_dir import LEARNER_COLUMNS, RunDir
from wrappers.envs import env_info


def _batch(t: int, b: int, obs: int, actions: int, seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {"obs": torch.randn(t + 1, b, obs, generator=g),
            "action": torch.randint(0, actions, (t + 1, b), generator=g),
            "logits": torch.randn(t + 1, b, actions, generator=g),
            "value": torch.zeros(t + 1, b), "reward": torch.randn(t + 1, b, generator=g),
            "done": torch.rand(t + 1, b, generator=g) < 0.1,
            "truncated": torch.zeros(t + 1, b, dtype=torch.bool),
            "bootstrap_value": torch.zeros(t + 1, b),
            "replayed": torch.tensor([False, True] * (b // 2))}


IMPALA_OPTIONS = {"kl_div_threshold": 0.5, "clear_policy_cloning_weight": 0.1}


@pytest.mark.parametrize("name, extra", [*((n, {}) for n in sorted(AGENTS) if not off_policy(n)),
                                         ("impala", IMPALA_OPTIONS)])
def test_each_agent_returns_only_the_statistics_it_declares(name, extra):
    cfg, errors = make_config(default_values(env="CartPole-v1", agent=name, batch_size=4,
                                             **extra))
    assert not errors, errors
    info = env_info(cfg.env, cfg.env_options())
    agent = make_agent(cfg, info)
    assert isinstance(agent, AGENTS[name].cls)
    declared = agent.stat_names()
    assert len(set(declared)) == len(declared)
    stats = agent.update(_batch(cfg.r_f_steps, 4, 4, 2), progress=0.25)
    assert set(stats) <= set(declared), set(stats) - set(declared)
    assert {"lr", "step_over_lr", "grad_norm", "policy_loss", "entropy"} <= set(stats)
    if extra:
        assert {"masked_fraction", "policy_cloning", "value_cloning"} <= set(stats)


@pytest.mark.parametrize("name", [n for n in sorted(AGENTS) if off_policy(n)])
def test_each_off_policy_agent_returns_only_the_statistics_it_declares(name):
    cfg, errors = make_config(default_values(env="Pendulum-v1", agent=name, batch_size=4))
    assert not errors, errors
    agent = make_agent(cfg, env_info(cfg.env, cfg.env_options()))
    assert isinstance(agent, AGENTS[name].cls)
    declared = agent.stat_names()
    assert len(set(declared)) == len(declared)
    batch = _batch(cfg.r_f_steps, 4, 3, 2)
    batch["action"] = torch.rand(cfg.r_f_steps + 1, 4, 1) * 4 - 2
    batch["final_obs"] = batch["obs"]
    stats = agent.update(batch, progress=0.25)
    assert set(stats) <= set(declared), set(stats) - set(declared)
    assert {"lr", "step_over_lr", "critic_loss", "actor_loss", "q_mean"} <= set(stats)


def test_an_undeclared_statistic_is_an_error_not_dropped(tmp_path):
    run = RunDir(str(tmp_path), "CartPole-v1", {}, echo=False)
    run.open_learner(("policy_loss", "new_stat"))
    run.learner.writerow({"updates": 1, "new_stat": 0.5})
    with pytest.raises(ValueError, match="not_declared"):
        run.learner.writerow({"updates": 2, "not_declared": 1.0})
    run.close()
    header = open(run.file("learner.csv")).readline()
    assert header.strip().split(",") == LEARNER_COLUMNS + ["new_stat"]


def test_an_unknown_agent_is_an_error_and_agent_flags_name_their_readers():
    cfg, errors = make_config(default_values(env="CartPole-v1", agent="a2c"))
    assert cfg is None and errors and errors[0].startswith("--agent: unknown agent 'a2c'")
    readers = flag_readers()
    assert readers["ppo_epochs"] == ("ppo", "truly_ppo", "impact")
    assert readers["truly_ppo_delta"] == ("truly_ppo",)
    assert readers["kl_div_threshold"] == ("impala",)


def test_each_optimizer_follows_its_own_schedule():
    cfg, _ = make_config(default_values(env="CartPole-v1", agent="impala", lr=1e-3,
                                        lr_end_value=0.0))
    agent = make_agent(cfg, env_info(cfg.env, cfg.env_options()))
    extra = torch.nn.Parameter(torch.zeros(3))
    schedule = agent.schedules["main"]
    agent.add_optimizer("extra", [extra], dataclasses.replace(schedule, lr=0.5,
                                                              lr_end_value=0.5))
    agent.update(_batch(cfg.r_f_steps, 4, 4, 2), progress=0.5)
    assert agent.optimizers["main"].param_groups[0]["lr"] == pytest.approx(5e-4)
    assert agent.optimizers["extra"].param_groups[0]["lr"] == 0.5
    state = agent.state_dict()
    assert set(state["optimizers"]) == {"main", "extra"}


def test_the_agent_flag_offers_exactly_the_registered_agents():
    from option_flags import FLAGS

    assert FLAGS["agent"].parser.enum_values == list(AGENTS)
    for name in AGENTS:
        assert f"{name} (" in FLAGS["agent"].help
