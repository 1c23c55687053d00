"""Every command-line flag (absl), and the only module besides `main.py` that reads
`FLAGS`.

Flags keep the seed platform's names. A flag whose default is `None` ("auto")
takes a value that suits the family of `--env` (Atari, MinAtar, continuous or
vector), see `wrappers.envs.FAMILIES`; a value given on the command line
always wins. `training.config.make_config` turns the values into the frozen
`Config` and lists every problem; `main.py` prints them and exits with status 2
before anything is written or started. `default_values` gives a Config's worth of
values without a command line (benchmarks, tests); the `check_*` functions at the
end serve code that writes main.py command lines (sweeps).
"""

from __future__ import annotations

from absl import flags

from replay.presets import PRESETS
from training.config import config_fields

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
flags.DEFINE_enum("agent", None, ["impala", "ppo", "truly_ppo", "impact"],
                  "The learner's algorithm: impala (V-trace, one step per batch), ppo "
                  "(APPO-style clipped surrogate, epochs x minibatches per batch), truly_ppo "
                  "(Truly PPO's trust-region rollback) or impact (ppo's clip against a target "
                  "network, V-trace advantages); auto: ppo on Atari and continuous actions, "
                  "impala else. "
                  "Cannot change on resume.")
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
flags.DEFINE_float("stop_at_return", None, "Stop the run (with a checkpoint, exit 0) once the "
                   "mean return of the last --stop_window training episodes reaches this; "
                   "unset: run the whole budget.")
flags.DEFINE_integer("stop_window", 100, "Episodes averaged for --stop_at_return (1-100).")
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
flags.DEFINE_float("lr_end_value", None, "Learning rate at the end of the run (the "
                   "schedule decays from --lr to it over --environment_max_steps); auto: "
                   "--lr (constant) for ppo agents on Atari and HalfCheetah, so the budget does "
                   "not change the run, else 0.")
flags.DEFINE_float("lr_decay_power", 1.0, "Power of the polynomial decay (1: linear).")
flags.DEFINE_float("rmsprop_eps", 1e-5,
                   "RMSProp epsilon, added to the root of the mean square (torch). 1e-5 suits "
                   "the losses here, means over T x B; IMPALA's 0.01 was for sums.")
flags.DEFINE_float("rmsprop_alpha", 0.99, "RMSProp decay.")
flags.DEFINE_float("adam_eps", None, "Adam epsilon; auto: 1e-5 for ppo and truly_ppo (CleanRL, "
                   "Sample Factory), 1e-8 (torch's) for impala.")
flags.DEFINE_float("gradient_clip_by_norm_threshold", None,
                   "Global gradient-norm clip (of the mean-reduced losses); 0: off. auto: 0.5 "
                   "as A2C, CleanRL and Sample Factory (on CartPole 40, never reached, let the "
                   "policy fall back after solving), 0.8 for ppo on HalfCheetah.")
flags.DEFINE_integer("hidden_size", None, "Width of the last hidden layer; auto: 512 Atari, 256 "
                     "MinAtar and for ppo on HalfCheetah, 64 vector.")
flags.DEFINE_enum("mlp_activation", None, ["tanh", "relu"],
                  "Nonlinearity of the MLP torsos (vector observations); auto: tanh (CleanRL's), "
                  "relu for ppo on HalfCheetah (rl-baselines3-zoo's tuned net). Fixed for a run.")
_define_bool("mlp_shared_torso", False,
             "One MLP torso for the policy and the value heads instead of two (vector "
             "observations; README: Continuous control). Fixed for a run.")
flags.DEFINE_float("log_std_init", None, "Box actions: the Gaussian's first log-std (a learned "
                   "parameter, one per dimension); auto: 0 (std 1), -2 for ppo on HalfCheetah "
                   "(std 0.14, rl-baselines3-zoo's).")
_define_bool("use_lstm", False, "An LSTM core after the torso (TorchBeast's flag): the actors "
             "carry its state per env and store it with each rollout; the learner unrolls "
             "it over T from the stored state. Fixed for a run.")
flags.DEFINE_integer("lstm_size", 128, "Width of the LSTM core (--use_lstm). Fixed for a run.")

