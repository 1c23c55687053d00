"""Every command-line flag, and the frozen `Config` built from them.

Flags keep the seed platform's names. A flag whose default is `None` ("auto")
takes a value that suits the observation kind of `--env` (pixels or vector), see
`AUTO_DEFAULTS`; a value given on the command line always wins. `make_config`
checks everything and returns all the problems at once; `main.py` prints them
and exits with status 2 before anything is written or started.
"""

from __future__ import annotations

import dataclasses
import math
import os

from absl import flags

from replay.config import parse_replay_parameters
from wrappers.envs import check_env_id, env_kind

FLAGS = flags.FLAGS


class _BoolParser(flags.BooleanParser):
    """true/t/1/yes/y/on and false/f/0/no/n/off, any case."""

    def parse(self, argument):
        if isinstance(argument, str):
            low = argument.strip().lower()
            if low in ("yes", "y", "on"):
                return True
            if low in ("no", "n", "off"):
                return False
        return super().parse(argument)


def _define_bool(name: str, default: bool | None, help_text: str) -> None:
    flags.DEFINE_flag(
        flags.Flag(_BoolParser(), flags.ArgumentSerializer(), name, default, help_text,
                   boolean=True)
    )


# --- general -------------------------------------------------------------------
flags.DEFINE_enum("op_mode", "train", ["train", "train_w_load", "test"],
                  "train: a new run; train_w_load: resume from --load_model_url; "
                  "test: play --test_episode_count games with a saved agent.")
flags.DEFINE_integer("seed", 0, "Seed of the learner and (offset per actor) the actors.")
flags.DEFINE_enum("device", "auto", ["auto", "cpu", "cuda"],
                  "Learner device; auto picks cuda when available. Actors always run on CPU.")
flags.DEFINE_string("load_model_url", None,
                    "Run directory or checkpoint file to resume (train_w_load) or test.")
flags.DEFINE_integer("test_episode_count", 10, "Games to play in --op_mode=test.")
flags.DEFINE_enum("test_policy", "sample", ["sample", "greedy"],
                  "Test mode: sample actions from the policy, or take the most likely one.")
_define_bool("render", False, "Test mode: show the games in a window if there is a display; "
             "headless, record the first games to test_video.mp4 in the run directory.")

# --- environment ---------------------------------------------------------------
flags.DEFINE_string("env", "PongNoFrameskip-v4",
                    "Env id: an Atari game (PongNoFrameskip-v4, ALE/Pong-v5), or a gymnasium "
                    "env with discrete actions and vector observations (CartPole-v1, "
                    "ShortCorridor-v0).")
flags.DEFINE_integer("environment_max_steps", 10_000_000,
                     "Length of the run in env steps (agent decisions, not frames).")
flags.DEFINE_integer("skipped_frames", 4, "Atari frameskip: emulator frames per env step.")
flags.DEFINE_integer("frames_stacked", 4, "Atari: observations stacked along channels.")
flags.DEFINE_integer("noop_threshold", 30, "Atari: at most this many no-ops at a reset.")
_define_bool("episodic_life", True,
             "Atari: a lost life ends the trajectory (not the game) in training.")
flags.DEFINE_float("repeat_action_probability", None,
                   "Atari sticky actions; auto: 0.25 for ALE/...-v5 ids, 0 for NoFrameskip-v4.")

# --- training ------------------------------------------------------------------
flags.DEFINE_integer("batch_size", None, "Rollouts per learner batch; auto: 8 pixels, 16 vector.")
flags.DEFINE_integer("r_f_steps", None, "Rollout length T in env steps; auto: 20.")
flags.DEFINE_enum("optimizer", None, ["rmsprop", "adam"], "auto: rmsprop pixels, adam vector.")
flags.DEFINE_float("lr", None, "Initial learning rate; auto: 6e-4 pixels (Atari, "
                   "MinAtar), 2e-3 vector.")
flags.DEFINE_float("lr_end_value", 0.0, "Learning rate at the end of the run.")
flags.DEFINE_float("lr_decay_power", 1.0, "Power of the polynomial decay (1: linear).")
flags.DEFINE_float("rmsprop_eps", 1e-5,
                   "RMSProp epsilon, added to the root of the mean square (torch). 1e-5 suits "
                   "the losses here, means over T x B; IMPALA's 0.01 was for sums.")
flags.DEFINE_float("rmsprop_alpha", 0.99, "RMSProp decay.")
flags.DEFINE_float("gradient_clip_by_norm_threshold", None,
                   "Global gradient-norm clip (of the mean-reduced losses); 0: off; auto: 0.5 "
                   "pixels (as A2C, CleanRL, Sample Factory), 40 vector (never reached).")
