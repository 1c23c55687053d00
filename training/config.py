"""The run's configuration, apart from the command line: the frozen `Config`, its
auto defaults and checks, and the flag priority of resumed runs.

`make_config(values)` takes flag values (name -> value, None for "auto": absl's in
`main.py`, `option_flags.default_values()` for benchmarks and tests), fills the auto
defaults of the env's family (`wrappers.envs.FAMILIES`), checks everything and
returns all the problems at once. The `Config` it builds also holds what is derived
from the flags once, right after the checks (as CleanRL's `Args`): the env kind, the
typed replay entries, the env count and whether actors store hidden features.
Anything that needs the env itself (shapes, slot sizes) is the run plan's
(`training/plan.py`).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import os
import re

import torch

from agents.model_spec import ModelSpec
from agents.registry import AGENTS, flag_readers, model_spec, off_policy
from replay.config import ReplaySpec, parse_replay_parameters
from replay.presets import PRESETS
from training.flag_spec import FLAG_SPECS
from wrappers.envs import EnvInfo, EnvOptions, check_env_id, family_of

DERIVED = {"derived": True}  # metadata of the fields that are not flags


class _ConfigMethods:
    """The methods of `Config` (its base: `make_dataclass` below makes the fields)."""

    def to_dict(self) -> dict:
        """The flag values (not the derived fields): flags.json and checkpoints."""
        return {name: getattr(self, name) for name in config_fields()}

    def env_options(self, training: bool = True) -> EnvOptions:
        return env_options(self.to_dict(), training)

    def model_spec(self, info: EnvInfo) -> ModelSpec:
        """The model this run trains, for the env's `info` (`agents.registry.model_spec`)."""
        return model_spec(dataclasses.asdict(info), self.to_dict())


def _derived(name: str, type_: type) -> tuple:
    return name, type_, dataclasses.field(kw_only=True, metadata=DERIVED)


Config = dataclasses.make_dataclass(
    "Config",
    # a field per flag: training/flag_spec.py's FLAG_SPECS, in their order, each typed
    # by its kind (bool, int, float, str; "| None" where the default is None)
    [(spec.name, spec.annotation) for spec in FLAG_SPECS] + [
        # derived once, right after the flags are checked (by `make_config`)
        _derived("env_kind", str),  # a FAMILIES name
        _derived("replay_specs", tuple[ReplaySpec, ...]),
        _derived("n_envs", int),  # workers x envs each
        # whether the actors write the policy's hidden layer: some replay reads it
        _derived("store_features", bool),
        # an off-policy agent (sac, td3, ddpg): transitions at --replay_ratio
        _derived("off_policy", bool),
    ],
    bases=(_ConfigMethods,),
    frozen=True,  # hashable, and picklable as training.config.Config (__module__ below)
    namespace={"__module__": __name__, "__doc__": (
        "A run's flags (a field per `training.flag_spec.FLAG_SPECS` entry) with the auto "
        "defaults filled and checked by `make_config`, and what it derives from them.")},
)


def config_fields() -> list[str]:
    """The flag names a Config holds (its fields less the derived ones)."""
    return [f.name for f in dataclasses.fields(Config) if not f.metadata.get("derived")]


def env_options(config: dict, training: bool = True) -> EnvOptions:
    """Env preprocessing from flag values (`Config.to_dict()` or a checkpoint's)."""
    return EnvOptions(
        skipped_frames=config["skipped_frames"],
        frames_stacked=config["frames_stacked"],
        noop_threshold=config["noop_threshold"],
        episodic_life=config["episodic_life"] and training,
        repeat_action_probability=config["repeat_action_probability"],
    )


def resolve_device(name: str) -> torch.device:
    """--device: "auto" is cuda when available."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(name)


def _ignored_flags(values: dict, given: set[str]) -> list[str]:
    """Flags given on the command line that this run would silently ignore: those only
    other agents read (agents/registry.py), and those whose `FlagSpec.read_when` this
    run's choice (--backend=local, --use_lstm=false...) rules out."""
    readers: dict[str, dict[str, tuple[str, ...]]] = {"agent": flag_readers()}
    for spec in FLAG_SPECS:
        if spec.read_when is not None:
            chooser, ok = spec.read_when
            readers.setdefault(chooser, {})[spec.name] = ok
    problems = []
    for chooser, read in readers.items():
        chosen = values.get(chooser)
        chosen = "local" if chosen is None else str(chosen).lower()  # a bool: true/false
        problems += [f"--{name}: only --{chooser}={' or '.join(ok)} reads it, and this run "
                     f"has --{chooser}={chosen}; leave it out or change --{chooser}"
                     for name, ok in read.items() if name in given and chosen not in ok]
    return problems