# --- parallelism ---------------------------------------------------------------
flags.DEFINE_integer("worker_count", None, "Actor processes; auto: the machine's core count.")
flags.DEFINE_integer("envs_per_worker", None,
                     "Envs per actor; auto: 4 Atari and for ppo on HalfCheetah, 8 else.")
flags.DEFINE_integer("learner_threads", None, "Torch threads of the learner; auto: core count.")
flags.DEFINE_integer("queued_batches", None,
                     "Rollout slots: the envs' own plus this many batches of finished rollouts "
                     "that wait for the learner (the actors pause when they are all full), so "
                     "a learner slower than the envs trains on rollouts this many updates old "
                     "(Sample Factory's num_batches_to_accumulate); auto: 1 for ppo on "
                     "HalfCheetah, else no such bound: 2 x (envs + batch) slots in all.")
flags.DEFINE_integer("max_actor_restarts", 3,
                     "Actor deaths (exception or kill) survived by restarting the actor; one "
                     "more stops the run with a checkpoint and exit status 1.")

flags.DEFINE_enum("backend", "local", ["local", "ray"],
                  "Where the actors run: local processes with shared-memory rollouts, or Ray "
                  "actors (README: More than one machine).")
_define_bool("serial", False,
             "Step the actors inline in the learner's process in a fixed order (Sample "
             "Factory's serial mode): with the same --seed a run repeats bit for bit on the "
             "same machine. Slower than actor processes; for tests and debugging.")
flags.DEFINE_integer("serial_policy_lag", 0,
                     "--serial: the actors act with the weights of this many learner updates "
                     "before the newest, a fixed policy lag that repeats bit for bit (to study "
                     "what the asynchronous lag does: README, Runs that stay solved); 0: none.")
flags.DEFINE_string("ray_address", "", "--backend=ray: empty starts a local Ray instance; "
                    "'auto' or host:port joins a running cluster.")
flags.DEFINE_integer("max_policy_lag", 100, "--backend=ray: rollouts acted by weights more "
                     "than this many learner updates old are dropped (and counted); 0: never.")
flags.DEFINE_integer("ray_in_flight", 1, "--backend=ray: rollout requests outstanding per "
                     "actor. 1: each rollout starts from the newest weights (CartPole, 5 seeds: "
                     "all reached 475; with 2, 4 of 5); more hides network round trips.")
flags.DEFINE_integer("ray_weights_every", 1, "--backend=ray: put the weights into Ray's "
                     "object store every this many learner updates.")

# --- replay --------------------------------------------------------------------
flags.DEFINE_string("replay_parameters",
                    '[{"type": "queue", "capacity": 1, "sample_ratio": 1}]',
                    "JSON list of replays; their sample_ratio values sum to 1 (README: Replays).")
flags.DEFINE_enum("replays", None, list(PRESETS),
                  "A named mix instead of --replay_parameters (replay/presets.py): queue; "
                  "standard, elite1-4, elite_cos, elite_kl, attentive, elite_insertion take "
                  "half of each batch from a replay of 1000 rollouts.")
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

# --- PPO and Truly PPO (--agent=ppo / truly_ppo) ----------------------------------
flags.DEFINE_integer("ppo_epochs", None, "Passes over each batch; auto: 4, 10 continuous.")
flags.DEFINE_integer("ppo_minibatches", None, "Minibatches per pass; at most --batch_size "
                     "with --ppo_shuffle=rollouts; auto: 4, 32 continuous, 16 Box2D discrete.")
flags.DEFINE_enum("ppo_shuffle", None, ["rollouts", "steps"],
                  "What a minibatch is made of: whole rollouts (Sample Factory's way; needed "
                  "by --use_lstm) or steps drawn from every rollout (CleanRL's and SB3's way, "
                  "feed-forward only); auto: steps for ppo agents on Box2D discrete "
                  "(LunarLander-v3), HalfCheetah and the continuous family (Box actions "
                  "outside MuJoCo), else rollouts (MuJoCo included).")
flags.DEFINE_float("ppo_clip", None, "ppo: clip of the probability ratio; auto: 0.1 pixels, "
                   "0.2 vector (CleanRL's Atari and CartPole values).")
