"""The agent registry: one table from `--agent` to everything the rest of the
platform needs to know about an algorithm.

    entry = AGENTS[cfg.agent]
    model = entry.build_model(model_spec(info, cfg.to_dict()))
    agent = entry.cls.from_config(model, cfg, device)

A new agent is one file in `agents/` (a subclass of `agents.agent.Agent` with a
`from_config` class method and `stat_names`) plus one entry here: `--agent`'s
choices and help text come from this table too (training/flag_spec.py). The table
imports no torch (an entry names its class, imported when first used), so the flag
declarations can read it. The flags only
some agents read are listed by the entries that read them: `training/config.py`
refuses such a flag given to another agent. An env family keeps auto values for two
kinds of agent (`wrappers.envs.EnvFamily.auto_values`): an entry names the kind it
takes (`family_defaults`). An `--agent` that is not here is an error, never a
silent default.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Mapping

# the weights of an actor-critic loss's value and entropy terms (not the off-policy
# agents': their critics and temperature have flags of their own)
LOSS_FLAGS = ("value_loss_weight", "entropy_loss_weight")
# the flags of the ppo family's loop (agents/ppo.py), and those of one agent alone
PPO_FLAGS = LOSS_FLAGS + ("ppo_epochs", "ppo_minibatches", "ppo_clip", "ppo_value_clip",
                          "gae_lambda", "ppo_advantage", "ppo_shuffle", "gae_values")
TRULY_PPO_FLAGS = ("truly_ppo_delta", "truly_ppo_alpha")
IMPALA_FLAGS = LOSS_FLAGS + ("pg_rho_const", "policy_gradient_loss_weight", "normalize_advantages",
                "kl_div_threshold", "clear_policy_cloning_weight", "clear_value_cloning_weight")
IMPACT_FLAGS = ("impact_target_update",)
# the off-policy agents' (agents/off_policy.py): the rate limiter's and the loop's
OFF_POLICY_FLAGS = ("replay_ratio", "learning_starts", "n_step", "tau", "q_lr")
SAC_FLAGS = ("policy_frequency", "target_network_frequency", "autotune", "alpha")
TD3_FLAGS = ("policy_frequency", "policy_noise", "noise_clip", "exploration_noise")
# CleanRL's sac/td3/ddpg_continuous_action values, where the env family's would differ
# (its MLPs, Adam with torch's eps, no clip, no normalisation, a constant lr); the
# replay: `standard`, 1M transitions (training/config.py)
OFF_POLICY = dict(batch_size=256, r_f_steps=8, envs_per_worker=1, optimizer="adam",
                  lr=3e-4, adam_eps=1e-8, hidden_size=256, mlp_activation="relu",
                  gradient_clip_by_norm_threshold=0.0, normalize_input=False,
                  normalize_returns=False, clip_rewards=False, gamma=0.99,
                  training_fill_in_factor=0.0, replay_ratio=1.0,
                  environment_max_steps=1_000_000, save_model_period=50_000,
                  learner_csv_interval=100, pbt_mutate="lr,q_lr")
# the hyperparameters PBT perturbs by default for the actor-critic agents
ON_POLICY = {"pbt_mutate": "lr,entropy_loss_weight"}


def _load(path: str):
    module, name = path.split(":")
    return getattr(importlib.import_module(module), name)


@dataclasses.dataclass(frozen=True)
class AgentEntry:
    path: str  # "module:Class" of its agents.agent.Agent subclass (with from_config)
    summary: str  # what --agent's help says of it
    flags: tuple[str, ...]  # the agent-specific flags it reads
    # which of an env family's auto tables it takes: "impala", "ppo" or "off_policy"
    # (the family's values every agent takes, `wrappers.envs.EnvFamily.auto_values`)
    family_defaults: str
    defaults: Mapping[str, object]  # its auto flag values on every env family (they win)
    # action kind of the env (EnvInfo.action_kind) -> its policy's distribution
    # (a key of agents.distributions.DISTRIBUTIONS); a kind not here is refused
    distributions: Mapping[str, str] = dataclasses.field(
        default_factory=lambda: {"discrete": "discrete", "box": "box"})
    # "module:function" building its model from an agents.model_spec.ModelSpec; "": the
    # spec's actor-critic (ModelSpec.build)
    model: str = ""

    @property
    def cls(self):
        """The agent's class (imported on first use)."""
        return _load(self.path)

    def build_model(self, spec):
        """Its model for `spec` (an agents.model_spec.ModelSpec)."""
        return _load(self.model)(spec) if self.model else spec.build()