def _expand_preset(v: dict, given: set[str]) -> list[str]:
    """--replays, given: write its preset's JSON into v["replay_parameters"]. A name
    not given came from a checkpoint, whose saved replay_parameters (the preset's
    JSON when it was saved) stand as they are. A --replay_parameters given without
    --replays drops a saved name (the given mix wins); both given is an error."""
    if v.get("replays") is None:
        return []
    if "replays" not in given:  # a name saved in a checkpoint
        if "replay_parameters" in given:
            v["replays"] = None
        return []
    if "replay_parameters" in given:
        return ["--replays: a named mix and --replay_parameters were both given; "
                "give one of them"]
    if v["replays"] not in PRESETS:
        return [f"--replays: must be one of {', '.join(PRESETS)}, got {v['replays']!r}"]
    v["replay_parameters"] = PRESETS[v["replays"]]
    return []


def _learner_problems(v: dict) -> list[str]:
    """What is wrong with the data-parallel learners' flags."""
    n = v.get("learner_count") or 1
    errors = []
    if n > 1 and v["op_mode"] != "test" and 0 < v["worker_count"] < n:  # test: no learners
        errors.append(f"--learner_count: each of the {n} learners needs actors of its own; "
                      f"raise --worker_count to >= {n} (got {v['worker_count']})")
    devices = v.get("learner_devices")
    if devices is not None:
        names = [d.strip() for d in devices.split(",")]
        if len(names) != n:
            errors.append(f"--learner_devices: {len(names)} devices for --learner_count={n}; "
                          "give one per learner (cuda:0,cuda:1,...)")
        bad = [d for d in names if d != "cpu" and not re.fullmatch(r"cuda:\d+", d)]
        if bad:
            errors.append(f"--learner_devices: {bad[0]!r} is not cpu or cuda:<index>")
        elif any(d != "cpu" for d in names) and not torch.cuda.is_available():
            errors.append("--learner_devices: CUDA is not available on this machine; leave "
                          "the flag out (the learners then use --device)")
        elif len({d for d in names if d != "cpu"}) not in (0, len(names)):
            errors.append("--learner_devices: NCCL needs one GPU per learner, all of them "
                          "cuda:<index>, each once")
    return errors


AUTO_REPLAY = '[{"type": "queue", "capacity": 1, "sample_ratio": 1}]'
AUTO_REPLAY_OFF_POLICY = '[{"type": "standard", "capacity": CAPACITY, "sample_ratio": 1}]'


def _off_policy_problems(v: dict, replays: list[ReplaySpec]) -> list[str]:
    """What sac, td3 and ddpg cannot run with."""
    name = v["agent"]
    errors = [f"--replay_parameters: entry {i}: a 'queue' hands each rollout over once; "
              f"{name} samples transitions from a replay that keeps them: use 'standard' "
              "or 'custom'" for i, e in enumerate(replays) if e.type == "queue"]
    errors += [f"--{flag}: {name} has no {what}; leave it out" for flag, what in (
        ("use_lstm", "recurrent version"), ("normalize_input", "input normalisation"),
        ("normalize_returns", "value normalisation")) if v.get(flag)]
    if (v.get("learner_count") or 1) > 1:
        errors.append(f"--learner_count: {name} trains on one learner; leave it out")
    for flag in ("replay_ratio", "tau", "q_lr", "alpha"):
        if not v[flag] > 0:
            errors.append(f"--{flag}: must be > 0, got {v[flag]}")
    if v["tau"] > 1:
        errors.append(f"--tau: must be in (0, 1], got {v['tau']}")
    for flag in ("n_step", "policy_frequency", "target_network_frequency"):
        if v[flag] is not None and v[flag] < 1:
            errors.append(f"--{flag}: must be >= 1, got {v[flag]}")
    if name == "sac" and v["n_step"] > 1:  # agents/off_policy.py's `transitions`
        errors.append(f"--n_step: sac's n-step target would need the soft return, the "
                      f"-alpha log pi terms of the {v['n_step'] - 1} intermediate states, which "
                      "its transitions do not carry; leave --n_step out (1) with --agent=sac, "
                      "or use td3 or ddpg")
    for flag in ("learning_starts", "policy_noise", "noise_clip", "exploration_noise"):
        if v[flag] < 0:
            errors.append(f"--{flag}: must be >= 0, got {v[flag]}")
    return errors