flags.DEFINE_float("ppo_value_clip", None, "Clip of the value change per batch in the value "
                   "loss; 0: off; auto: 0.1 for truly_ppo with clipped rewards (the paper's "
                   "Atari value), else 0 (on CartPole's unclipped returns 0.1 slowed truly_ppo).")
flags.DEFINE_float("gae_lambda", None, "GAE(lambda) of the ppo advantages; auto: 0.95, 0.98 "
                   "for ppo agents on Box2D discrete.")
flags.DEFINE_enum("ppo_advantage", "auto", ["auto", "gae", "vtrace"],
                  "Advantages of ppo/truly_ppo; auto: gae when the queue is the only replay, "
                  "vtrace when replays other than the queue (off-policy data) are mixed in; "
                  "always vtrace for impact.")
flags.DEFINE_float("truly_ppo_delta", 0.0008, "truly_ppo: KL(behaviour || current) bound of the "
                   "trust region (the paper's Atari value).")
flags.DEFINE_float("truly_ppo_alpha", 20.0, "truly_ppo: slope of the KL rollback outside the "
                   "trust region (the paper's Atari value).")

flags.DEFINE_integer("impact_target_update", 1, "impact: refresh the target network from the "
                     "model every this many learner updates (batches); 1: the policy at the "
                     "start of each batch, as PPO's old policy.")

# --- V-trace and losses ----------------------------------------------------------
flags.DEFINE_float("gamma", None, "Discount; auto: 0.99, 0.999 for ppo agents on Box2D "
                   "discrete (SB3 zoo's LunarLander value).")
flags.DEFINE_float("rho_const", 1.0, "rho_bar: clip of importance weights in the V-trace targets.")
flags.DEFINE_float("pg_rho_const", 1.0, "Clip of importance weights in the policy gradient.")
flags.DEFINE_float("c_const", 1.0, "c_bar: clip of the trace coefficients.")
flags.DEFINE_float("policy_gradient_loss_weight", 1.0, "Weight of the policy-gradient loss.")
flags.DEFINE_float("value_loss_weight", None, "Weight of the baseline (value) loss; auto: "
                   "0.5, 0.58096 for ppo on HalfCheetah.")
flags.DEFINE_float("entropy_loss_weight", None, "Weight of the entropy bonus; auto: 0.01, but "
                   "0.03 for impala and 0 for the ppo agents on the vector family (CartPole...), "
                   "0 on continuous actions but 4.0e-4 for ppo on HalfCheetah (README: Runs that "
                   "stay solved, Continuous control).")
_define_bool("clip_rewards", None, "Clip rewards for learning; auto: on for Atari, off else.")
_define_bool("normalize_advantages", None,
             "impala: divide each batch's policy-gradient advantages by their std "
             "(their mean is kept: README, Runs that stay solved); auto: on for the vector "
             "family (CartPole, classic control, popgym...), else off.")
_define_bool("normalize_input", None,
             "Normalise observations by running per-element mean and std, clipped to +-5 "
             "(Sample Factory's normalize_input); the statistics are published to the actors "
             "with the weights; auto: on for Atari. Fixed for a run.")
_define_bool("normalize_returns", None,
             "Train the value head on returns normalised by their running mean and std "
             "(Sample Factory's normalize_returns); the model still outputs values in return "
             "units; auto: on for Atari, continuous actions and the vector family (CartPole, "
             "classic control, popgym...), off for MinAtar and Box2D discrete. Fixed for a run.")
_define_bool("scale_rewards", False,
             "Divide the rewards the learner trains on by a running std of the discounted "
             "return (--gamma), kept by each actor (CleanRL's and SB3's NormalizeReward; "
             "wrappers/reward_scaling.py); episode returns stay raw. An alternative or a "
             "complement to --normalize_returns (README: Continuous control).")
flags.DEFINE_enum("reward_clipping_method", "abs_one_sign",
                  ["abs_one_sign", "abs_one_clamp", "soft_asymmetric"], "How rewards are clipped.")

