"""Every command-line flag, declared once: its name, kind, default, enum choices,
section and help text.

This table is the one home of each flag. `option_flags.py` defines an absl flag per
entry (what `--helpfull` prints and `option_flags.default_values()` returns come from
here), and `training/config.py` makes a field of the frozen `Config` per entry, in
this order, typed by `FlagSpec.annotation`. A new flag is one more entry here, plus
the code that reads it and `make_config`'s checks of its value;
tests/test_flag_spec.py checks that the three agree.

A default of None is "auto": `training.config.make_config` fills in a value that
suits the env's family (`wrappers.envs.FAMILIES`) unless the command line gives one.
The sections group the flags for readers of this file and nothing else. Pure Python
(no absl, no torch; `--agent`'s choices and help come from agents/registry.py's
table), so anything may import it.
"""

from __future__ import annotations

import dataclasses

from agents.precision import PRECISIONS
from agents.registry import AGENTS, agents_help
from replay.presets import PRESETS

KINDS = {"bool": bool, "int": int, "float": float, "str": str, "enum": str}


@dataclasses.dataclass(frozen=True)
class FlagSpec:
    """One flag. `default` None means auto (or, for a few, unset: `--load_model_url`,
    `--stop_at_return`, `--replays`...); `choices` only for kind "enum". `read_when`:
    (another flag, the values of it, lower-case, under which this one is read), so
    that giving it otherwise is an error; None: always read (a flag only some agents
    read is listed by their entries in agents/registry.py instead)."""

    name: str
    kind: str  # a KINDS key
    default: bool | int | float | str | None
    help: str
    choices: tuple[str, ...] | None = None
    section: str = ""
    read_when: tuple[str, tuple[str, ...]] | None = None

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"{self.name}: kind {self.kind!r} is not one of {list(KINDS)}")
        if (self.choices is not None) != (self.kind == "enum"):
            raise ValueError(f"{self.name}: choices go with kind 'enum', and only with it")
        if self.default is not None:
            if self.kind == "enum" and self.default not in self.choices:
                raise ValueError(f"{self.name}: default {self.default!r} is not a choice")
            if type(self.default) is not KINDS[self.kind]:  # True is no int, 1 no float
                raise ValueError(f"{self.name}: default {self.default!r} is no {self.kind}")

    @property
    def annotation(self) -> str:
        """The type of the `Config` field: "int", "float | None"..."""
        name = KINDS[self.kind].__name__
        return name if self.default is not None else f"{name} | None"


RAY = ("backend", ("ray",))  # read only with --backend=ray


def _bool(name: str, default: bool | None, help: str) -> FlagSpec:
    return FlagSpec(name, "bool", default, help)


def _int(name: str, default: int | None, help: str, **kw) -> FlagSpec:
    return FlagSpec(name, "int", default, help, **kw)


def _float(name: str, default: float | None, help: str, **kw) -> FlagSpec:
    return FlagSpec(name, "float", default, help, **kw)


def _str(name: str, default: str | None, help: str, **kw) -> FlagSpec:
    return FlagSpec(name, "str", default, help, **kw)


def _enum(name: str, default: str | None, choices: tuple[str, ...], help: str, **kw
          ) -> FlagSpec:
    return FlagSpec(name, "enum", default, help, choices=choices, **kw)


def _section(section: str, *specs: FlagSpec) -> tuple[FlagSpec, ...]:
    return tuple(dataclasses.replace(spec, section=section) for spec in specs)