def auto_learner_threads(agent: str | None, learners_here: int) -> int:
    """`--learner_threads` auto: this node's cores over the learners it holds; 1 for the
    off-policy agents, whose small updates lose more to waking a passive second thread than
    it gives them (docs: design-notes.md)."""
    if agent in AGENTS and off_policy(agent):
        return 1
    return max(1, (os.cpu_count() or 1) // max(1, learners_here))


def make_config(values: dict, given: set[str] = frozenset()) -> tuple[Config | None, list[str]]:
    """A `Config` from flag values (name -> value, None for auto), and every error.
    `given`: the flags named on the command line; those the `--agent`, `--backend` or
    `--use_lstm` does not read are errors."""
    v = dict(values)
    env_problem = check_env_id(v["env"])
    family = family_of(v["env"])
    if v.get("agent") is None:
        v["agent"] = family.agent
    if v["agent"] not in AGENTS:
        return None, [f"--agent: unknown agent {v['agent']!r}; one of {', '.join(AGENTS)}"]
    agent = AGENTS[v["agent"]]
    ppo = agent.family_defaults == "ppo"
    family_values = {**family.auto_values(agent.family_defaults), **agent.defaults}
    auto = {name for name in family_values if v.get(name) is None}
    for name in auto:
        v[name] = family_values[name]
    errors: list[str] = _ignored_flags(v, set(given))  # after the auto --use_lstm
    if env_problem:
        errors.append(f"--env: {env_problem}")
    if "ppo_shuffle" in auto and v.get("use_lstm"):  # an LSTM unrolls over whole rollouts
        v["ppo_shuffle"] = "rollouts"
    if "ppo_minibatches" in auto and (v["batch_size"] or 0) > 0:  # a smaller batch given
        per_rollout = (v["r_f_steps"] or 1) if v["ppo_shuffle"] == "steps" else 1
        v["ppo_minibatches"] = min(v["ppo_minibatches"], v["batch_size"] * per_rollout)
    if v.get("ppo_value_clip") is None:  # the paper's 0.1 is for Atari's clipped rewards
        v["ppo_value_clip"] = 0.1 if v["agent"] == "truly_ppo" and v["clip_rewards"] else 0.0
    if v.get("eval_interval") is None:  # 20 evaluations over the run
        v["eval_interval"] = max(1, v["environment_max_steps"] // 20) \
            if (v["environment_max_steps"] or 0) > 0 else 0
    if v.get("lr_end_value") is None:  # constant for ppo agents on Atari (and off-policy
        # agents everywhere, as CleanRL's), else decay to 0
        v["lr_end_value"] = v["lr"] if (ppo and family.ppo_constant_lr) or \
            off_policy(v["agent"]) else 0.0
    cores = os.cpu_count() or 1
    if v.get("worker_count") is None:
        v["worker_count"] = cores
    if v.get("learner_threads") is None:
        v["learner_threads"] = auto_learner_threads(v["agent"], v.get("learner_count") or 1)
    if v.get("ray_actor_node") is None:  # torchrun's ranks set "learner" (ranks/torchrun.py)
        v["ray_actor_node"] = "any"

    not_finite = [f"--{f.name}: must be a finite number, got {v[f.name]}"
                  for f in dataclasses.fields(Config)
                  if isinstance(v.get(f.name), float) and not math.isfinite(v[f.name])]
    if not_finite:  # the range checks below would be meaningless
        return None, errors + not_finite

    def positive(name: str) -> None:
        if v[name] is None or v[name] <= 0:
            errors.append(f"--{name}: must be > 0, got {v[name]}")

    for name in ("environment_max_steps", "batch_size", "r_f_steps", "worker_count",
                 "envs_per_worker", "learner_threads", "skipped_frames", "frames_stacked",
                 "hidden_size", "lstm_size", "lr", "save_model_period", "status_interval",
                 "learner_csv_interval",
                 "test_episode_count", "keep_checkpoints", "cache_output_buffer_size",
                 "ppo_epochs", "ppo_minibatches", "ppo_clip", "truly_ppo_delta", "adam_eps",
                 "impact_target_update", "learner_count", "learner_timeout",
                 "eval_episodes",
                 "ray_weights_every", "ray_in_flight", "ray_actor_timeout"):
        positive(name)
    if v.get("serial"):
        errors += [f"--serial: {why}; leave one of them out" for name, why in (
            ("backend", "the actors run inline, so --backend=ray has no actors to run"),
            ("caching", "--caching prepares batches in a thread, which --serial's fixed "
                        "order excludes")) if v.get(name) not in (None, False, "local")]
    errors += _learner_problems(v)
    if v.get("precision") == "bf16" and off_policy(v["agent"]):
        errors.append(f"--precision: {v['agent']} trains in float32 only (small MLPs, nothing "
                      "for bf16 to speed up); leave the flag out or pass fp32")
    if v["num_policies"] < 1:
        errors.append(f"--num_policies: must be >= 1, got {v['num_policies']}")
    elif v["num_policies"] == 1:
        errors += [f"--{name}: several policies' flag; add --num_policies=K (K >= 2) or "
                   "leave it out" for name in ("policy_overrides", "share_experience",
                                               "weight_sync", "with_pbt")
                   if v.get(name) not in (None, False)]
    elif v.get("backend") == "ray" and v["op_mode"] != "test":
        errors.append(f"--backend: the --num_policies={v['num_policies']} policies share local "
                      "actor processes, not Ray actors; leave --backend=ray out (or pass "
                      "--num_policies=1)")
    if v.get("queued_batches") is not None and v["queued_batches"] <= 0:
        errors.append(f"--queued_batches: must be > 0, got {v['queued_batches']}; leave it "
                      "out for the auto value")
    if v.get("serial_policy_lag") and not v.get("serial"):
        errors.append("--serial_policy_lag: a fixed lag needs the serial mode; add --serial "
                      "or leave it out")
    if v.get("backend", "local") == "ray" and importlib.util.find_spec("ray") is None:
        errors.append("--backend: ray is not installed in this environment; run "
                      "`.venv/bin/pip install -r requirements.txt` (README: More than one "
                      "machine)")
    for name in ("noop_threshold", "max_actor_restarts", "lr_end_value", "max_policy_lag",
                 "serial_policy_lag",
                 "eval_interval",
                 "gradient_clip_by_norm_threshold", "value_loss_weight",
                 "entropy_loss_weight", "policy_gradient_loss_weight",
                 "clear_policy_cloning_weight", "clear_value_cloning_weight", "kl_div_threshold",
                 "ppo_value_clip", "truly_ppo_alpha"):
        if v[name] < 0:
            errors.append(f"--{name}: must be >= 0, got {v[name]}")
    for name in ("gamma", "gae_lambda"):
        if not 0 <= v[name] <= 1:
            errors.append(f"--{name}: must be in [0, 1], got {v[name]}")
    steps = v["ppo_shuffle"] == "steps"
    minibatches = "ppo_minibatches" in agent.flags  # the ppo loop's
    if minibatches and not steps and 0 < v["batch_size"] < v["ppo_minibatches"]:
        errors.append(f"--ppo_minibatches: {v['ppo_minibatches']} minibatches of whole rollouts "
                      f"need --batch_size >= {v['ppo_minibatches']}, got {v['batch_size']}")
    if minibatches and steps and 0 < v["batch_size"] * v["r_f_steps"] < v["ppo_minibatches"]:
        errors.append(f"--ppo_minibatches: {v['ppo_minibatches']} minibatches of steps need "
                      f"--batch_size x --r_f_steps >= {v['ppo_minibatches']}, got "
                      f"{v['batch_size'] * v['r_f_steps']}")
    if minibatches and steps and v.get("use_lstm"):
        errors.append("--ppo_shuffle: minibatches of steps break the rollouts an LSTM "
                      "unrolls over; pass --ppo_shuffle=rollouts or leave out --use_lstm")
    for name in ("rho_const", "pg_rho_const", "c_const", "rmsprop_eps"):
        if v[name] <= 0:
            errors.append(f"--{name}: must be > 0, got {v[name]}")
    if not 0 <= v["training_fill_in_factor"] <= 1:
        errors.append(f"--training_fill_in_factor: must be in [0, 1], "
                      f"got {v['training_fill_in_factor']}")
    if not 0 <= v["rmsprop_alpha"] < 1:
        errors.append(f"--rmsprop_alpha: must be in [0, 1), got {v['rmsprop_alpha']}")
    if v["lr_decay_power"] <= 0:
        errors.append(f"--lr_decay_power: must be > 0, got {v['lr_decay_power']}")
    if v["lr"] > 0 and v["lr_end_value"] > v["lr"]:
        errors.append(f"--lr_end_value: {v['lr_end_value']} is above --lr={v['lr']}; "
                      "the schedule decays from lr to lr_end_value")
    if not 1 <= v["stop_window"] <= 100:
        errors.append(f"--stop_window: must be in [1, 100] (the recent returns kept), "
                      f"got {v['stop_window']}")
    if not 0 <= v["seed"] < 2**30:
        errors.append(f"--seed: must be in [0, 2**30), got {v['seed']}")
    rap = v.get("repeat_action_probability")
    if rap is not None and not 0 <= rap < 1:
        errors.append(f"--repeat_action_probability: must be in [0, 1), got {rap}")
    if v["op_mode"] in ("train_w_load", "test") and not v.get("load_model_url"):
        errors.append(f"--load_model_url: required with --op_mode={v['op_mode']}; "
                      "give a run directory or a checkpoint.pt")
    if v["agent"] == "impact" and v["ppo_advantage"] == "gae":
        errors.append("--ppo_advantage: impact's advantages are V-trace's (against the target "
                      "network); leave it out or set it to vtrace")
    errors += _expand_preset(v, set(given))
    if v.get("replay_parameters") is None:
        v["replay_parameters"] = AUTO_REPLAY_OFF_POLICY.replace(
            "CAPACITY", str(max(1, 1_000_000 // max(1, v["r_f_steps"])))) \
            if off_policy(v["agent"]) else AUTO_REPLAY
    replays, replay_errors = parse_replay_parameters(
        v["replay_parameters"], v["batch_size"] if v["batch_size"] > 0 else 0
    )
    errors.extend(f"--replay_parameters: {e}" for e in replay_errors)
    if off_policy(v["agent"]):
        errors += _off_policy_problems(v, replays)
    if errors:
        return None, errors
    if v["ppo_advantage"] == "auto":  # off-policy data wants V-trace's corrections
        v["ppo_advantage"] = "gae" if all(r.type == "queue" for r in replays) \
            and v["agent"] != "impact" else "vtrace"
    if v["ppo_advantage"] == "vtrace" and v["gae_values"] == "actor" \
            and v["op_mode"] == "train_w_load" and "gae_values" not in given:
        v["gae_values"] = "learner"  # a resumed run's saved choice, before its new mix
    if v["ppo_advantage"] == "vtrace" and v["gae_values"] == "actor":  # auto is learner
        return None, ["--gae_values: the actor's values serve GAE only, and these "
                      "advantages are V-trace's (--ppo_advantage, or replays other than "
                      "the queue); leave the flag out or pass learner"]
    return Config(**{name: v[name] for name in config_fields()},
                  env_kind=family.name, replay_specs=tuple(replays),
                  n_envs=v["worker_count"] * v["envs_per_worker"],
                  store_features=any(r.stores_hidden_features for r in replays),
                  off_policy=off_policy(v["agent"])), []



# Never taken from a checkpoint: they say what this invocation does.
PER_INVOCATION = ("op_mode", "load_model_url", "test_episode_count", "test_policy", "render",
                  "results_dir", "policy_index")


# What runs saved before a flag existed had: a checkpoint that lacks the key resumes
# with this, not with today's auto default (an old Atari run was impala, unnormalised).
SAVED_BEFORE = {"agent": "impala", "normalize_input": False, "normalize_returns": False,
                "use_lstm": False, "ppo_shuffle": "rollouts", "gae_values": "learner",
                "mlp_activation": "tanh", "log_std_init": 0.0, "mlp_shared_torso": False,
                "num_policies": 1}


def merge_saved(values: dict, explicit: set[str], saved: dict) -> dict:
    """Flag priority: given on the command line (`explicit`; multi_train.py passes its
    overrides there too) > saved in the checkpoint (`saved`; `SAVED_BEFORE` for keys
    older checkpoints lack) > defaults (`values`). A mix given anew (`--replays` or
    `--replay_parameters`) re-derives `--ppo_advantage` unless it is given too: the
    checkpoint holds the value derived from the old mix. A saved `--gae_values=actor`
    stands where the new mix keeps GAE, and becomes learner where its advantages are
    V-trace's (make_config)."""
    saved = {**SAVED_BEFORE, **saved}
    merged = dict(values)
    for name, value in saved.items():
        if name in merged and name not in explicit and name not in PER_INVOCATION:
            merged[name] = value
    if {"replays", "replay_parameters"} & explicit:  # re-derived from the new mix
        if "ppo_advantage" not in explicit:
            merged["ppo_advantage"] = "auto"
    return merged
