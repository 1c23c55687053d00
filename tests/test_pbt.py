"""PBT where it meets the agents: a retune or an exploit keeps what the agent learned
and how it trains (sac's temperature, the precision), the copy keeps its own random
streams, and each agent perturbs flags it reads (tests/test_policies.py: the rules)."""

from __future__ import annotations

import logging
import types

import pytest
import torch

from option_flags import default_values
from tests.test_policies import _learners, _Report, configs
from training.config import make_config
from training.pbt import PopulationBasedTraining
from training.policies import policy_configs, policy_zero, run_given
from wrappers.envs import env_info

SAC = dict(env="Pendulum-v1", agent="sac", num_policies=2, worker_count=2, with_pbt=True,
           pbt_mutation_rate=1.0, pbt_replace_fraction=0.5, hidden_size=16)


def _pbt(tmp_path, policies, objectives):
    info = env_info(policies[0].env, policies[0].env_options())
    learners = _learners(policies, info)
    run = types.SimpleNamespace(file=lambda name: str(tmp_path / name),
                                log=logging.getLogger("test"))
    return learners, PopulationBasedTraining(policies, learners, _Report(objectives), run)


def test_sac_keeps_its_temperature_and_precision_through_a_perturbation(tmp_path):
    policies = configs(**SAC)
    assert policies[0].pbt_mutate == "lr,q_lr"  # sac's own default: flags it reads
    learners, pbt = _pbt(tmp_path, policies, [1.0, 0.0])
    agent = learners[1].agent
    with torch.no_grad():
        agent.model.log_alpha.fill_(-1.5)  # a temperature it tuned
    agent.autocast, agent.precision_reason = torch.bfloat16, "precision bf16 (test)"
    pbt.start()  # perturbs policy 1's lr and q_lr: a retune
    retuned = learners[1].agent
    assert retuned is not agent and pbt.configs[1].q_lr != policies[1].q_lr
    assert retuned.schedules["critic"].lr == pbt.configs[1].q_lr
    assert retuned.model.log_alpha.item() == -1.5
    assert retuned.autocast is torch.bfloat16
    assert retuned.precision_reason == "precision bf16 (test)"


def test_an_exploit_copies_the_temperature_and_keeps_its_own_random_streams(tmp_path):
    policies = configs(**SAC)
    learners, pbt = _pbt(tmp_path, policies, [1.0, 0.0])
    with torch.no_grad():
        learners[0].agent.model.log_alpha.fill_(-0.7)
    own = learners[1].agent.generator.get_state()
    pbt.look(1)  # the worst: copies policy 0, then perturbs
    copy, source = learners[1].agent, learners[0].agent
    assert copy.model.log_alpha.item() == pytest.approx(-0.7)
    for name, value in source.model.state_dict().items():
        assert torch.equal(copy.model.state_dict()[name], value), name
    assert torch.equal(copy.generator.get_state(), own)
    draws = [torch.randint(0, 1 << 30, (8,), generator=a.generator) for a in (copy, source)]
    assert not torch.equal(*draws)


def test_a_ppo_exploit_keeps_the_copy_s_minibatch_order(tmp_path):
    policies = configs(env="CartPole-v1", agent="ppo", num_policies=2, worker_count=2,
                       with_pbt=True, pbt_replace_fraction=0.5, hidden_size=16)
    assert policies[0].pbt_mutate == "lr,entropy_loss_weight"
    learners, pbt = _pbt(tmp_path, policies, [1.0, 0.0])
    own = learners[1].agent.generator.get_state()
    pbt.look(1)
    assert torch.equal(learners[1].agent.generator.get_state(), own)


@pytest.mark.parametrize("agent,env", [("sac", "Pendulum-v1"), ("td3", "Pendulum-v1")])
def test_a_flag_the_agent_does_not_read_is_refused_in_pbt_mutate(agent, env):
    flags = dict(env=env, agent=agent, num_policies=2, worker_count=2, with_pbt=True,
                 pbt_mutate="lr,entropy_loss_weight")
    raw = default_values(**flags)
    values, errors = policy_zero(raw)
    cfg, more = make_config(values, given=run_given(values, set(flags)))
    assert not errors + more, errors + more
    _, problems = policy_configs(raw, set(flags), cfg)
    assert any(p.startswith(f"--pbt_mutate: {agent} does not read --entropy_loss_weight")
               for p in problems), problems