FLAG_SPECS: tuple[FlagSpec, ...] = (
    *_section(
        "general",
        _enum("agent", None, tuple(AGENTS),  # agents/registry.py
              f"The learner's algorithm: {agents_help()}; auto: ppo on Atari, ViZDoom, Box2D and "
              "continuous actions, impala else. Cannot change on resume."),
        _enum("op_mode", "train", ("train", "train_w_load", "test"),
              "train: a new run; train_w_load: resume from --load_model_url; test: play "
              "--test_episode_count games with a saved agent."),
        _int("seed", 0, "Seed of the learner and (offset per actor) the actors."),
        _enum("device", "auto", ("auto", "cpu", "cuda"),
              "Learner device; auto picks cuda when available. Actors always run on CPU."),
        _enum("precision", "auto", PRECISIONS,
              "The learner's compute dtype: bf16 runs its convolutions and matrix products "
              "in bfloat16 (autocast; weights, log-probabilities, ratios, advantages and "
              "losses stay float32), fp32 none; auto: fp32 (bf16 trained Pong's learner up to "
              "1.85x as fast on a CPU with AMX but learned slower per frame; the log says "
              "why). For the actor-critic agents; sac, td3 and ddpg train in fp32 (docs: "
              "design-notes.md, The learner's compute)."),
        _str("load_model_url", None,
             "Run directory or checkpoint file to resume (train_w_load) or test."),
        _int("test_episode_count", 10, "Games to play in --op_mode=test."),
        _enum("test_policy", "sample", ("sample", "greedy"),
              "Test mode: sample actions from the policy, or take the most likely one."),
        _bool("render", False,
              "Test mode: show the games in a window if there is a display; headless, record the "
              "first games to test_video.mp4 in the run directory."),
        _enum("video_format", "mp4", ("mp4", "gif"),
              "--render without a display: the recording's format, test_video.mp4 (OpenCV) or "
              "test_video.gif (Pillow: a looping animation for web pages).",
              read_when=("render", ("true",))),
    ),
    *_section(
        "environment",
        _str("env", "PongNoFrameskip-v4",
             "Env id: an Atari game (PongNoFrameskip-v4, ALE/Pong-v5), or a gymnasium env with "
             "discrete actions and vector observations (CartPole-v1, ShortCorridor-v0)."),
        _int("environment_max_steps", None,
             "Length of the run in env steps (agent decisions, not frames); auto: 10M, 1M for "
             "sac/td3/ddpg (CleanRL's MuJoCo budget)."),
        _float("stop_at_return", None,
               "Stop the run (with a checkpoint, exit 0) once the mean return of the last "
               "--stop_window training episodes reaches this; unset: run the whole budget."),
        _int("stop_window", 100, "Episodes averaged for --stop_at_return (1-100)."),
        _int("skipped_frames", 4, "Atari frameskip: emulator frames per env step."),
        _int("frames_stacked", 4, "Atari: observations stacked along channels."),
        _int("noop_threshold", 30, "Atari: at most this many no-ops at a reset."),
        _bool("episodic_life", True,
              "Atari: a lost life ends the trajectory (not the game) in training."),
        _float("repeat_action_probability", None,
               "Atari sticky actions; auto: 0.25 for ALE/...-v5 ids, 0 for NoFrameskip-v4."),
    ),
    *_section(
        "training",
        _int("batch_size", None,
             "Rollouts per learner batch (per learner with --learner_count); auto: impala 8 "
             "pixels, 16 discrete vectors, 32 continuous; ppo agents 8 on Atari and "
             "HalfCheetah, 16 Box2D discrete, 32 else."),
        _int("r_f_steps", None,
             "Rollout length T in env steps; auto: 20; 128 for ppo agents on Atari; 64 "
             "continuous and for ppo agents on Box2D discrete."),
        _enum("optimizer", None, ("rmsprop", "adam"),
              "auto: rmsprop for impala on pixels (Atari, MinAtar), else adam."),
        _float("lr", None,
               "Initial learning rate; auto: impala 6e-4 pixels, 2e-3 discrete vectors, 3e-4 "
               "continuous; ppo agents 2.5e-4, 3e-4 Box2D discrete and continuous, 2.0633e-5 "
               "HalfCheetah."),
        _float("lr_end_value", None,
               "Learning rate at the end of the run (the schedule decays from --lr to it over "
               "--environment_max_steps); auto: --lr (constant) for ppo agents on Atari, ViZDoom "
               "and HalfCheetah and for sac, td3 and ddpg, so the budget does not change the "
               "run, else 0."),
        _float("lr_decay_power", 1.0, "Power of the polynomial decay (1: linear)."),
        _float("rmsprop_eps", 1e-5,
               "RMSProp epsilon, added to the root of the mean square (torch). 1e-5 suits the "
               "losses here, means over T x B; IMPALA's 0.01 was for sums."),
        _float("rmsprop_alpha", 0.99, "RMSProp decay."),
        _float("adam_eps", None,
               "Adam epsilon; auto: 1e-5 for ppo and truly_ppo (CleanRL, Sample Factory), 1e-8 "
               "(torch's) for impala."),
        _float("gradient_clip_by_norm_threshold", None,
               "Global gradient-norm clip (of the mean-reduced losses); 0: off. auto: 0.5 as "
               "A2C, CleanRL and Sample Factory, 0.8 for ppo on HalfCheetah."),
        _int("hidden_size", None,
             "Width of the last hidden layer; auto: 512 Atari, 256 MinAtar and for ppo on "
             "HalfCheetah, 64 vector."),
        _enum("mlp_activation", None, ("tanh", "relu"),
              "Nonlinearity of the MLP torsos (vector observations); auto: tanh (CleanRL's), "
              "relu for ppo on HalfCheetah (rl-baselines3-zoo's tuned net). Fixed for a run."),
        _bool("mlp_shared_torso", False,
              "One MLP torso for the policy and the value heads instead of two (vector "
              "observations; docs: agents.md, Continuous control). Fixed for a run."),
        _float("log_std_init", None,
               "Box actions: the Gaussian's first log-std (a learned parameter, one per "
               "dimension); auto: 0 (std 1), -2 for ppo on HalfCheetah (std 0.14, "
               "rl-baselines3-zoo's)."),
        _bool("use_lstm", None,
              "An LSTM core after the torso (TorchBeast's flag): the actors carry its state per "
              "env and store it with each rollout; the learner unrolls it over T from the stored "
              "state; auto: on for ViZDoom (Sample Factory's), else off. Fixed for a run."),
        _int("lstm_size", None, "Width of the LSTM core (--use_lstm); auto: 512 ViZDoom, else "
             "128. Fixed for a run.",
             read_when=("use_lstm", ("true",))),
    ),
    *_section(
        "parallelism",
        _int("worker_count", None, "Actor processes; auto: the machine's core count."),
        _int("envs_per_worker", None,
             "Envs per actor; auto: 4 Atari and for ppo on HalfCheetah, 8 else."),
        _int("learner_threads", None,
             "Torch threads of each learner; auto: the core count over --learner_count (1 for "
             "the off-policy agents)."),
        _int("learner_count", 1,
             "Data-parallel learners (ranks) of the policy, each a process with its share of "
             "the --worker_count actors, its own replays and batch of --batch_size rollouts: "
             "they average their gradients and take identical steps, one learner on N x "
             "--batch_size (docs: more-than-one-machine.md)."),
        _str("learner_devices", None,
             "--learner_count: the device of each rank, comma-separated (cuda:0,cuda:1,...: "
             "NCCL; cpu: gloo); unset: --device, its GPUs taken in turn (cuda:rank modulo "
             "the count)."),
        _float("learner_timeout", 120.0,
               "--learner_count > 1: seconds a rank waits for the others at a collective "
               "(and at start-up) before the run stops with status 1; bounds how long a hung "
               "rank holds the others. Not while rank 0 evaluates the final policy or writes "
               "a checkpoint alone: the others wait for that as long as it takes."),
        _int("queued_batches", None,
             "Rollout slots: the envs' own plus this many batches of finished rollouts that wait "
             "for the learner (the actors pause when they are all full), so a learner slower "
             "than the envs trains on rollouts this many updates old (Sample Factory's "
             "num_batches_to_accumulate); auto: 1 for ppo on HalfCheetah, else no such bound: 2 "
             "x (envs + batch) slots in all."),
        _int("max_actor_restarts", 3,
             "Actor deaths (exception or kill) survived by restarting the actor; one more stops "
             "the run with a checkpoint and exit status 1."),
        # where and how the actors run
        _enum("backend", "local", ("local", "ray"),
              "Where the actors run: local processes with shared-memory rollouts, or Ray actors "
              "(docs: more-than-one-machine.md)."),
        _bool("serial", False,
              "Step the actors inline in the learner's process in a fixed order (Sample "
              "Factory's serial mode): with the same --seed a run repeats bit for bit on the "
              "same machine. Slower than actor processes; for tests and debugging."),
        _int("serial_policy_lag", 0,
             "--serial: the actors act with the weights of this many learner updates before the "
             "newest, a fixed policy lag that repeats bit for bit (to study what the "
             "asynchronous lag does: docs, design-notes.md); 0: none."),
        _str("ray_address", "",
             "--backend=ray: empty starts a local Ray instance; 'auto' or host:port joins a "
             "running cluster.", read_when=RAY),
        _int("max_policy_lag", 100,
             "--backend=ray: rollouts acted by weights more than this many learner updates old "
             "are dropped (and counted); 0: never.", read_when=RAY),
        _int("ray_in_flight", 1,
             "--backend=ray: rollout requests outstanding per actor. 1: each rollout starts from "
             "the newest weights (CartPole, 5 seeds: all reached 475; with 2, 4 of 5); more "
             "hides network round trips.", read_when=RAY),
        _float("ray_actor_timeout", 120.0,
               "--backend=ray: seconds the Ray actors may take to start (60 at least; else the "
               "run stops with status 1), and a Ray actor may return no rollout (unavailable "
               "while Ray restarts it, or its node gone with no other to place it) before it "
               "counts as a death toward --max_actor_restarts; bounds how long a run waits.",
               read_when=RAY),
        _enum("ray_actor_node", None, ("any", "learner"),
              "--backend=ray: where the Ray actors run: 'any' node of the cluster Ray picks, or "
              "the 'learner' rank's own node (Ray's node affinity: rollouts never cross the "
              "network; the node needs a CPU per actor); auto: learner under torchrun, any "
              "else.", read_when=RAY),
        _int("ray_weights_every", 1,
             "--backend=ray: put the weights into Ray's object store every this many learner "
             "updates.", read_when=RAY),
    ),
    *_section(
        "replay",
        _str("replay_parameters", None,
             "JSON list of replays; their sample_ratio values sum to 1 (docs: replays.md); "
             "auto: a queue, or for sac/td3/ddpg a standard replay of 1M transitions "
             "(1M / --r_f_steps rollouts)."),
        # make_config writes the named mix's JSON into replay_parameters
        _enum("replays", None, tuple(PRESETS),
              "A named mix instead of --replay_parameters (replay/presets.py): queue; standard, "
              "elite1-4, elite_cos, elite_kl, attentive, elite_insertion take half of each batch "
              "from a replay of 1000 rollouts."),
        _float("training_fill_in_factor", None,
               "A standard/custom replay is ready once it holds this fraction of its capacity "
               "(and at least its share of a batch); auto: 0.05, 0 for sac/td3/ddpg (they "
               "wait for --learning_starts)."),
        _bool("caching", False, "Prepare batches in a background thread."),
        _int("cache_output_buffer_size", 2, "Batches prepared ahead with --caching."),
        _bool("checkpoint_replay", False,
              "Save the contents of standard/custom replays in checkpoints (large: the log says "
              "how large at start)."),
        _float("clear_policy_cloning_weight", 0.0,
               "CLEAR: weight of KL(behaviour || current) on replayed rollouts; 0: off."),
        _float("clear_value_cloning_weight", 0.0,
               "CLEAR: weight of (V - V_behaviour)^2 on replayed rollouts; 0: off."),
        _float("kl_div_threshold", 0.0,
               "LASER-style mask: steps whose KL(behaviour || current) exceeds it are dropped "
               "from the traces and losses; 0: off."),
    ),
    *_section(
        "PPO and Truly PPO (--agent=ppo / truly_ppo)",
        _int("ppo_epochs", None,
             "Passes over each batch; auto: 4, 3 for ppo agents on Atari, 10 continuous, 20 "
             "HalfCheetah."),
        _int("ppo_minibatches", None,
             "Minibatches per pass; at most --batch_size with --ppo_shuffle=rollouts; auto: 4, "
             "32 continuous, 16 Box2D discrete, 8 HalfCheetah."),
        _enum("ppo_shuffle", None, ("rollouts", "steps"),
              "What a minibatch is made of: whole rollouts (Sample Factory's way; needed by "
              "--use_lstm) or steps drawn from every rollout (CleanRL's and SB3's way, "
              "feed-forward only); auto: steps for ppo agents on Atari, Box2D discrete "
              "(LunarLander-v3), HalfCheetah and the continuous family (Box actions outside "
              "MuJoCo), else rollouts (MuJoCo included; and with --use_lstm)."),
        _float("ppo_clip", None,
               "ppo: clip of the probability ratio; auto: 0.1 pixels, 0.2 vector (CleanRL's "
               "Atari and CartPole values)."),
        _float("ppo_value_clip", None,
               "Clip of the value change per batch in the value loss; 0: off; auto: 0.1 for "
               "truly_ppo with clipped rewards (the paper's Atari value), else 0 (on CartPole's "
               "unclipped returns 0.1 slowed truly_ppo)."),
        _float("gae_lambda", None,
               "GAE(lambda) of the ppo advantages; auto: 0.95, 0.98 for ppo agents on Box2D "
               "discrete."),
        _enum("gae_values", None, ("learner", "actor"),
              "Whose V(x_t) the GAE advantages read: the learner's, recomputed once per batch "
              "with the current weights (one forward pass over the batch), or the actor's, "
              "stored with each step by the behaviour weights, about one update old "
              "(CleanRL's and RLlib's way; no pass: about 15% of a Pong update alone, but "
              "no faster in a 2-core run, where the learner then waits for the actors); "
              "auto: learner. V-trace advantages always recompute."),
        # a made Config holds gae or vtrace (make_config resolves auto)
        _enum("ppo_advantage", "auto", ("auto", "gae", "vtrace"),
              "Advantages of ppo/truly_ppo; auto: gae when the queue is the only replay, vtrace "
              "when replays other than the queue (off-policy data) are mixed in; always vtrace "
              "for impact."),
        _float("truly_ppo_delta", 0.0008,
               "truly_ppo: KL(behaviour || current) bound of the trust region (the paper's Atari "
               "value)."),
        _float("truly_ppo_alpha", 20.0,
               "truly_ppo: slope of the KL rollback outside the trust region (the paper's Atari "
               "value)."),
        # --agent=impact
        _int("impact_target_update", 1,
             "impact: refresh the target network from the model every this many learner updates "
             "(batches); 1: the policy at the start of each batch, as PPO's old policy."),
    ),
    *_section(
        "off-policy agents (sac, td3, ddpg)",
        _float("replay_ratio", None,
               "Gradient updates per env step (SB3's gradient_steps / train_freq, Reverb's "
               "samples per insert), held by a rate limiter: the actors wait when the learner "
               "falls behind, the learner when no new env steps came; auto: 1."),
        _int("learning_starts", None,
             "Env steps of uniform random actions before the first update (CleanRL's); auto: "
             "5000 for sac, 25000 for td3 and ddpg. The first update also waits for a batch "
             "of --batch_size distinct rollouts (--batch_size x --r_f_steps env steps: 2048 "
             "with the defaults); env steps taken while the replay cannot give one (that "
             "fill, or a resume's refill without --checkpoint_replay) owe no updates."),
        _int("n_step", 1,
             "Steps of reward summed before bootstrapping (within a rollout and an episode)."),
        _float("tau", 0.005, "Polyak averaging of the target networks: target += tau x "
               "(online - target)."),
        _float("q_lr", None, "The critics' learning rate (--lr is the actor's); auto: 1e-3 "
               "for sac, 3e-4 for td3 and ddpg."),
        _int("policy_frequency", None,
             "Update the actor every this many batches (TD3's delay; sac then makes as many "
             "actor steps, as CleanRL does); auto: 2."),
        _int("target_network_frequency", 1,
             "sac: move the target critics every this many batches."),
        _bool("autotune", True,
              "sac: tune the entropy weight alpha towards a target entropy of -|A|; false: "
              "the fixed --alpha."),
        _float("alpha", 0.2, "sac: the entropy weight when --autotune is false."),
        _float("policy_noise", 0.2,
               "td3: std of the target policy smoothing noise, a fraction of the action "
               "range's half-width."),
        _float("noise_clip", 0.5,
               "td3: the smoothing noise is clipped to +-this fraction of the half-width."),
        _float("exploration_noise", 0.1,
               "td3, ddpg: std of the actors' Gaussian exploration noise, a fraction of the "
               "half-width (--test_policy=greedy and the evaluator use none)."),
    ),
    *_section(
        "V-trace and losses",
        _float("gamma", None,
               "Discount; auto: 0.99, 0.999 for ppo agents on Box2D discrete (SB3 zoo's "
               "LunarLander value)."),
        _float("rho_const", 1.0, "rho_bar: clip of importance weights in the V-trace targets."),
        _float("pg_rho_const", 1.0, "Clip of importance weights in the policy gradient."),
        _float("c_const", 1.0, "c_bar: clip of the trace coefficients."),
        _float("policy_gradient_loss_weight", 1.0, "Weight of the policy-gradient loss."),
        _float("value_loss_weight", None,
               "Weight of the baseline (value) loss; auto: 0.5, 0.58096 for ppo on HalfCheetah."),
        _float("entropy_loss_weight", None,
               "Weight of the entropy bonus; auto: 0.01, but 0.03 for impala and 0 for the ppo "
               "agents on the vector family (CartPole...), 0 on continuous actions but 4.0e-4 "
               "for ppo on HalfCheetah (docs: design-notes.md, Runs that stay solved; "
               "agents.md, Continuous control)."),
        _bool("clip_rewards", None, "Clip rewards for learning; auto: on for Atari, off else."),
        _bool("normalize_advantages", None,
              "impala: divide each batch's policy-gradient advantages by their std (their mean "
              "is kept: docs, design-notes.md); auto: on for the vector family "
              "(CartPole, classic control, popgym...), else off."),
        _bool("normalize_input", None,
              "Normalise observations by running per-element mean and std, clipped to +-5 "
              "(Sample Factory's normalize_input); the statistics are published to the actors "
              "with the weights; auto: on for Atari and continuous actions (Pendulum, the "
              "Box2D and MuJoCo tasks), off for MinAtar and the discrete vector tasks. Fixed "
              "for a run."),
        _bool("normalize_returns", None,
              "Train the value head on returns normalised by their running mean and std (Sample "
              "Factory's normalize_returns); the model still outputs values in return units; "
              "auto: on for Atari, continuous actions and the vector family (CartPole, classic "
              "control, popgym...), off for MinAtar and Box2D discrete. Fixed for a run."),
        _bool("scale_rewards", False,
              "Divide the rewards the learner trains on by a running std of the discounted "
              "return (--gamma), kept by each actor (CleanRL's and SB3's NormalizeReward; "
              "wrappers/reward_scaling.py); episode returns stay raw. An alternative or a "
              "complement to --normalize_returns (docs: agents.md, Continuous control)."),
        _enum("reward_clipping_method", "abs_one_sign",
              ("abs_one_sign", "abs_one_clamp", "soft_asymmetric"), "How rewards are clipped."),
    ),
    *_section(
        "evaluation",
        _int("eval_interval", None,
             "Env steps between evaluations of the current policy on whole games by a worker of "
             "its own (eval.csv, TensorBoard eval/); 0: off; auto: --environment_max_steps / 20."),
        _int("eval_episodes", 10, "Whole games per evaluation."),
        _enum("eval_policy", "sample", ("sample", "greedy"),
              "Evaluation actions: sampled from the policy, or the most likely one."),
    ),
    *_section(
        "several policies",
        _int("num_policies", 1,
             "Policies trained at once on the shared actors, each by a learner of its own "
             "(Sample Factory's name): actor i acts for policy i mod K, so --worker_count must "
             "be a multiple of K. Their files go to policy_<k>/ in the run directory."),
        _str("policy_overrides", None,
             "A JSON list of --num_policies objects of per-policy flag values, e.g. "
             "'[{\"agent\": \"sac\"}, {\"agent\": \"ppo\", \"lr\": 3e-4}]'; a flag not "
             "given there is the command line's (or its auto value for that policy's agent). "
             "The env, the actors, the rollout length and the run's budget cannot differ."),
        _bool("share_experience", False,
              "Every policy's rollouts also go to one shared replay: each policy's 'standard' "
              "entries of --replay_parameters sample it (by their sample_ratio) instead of a "
              "replay of their own."),
        _str("weight_sync", None,
             "Wheeler's weight sync, a JSON object: {\"from\": 0, \"to\": [1, 2], "
             "\"every_updates\": 100, \"exclude\": [\"<name prefix>\", ...], \"rename\": "
             "{\"<name prefix>\": \"<its name in the target>\"}}: every that many updates of "
             "policy 'from', its acting model's parameters and buffers but the excluded ones "
             "are copied into those of the policies 'to' (docs: several-policies.md)."),
        _bool("with_pbt", False,
              "Population-based training over the --num_policies policies (Sample Factory's "
              "rules; pbt.csv in the run directory)."),
        _int("pbt_period_env_steps", 1_000_000,
             "PBT looks at a policy each time its own env steps pass this many more."),
        _float("pbt_replace_fraction", 0.3,
               "PBT: the best and the worst ceil(fraction x K) policies by their objective (the "
               "mean return of their last 100 training episodes)."),
        _float("pbt_replace_reward_gap", 0.1,
               "PBT: a worst policy copies a best one only if the objective gap, relative to "
               "the best one's, is above this..."),
        _float("pbt_replace_reward_gap_absolute", 1e-6, "...and its absolute value above this."),
        _float("pbt_mutation_rate", 0.15, "PBT: the chance that each hyperparameter is perturbed."),
        _float("pbt_perturb_min", 1.1,
               "PBT: a perturbed hyperparameter is multiplied or divided by a factor drawn "
               "uniformly between this..."),
        _float("pbt_perturb_max", 1.5, "...and this."),
        _str("pbt_mutate", None,
             "PBT: the hyperparameters it perturbs, comma-separated float flags the policies' "
             "agent reads (lr, entropy_loss_weight, value_loss_weight, ppo_clip, q_lr, alpha, "
             "tau, gamma...); auto: lr,entropy_loss_weight, and lr,q_lr for sac/td3/ddpg."),
        _int("policy_index", None,
             "--op_mode=test: the policy to play; auto: the best by its last evaluation (by its "
             "mean-100 training return where none was evaluated)."),
    ),
    *_section(
        "logging",
        _str("results_dir", "results", "Parent of the run directories."),
        _int("save_model_period", None, "Checkpoint every this many learner updates; auto: "
             "1000, 50,000 for sac/td3/ddpg (an update per env step)."),
        _int("keep_checkpoints", 3, "Numbered checkpoints kept in the run directory."),
        _float("status_interval", 5.0, "Seconds between status lines."),
        _int("learner_csv_interval", None,
             "Learner updates per learner.csv row (each row: their means, the lag's max; a "
             "row at each checkpoint too); auto: 1, 100 for sac/td3/ddpg (an update per env "
             "step: 10,000 rows per 1M env steps, as CleanRL logs its losses every 100)."),
    ),
)

SPECS_BY_NAME: dict[str, FlagSpec] = {spec.name: spec for spec in FLAG_SPECS}
if len(SPECS_BY_NAME) != len(FLAG_SPECS):
    raise ValueError("a flag is declared twice in FLAG_SPECS")