flags.DEFINE_integer("hidden_size", None, "Width of the last hidden layer; auto: 512 Atari, 256 "
                     "MinAtar, 64 vector.")

# --- parallelism ---------------------------------------------------------------
flags.DEFINE_integer("worker_count", None, "Actor processes; auto: the machine's core count.")
flags.DEFINE_integer("envs_per_worker", None,
                     "Envs per actor; auto: 4 Atari, 8 MinAtar and vector.")
flags.DEFINE_integer("learner_threads", None, "Torch threads of the learner; auto: core count.")
flags.DEFINE_integer("max_actor_restarts", 3,
                     "Actor deaths (exception or kill) survived by restarting the actor; one "
                     "more stops the run with a checkpoint and exit status 1.")

# --- replay --------------------------------------------------------------------
flags.DEFINE_string("replay_parameters",
                    '[{"type": "queue", "capacity": 1, "sample_ratio": 1}]',
                    "JSON list of replays; their sample_ratio values sum to 1 (README: Replays).")
flags.DEFINE_float("training_fill_in_factor", 0.05,
                   "A standard/custom replay is ready once it holds this fraction of its "
                   "capacity (and at least its share of a batch).")
_define_bool("caching", False, "Prepare batches in a background thread.")
flags.DEFINE_integer("cache_output_buffer_size", 2, "Batches prepared ahead with --caching.")
_define_bool("checkpoint_replay", False,
             "Save the contents of standard/custom replays in checkpoints (large: the log "
             "says how large at start).")
flags.DEFINE_float("clear_policy_cloning_weight", 0.0,
                   "CLEAR: weight of KL(behaviour || current) on replayed rollouts; 0: off.")
flags.DEFINE_float("clear_value_cloning_weight", 0.0,
                   "CLEAR: weight of (V - V_behaviour)^2 on replayed rollouts; 0: off.")
flags.DEFINE_float("kl_div_threshold", 0.0,
                   "LASER-style mask: steps whose KL(behaviour || current) exceeds it are "
                   "dropped from the traces and losses; 0: off.")

# --- V-trace and losses ----------------------------------------------------------
flags.DEFINE_float("gamma", 0.99, "Discount.")
flags.DEFINE_float("rho_const", 1.0, "rho_bar: clip of importance weights in the V-trace targets.")
flags.DEFINE_float("pg_rho_const", 1.0, "Clip of importance weights in the policy gradient.")
flags.DEFINE_float("c_const", 1.0, "c_bar: clip of the trace coefficients.")
flags.DEFINE_float("policy_gradient_loss_weight", 1.0, "Weight of the policy-gradient loss.")
flags.DEFINE_float("value_loss_weight", 0.5, "Weight of the baseline (value) loss.")
flags.DEFINE_float("entropy_loss_weight", 0.01, "Weight of the entropy bonus.")
_define_bool("clip_rewards", None, "Clip rewards for learning; auto: on for Atari, off else.")
_define_bool("normalize_advantages", False,
             "Scale each batch's policy-gradient advantages to mean 0, std 1. "
             "With RMSProp at the pixel defaults it collapsed Pong's policy in 25 updates.")
flags.DEFINE_enum("reward_clipping_method", "abs_one_sign",
                  ["abs_one_sign", "abs_one_clamp", "soft_asymmetric"], "How rewards are clipped.")

# --- logging -------------------------------------------------------------------
flags.DEFINE_string("results_dir", "results", "Parent of the run directories.")
flags.DEFINE_integer("save_model_period", 1000, "Checkpoint every this many learner updates.")
flags.DEFINE_integer("keep_checkpoints", 3, "Numbered checkpoints kept in the run directory.")
flags.DEFINE_float("status_interval", 5.0, "Seconds between status lines.")


ENV_KINDS = ("atari", "minatar", "vector")  # wrappers.envs.env_kind
AUTO_DEFAULTS = {
    # flag: (atari, minatar, vector)
    "batch_size": (8, 8, 16),
    "r_f_steps": (20, 20, 20),
    "optimizer": ("rmsprop", "rmsprop", "adam"),
    "lr": (6e-4, 6e-4, 2e-3),
    "hidden_size": (512, 256, 64),
    "envs_per_worker": (4, 8, 8),
    "clip_rewards": (True, True, False),
    "gradient_clip_by_norm_threshold": (0.5, 0.5, 40.0),
}