AGENTS: dict[str, AgentEntry] = {
    "impala": AgentEntry("agents.impala:ImpalaAgent", "V-trace, one step per batch",
                         IMPALA_FLAGS, "impala", {**ON_POLICY, "adam_eps": 1e-8}),
    "ppo": AgentEntry("agents.ppo:PPOAgent",
                      "APPO-style clipped surrogate, epochs x minibatches per batch",
                      PPO_FLAGS, "ppo", {**ON_POLICY, "adam_eps": 1e-5}),
    "truly_ppo": AgentEntry("agents.ppo:PPOAgent", "Truly PPO's trust-region rollback",
                            PPO_FLAGS + TRULY_PPO_FLAGS, "ppo", {**ON_POLICY, "adam_eps": 1e-5}),
    "impact": AgentEntry("agents.impact:ImpactAgent",
                         "ppo's clip against a target network, V-trace advantages",
                         PPO_FLAGS + IMPACT_FLAGS, "ppo", {**ON_POLICY, "adam_eps": 1e-5}),
    "sac": AgentEntry("agents.sac:SACAgent",
                      "soft actor-critic on transitions from a replay, Box actions",
                      OFF_POLICY_FLAGS + SAC_FLAGS, "off_policy",
                      {**OFF_POLICY, "learning_starts": 5000, "q_lr": 1e-3,
                       "policy_frequency": 2},
                      {"box": "tanh_gaussian"}, "agents.off_policy:sac_model"),
    "td3": AgentEntry("agents.td3:TD3Agent",
                      "twin delayed DDPG on transitions from a replay, Box actions",
                      OFF_POLICY_FLAGS + TD3_FLAGS, "off_policy",
                      {**OFF_POLICY, "learning_starts": 25000, "q_lr": 3e-4,
                       "policy_frequency": 2},
                      {"box": "deterministic"}, "agents.off_policy:twin_model"),
    "ddpg": AgentEntry("agents.td3:DDPGAgent",
                       "deterministic policy gradient (TD3 without its twin critics, "
                       "smoothing and delay), Box actions",
                       OFF_POLICY_FLAGS + ("exploration_noise",), "off_policy",
                       {**OFF_POLICY, "learning_starts": 25000, "q_lr": 3e-4},
                       {"box": "deterministic"}, "agents.off_policy:single_model"),
}


def agents_help() -> str:
    """The registered agents as --agent's help names them: "a (...), b (...) or c (...)"."""
    named = [f"{name} ({entry.summary})" for name, entry in AGENTS.items()]
    return ", ".join(named[:-1]) + " or " + named[-1]


def flag_readers() -> dict[str, tuple[str, ...]]:
    """Agent-specific flag -> the agents that read it."""
    readers: dict[str, tuple[str, ...]] = {}
    for name, entry in AGENTS.items():
        for flag in entry.flags:
            readers[flag] = (*readers.get(flag, ()), name)
    return readers


def off_policy(agent: str) -> bool:
    """Whether `agent` learns from transitions at a replay ratio (sac, td3, ddpg)."""
    return AGENTS[agent].family_defaults == "off_policy"


def model_spec(info: dict, flags: dict):
    """The agents.model_spec.ModelSpec of the model `flags["agent"]` acts with for an
    env's `info` (`EnvInfo` as a dict): `ModelSpec.of`, with the agent's distribution
    for the env's actions (an action kind it does not take is refused by
    training/config.py)."""
    from agents.model_spec import ModelSpec

    spec = ModelSpec.of(info, flags)
    entry = AGENTS[flags["agent"]]
    return dataclasses.replace(spec, action_kind=entry.distributions[spec.action_kind])