# --- evaluation ----------------------------------------------------------------
flags.DEFINE_integer("eval_interval", None, "Env steps between evaluations of the current "
                     "policy on whole games by a worker of its own (eval.csv, TensorBoard eval/); "
                     "0: off; auto: --environment_max_steps / 20.")
flags.DEFINE_integer("eval_episodes", 10, "Whole games per evaluation.")
flags.DEFINE_enum("eval_policy", "sample", ["sample", "greedy"],
                  "Evaluation actions: sampled from the policy, or the most likely one.")

# --- logging -------------------------------------------------------------------
flags.DEFINE_string("results_dir", "results", "Parent of the run directories.")
flags.DEFINE_integer("save_model_period", 1000, "Checkpoint every this many learner updates.")
flags.DEFINE_integer("keep_checkpoints", 3, "Numbered checkpoints kept in the run directory.")
flags.DEFINE_float("status_interval", 5.0, "Seconds between status lines.")


def default_values(**overrides) -> dict:
    """The flags' defaults (None for auto), updated with `overrides`: a Config's
    worth of values for code that does not parse a command line (bench, sweeps)."""
    values = {name: FLAGS[name].default for name in config_fields()}
    unknown = set(overrides) - set(values)
    if unknown:
        raise KeyError(f"unknown flags {sorted(unknown)}")
    return {**values, **overrides}


def flag_values() -> tuple[dict, set[str]]:
    """The parsed absl flags that make a Config, and the names given on the command
    line (call after absl parsed argv)."""
    names = config_fields()
    return ({name: FLAGS[name].value for name in names},
            {name for name in names if FLAGS[name].present})


# --- checks of flag names, values and command lines for code that builds main.py's command
# lines (sweeps/spec.py): only this module reads FLAGS, and nothing here changes it
def flag_names() -> set[str]:
    """Every flag name main.py accepts (absl's own, --flagfile for one, included)."""
    return set(FLAGS)


def check_flag_value(name: str, text: str) -> str | None:
    """The parser's error for `--name=text`, or None when the flag's parser takes it."""
    try:
        FLAGS[name].parser.parse(text)
    except Exception as e:  # absl raises ValueError or flags.Error subclasses
        return str(e)
    return None


def check_command_line(args: list[str]) -> tuple[list[str], set[str]]:
    """Parse `["main.py", *args]` into a copy of FLAGS (the global flags stay as they are).

    Returns (problems, the flag names given): absl's parse error, or the arguments that are
    not flags; after a parse error no names.
    """
    import copy

    parsed = copy.deepcopy(FLAGS)
    try:
        rest = parsed(["main.py", *args])
    except Exception as e:  # absl's flags.Error
        return [str(e)], set()
    problems = []
    if len(rest) > 1:
        problems.append(f"unexpected arguments {rest[1:]}; flags look like --name=value")
    return problems, {name for name in parsed if parsed[name].present}


def _argument_groups(args: list[str]) -> list[list[str]]:
    """`args` as absl reads them: `--name value` (a flag that is not boolean, without
    `=`) is one group of two, every other argument a group of its own."""
    groups, i = [], 0
    while i < len(args):
        arg = args[i]
        name = arg.lstrip("-")
        if (arg.startswith("-") and "=" not in arg and name in FLAGS
                and not FLAGS[name].boolean and i + 1 < len(args)):
            groups.append(args[i:i + 2])
            i += 2
        else:
            groups.append([arg])
            i += 1
    return groups


def parse_command_line(argv: list[str]) -> list[str]:
    """Parse `argv` (sys.argv) into FLAGS, every argument on its own, so that one bad
    argument hides no other: the good ones are parsed, and every problem is returned,
    one message each (an unknown flag, a value its parser refuses, stray arguments)."""
    problems, stray = [], []
    for group in _argument_groups(argv[1:]):
        if group == ["--"]:
            continue
        if not group[0].startswith("-") or group[0] == "-":
            stray.append(group[0])
            continue
        try:
            FLAGS([argv[0], *group])
        except flags.Error as e:
            problems.append(str(e))
    FLAGS.mark_as_parsed()
    if stray:
        problems.append(f"unexpected arguments {stray}; flags look like --name=value (quote a "
                        "value that has spaces: --replay_parameters='[...]')")
    return problems