@dataclasses.dataclass(frozen=True)
class Config:
    op_mode: str
    seed: int
    device: str
    load_model_url: str | None
    test_episode_count: int
    test_policy: str
    render: bool
    env: str
    environment_max_steps: int
    skipped_frames: int
    frames_stacked: int
    noop_threshold: int
    episodic_life: bool
    repeat_action_probability: float | None
    batch_size: int
    r_f_steps: int
    optimizer: str
    lr: float
    lr_end_value: float
    lr_decay_power: float
    rmsprop_eps: float
    rmsprop_alpha: float
    gradient_clip_by_norm_threshold: float
    hidden_size: int
    worker_count: int
    envs_per_worker: int
    learner_threads: int
    max_actor_restarts: int
    replay_parameters: str
    training_fill_in_factor: float
    caching: bool
    cache_output_buffer_size: int
    checkpoint_replay: bool
    clear_policy_cloning_weight: float
    clear_value_cloning_weight: float
    kl_div_threshold: float
    gamma: float
    rho_const: float
    pg_rho_const: float
    c_const: float
    policy_gradient_loss_weight: float
    value_loss_weight: float
    entropy_loss_weight: float
    clip_rewards: bool
    normalize_advantages: bool
    reward_clipping_method: str
    results_dir: str
    save_model_period: int
    keep_checkpoints: int
    status_interval: float

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def config_fields() -> list[str]:
    return [f.name for f in dataclasses.fields(Config)]


def make_config(values: dict) -> tuple[Config | None, list[str]]:
    """A `Config` from flag values (name -> value, None for auto), and every error."""
    errors: list[str] = []
    v = dict(values)
    env_problem = check_env_id(v["env"])
    if env_problem:
        errors.append(f"--env: {env_problem}")
    kind = ENV_KINDS.index(env_kind(v["env"]))
    for name, pair in AUTO_DEFAULTS.items():
        if v.get(name) is None:
            v[name] = pair[kind]
    cores = os.cpu_count() or 1
    if v.get("worker_count") is None:
        v["worker_count"] = cores
    if v.get("learner_threads") is None:
        v["learner_threads"] = cores

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
                 "hidden_size", "lr", "save_model_period", "status_interval",
                 "test_episode_count", "keep_checkpoints", "cache_output_buffer_size"):
        positive(name)
    for name in ("noop_threshold", "max_actor_restarts", "lr_end_value",
                 "gradient_clip_by_norm_threshold", "value_loss_weight",
                 "entropy_loss_weight", "policy_gradient_loss_weight",
                 "clear_policy_cloning_weight", "clear_value_cloning_weight", "kl_div_threshold"):
        if v[name] < 0:
            errors.append(f"--{name}: must be >= 0, got {v[name]}")
    if not 0 <= v["gamma"] <= 1:
        errors.append(f"--gamma: must be in [0, 1], got {v['gamma']}")
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
    if not 0 <= v["seed"] < 2**30:
        errors.append(f"--seed: must be in [0, 2**30), got {v['seed']}")
    rap = v.get("repeat_action_probability")
    if rap is not None and not 0 <= rap < 1:
        errors.append(f"--repeat_action_probability: must be in [0, 1), got {rap}")
    if v["op_mode"] in ("train_w_load", "test") and not v.get("load_model_url"):
        errors.append(f"--load_model_url: required with --op_mode={v['op_mode']}; "
                      "give a run directory or a checkpoint.pt")
    _, replay_errors = parse_replay_parameters(
        v["replay_parameters"], v["batch_size"] if v["batch_size"] > 0 else 0
    )
    errors.extend(f"--replay_parameters: {e}" for e in replay_errors)
    if errors:
        return None, errors
    return Config(**{name: v[name] for name in config_fields()}), []


def default_values(**overrides) -> dict:
    """The flags' defaults (None for auto), updated with `overrides`: a Config's
    worth of values for code that does not parse a command line (bench, sweeps)."""
    values = {name: FLAGS[name].default for name in config_fields()}
    unknown = set(overrides) - set(values)
    if unknown:
        raise KeyError(f"unknown flags {sorted(unknown)}")
    return {**values, **overrides}


# Never taken from a checkpoint: they say what this invocation does.
PER_INVOCATION = ("op_mode", "load_model_url", "test_episode_count", "test_policy", "render",
                  "results_dir")


def merge_saved(values: dict, explicit: set[str], saved: dict) -> dict:
    """Flag priority: given on the command line (`explicit`; multi_train.py passes its
    overrides there too) > saved in the checkpoint (`saved`) > defaults (`values`)."""
    merged = dict(values)
    for name, value in saved.items():
        if name in merged and name not in explicit and name not in PER_INVOCATION:
            merged[name] = value
    return merged


def flag_values() -> tuple[dict, set[str]]:
    """The parsed absl flags that make a Config, and the names given on the command
    line (call after absl parsed argv)."""
    names = config_fields()
    return ({name: FLAGS[name].value for name in names},
            {name for name in names if FLAGS[name].present})
