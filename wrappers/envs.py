"""Env families: what kind of env an id names, how to check and build it, and the
auto defaults of the flags for it, in one registry (`FAMILIES`).

    family = family_of(env_id)                              # the first that matches
    env = make_batched_env(env_id, num_envs, options, seed)  # wrappers/batched.py's API
    info = env_info(env_id, options)                        # shapes, actions, frames

The families, in the order they are tried:
  * atari: `PongNoFrameskip-v4`, `ALE/Pong-v5` (wrappers/atari.py);
  * minatar: `MinAtar/Breakout-v1` and the rest of the `minatar` package
    (wrappers/gym_env.py, as pixels);
  * vizdoom: `VizdoomBasic-v1`, `VizdoomDefendCenter-v1` and ViZDoom's other
    Discrete ids (wrappers/vizdoom.py): 3D first-person pixels, an LSTM core;
  * half_cheetah: gymnasium's MuJoCo HalfCheetah (a Gaussian policy with
    rl-baselines3-zoo's tuned PPO values);
  * mujoco: gymnasium's other MuJoCo tasks (Hopper-v5, Walker2d-v5, Ant-v5...): a
    Gaussian policy, CleanRL's PPO settings;
  * continuous: any other gymnasium env with a 1-D Box action space (Pendulum-v1,
    LunarLanderContinuous-v3, BipedalWalker-v3): the same, minibatches of steps;
  * box2d_discrete: gymnasium's Box2D envs with a Discrete action space
    (LunarLander-v3);
  * vector: any other gymnasium env with a Discrete action space and a vector
    (or one-hot encoded Discrete / MultiDiscrete) observation: CartPole-v1,
    ShortCorridor-v0, popgym's tasks.
An id may name a module to import first (gymnasium's `module:EnvId` form; the module
registers its envs). The network follows the observation's shape (agents/
networks.py: Nature CNN for Atari frames, MinAtar's net for small grids, an MLP for
vectors) and the policy's distribution the action kind (agents/distributions.py).

A new family is one `EnvFamily` entry in `FAMILIES`, before the catch-all `vector`:
how to recognise its ids, check one and build its batched env, and its defaults.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Mapping

import gymnasium as gym

from wrappers import short_corridor
from wrappers.atari import AtariBatchedEnv, atari_game, looks_atari
from wrappers.batched import EnvOptions
from wrappers.gym_env import (
    GymBatchedEnv,
    action_kind,
    is_minatar,
    register_minatar,
    vector_encoder,
)
from wrappers.vizdoom import VizdoomBatchedEnv, is_vizdoom
from wrappers.vizdoom import check as _check_vizdoom

short_corridor.register()


@dataclasses.dataclass(frozen=True)
class EnvInfo:
    obs_shape: tuple[int, ...]
    obs_dtype: str  # "uint8" or "float32"
    num_actions: int  # discrete actions, or dimensions of a Box action
    kind: str  # the family's name (`family_of`)
    frames_per_step: int  # emulator frames per env step (1 for non-Atari)
    # frames stacked along obs dim 0, which consecutive observations share (Atari);
    # 0 where the channels are not a frame stack
    frame_stack: int
    action_kind: str = "discrete"  # or "box" (agents.distributions.DISTRIBUTIONS)
    # a Box's bounds per dimension (empty for discrete actions)
    action_low: tuple[float, ...] = ()
    action_high: tuple[float, ...] = ()


@dataclasses.dataclass(frozen=True)
class EnvFamily:
    name: str
    matches: Callable[[str], bool]  # env id (no module prefix) -> one of this family
    check: Callable[[str], str | None]  # env id -> None if it can be built, else why not
    # (env_id, num_envs, options, seed, render) -> a batched env (wrappers/batched.py)
    make: Callable[..., object]
    agent: str  # --agent's auto value
    defaults: Mapping[str, object]  # auto flag values, for every agent
    ppo_defaults: Mapping[str, object] = dataclasses.field(default_factory=dict)  # ppo agents'
    # Atari's preprocessing: stacks of --frames_stacked frames that the replays store once
    emulator_frames: bool = False
    # an action is repeated for --skipped_frames frames (Atari, ViZDoom): frames_per_step
    skips_frames: bool = False
    # a frame-skipping game's own frames per second: a recording, one picture per env
    # step, plays at frame_rate / frames_per_step pictures per second, in real time
    # (`playback_fps`); the others' recordings play at 30
    frame_rate: int = 30
    ppo_constant_lr: bool = False  # ppo agents keep --lr (auto --lr_end_value = --lr)
    # modules its envs import when made, besides this file's (`env_modules`)
    imports: tuple[str, ...] = ()

    def auto_values(self, kind: str) -> dict[str, object]:
        """The auto flag values for an agent of `kind` ("impala" or "ppo": its
        `agents.registry.AGENTS` entry's family_defaults): ppo agents' own before the
        family's, the family's before those every family shares (`COMMON`)."""
        return {**COMMON, **self.defaults, **(self.ppo_defaults if kind == "ppo" else {})}


# auto values every family has unless its entry says otherwise
COMMON = dict(gamma=0.99, gae_lambda=0.95, ppo_shuffle="rollouts", gae_values="learner",
              normalize_advantages=False,
              gradient_clip_by_norm_threshold=0.5, value_loss_weight=0.5,
              mlp_activation="tanh", log_std_init=0.0, training_fill_in_factor=0.05,
              environment_max_steps=10_000_000, save_model_period=1000,
              learner_csv_interval=1, use_lstm=False, lstm_size=128)


_SPACES: dict[str, tuple[gym.spaces.Space, gym.spaces.Space]] = {}  # made once per process


def _gym_spaces(env_id: str) -> tuple[gym.spaces.Space, gym.spaces.Space] | str:
    """(action space, observation space) of a registered gymnasium env, or why it
    could not be made (not remembered: a module imported later may register it)."""
    if env_id in _SPACES:
        return _SPACES[env_id]
    if env_id not in gym.envs.registry:
        return (f"unknown env {env_id!r}: use an Atari id (PongNoFrameskip-v4, ALE/Pong-v5), "
                "a MinAtar id (MinAtar/Breakout-v1) or a registered gymnasium id "
                "(CartPole-v1, Pendulum-v1, ShortCorridor-v0)")
    try:
        env = gym.make(env_id)
    except Exception as e:  # noqa: BLE001 - report any construction failure
        return f"{env_id!r} could not be created: {e}"
    _SPACES[env_id] = env.action_space, env.observation_space
    env.close()
    return _SPACES[env_id]


def _check_gym(env_id: str) -> str | None:
    spaces = _gym_spaces(env_id)
    if isinstance(spaces, str):
        return spaces
    action_space, observation_space = spaces
    if action_kind(action_space) is None:
        return (f"{env_id!r} has the action space {action_space}; Discrete and 1-D Box "
                "action spaces are supported")
    try:
        vector_encoder(observation_space)
    except ValueError as e:
        return f"{env_id!r}: {e}"
    return None


def _is_continuous(env_id: str) -> bool:
    spaces = _gym_spaces(env_id)
    return not isinstance(spaces, str) and action_kind(spaces[0]) == "box"


def _entry_point(env_id: str) -> str:
    spec = gym.envs.registry.get(env_id)
    entry = spec.entry_point if spec is not None else None
    return entry if isinstance(entry, str) else ""


def _is_half_cheetah(env_id: str) -> bool:
    """gymnasium's MuJoCo HalfCheetah (any version)."""
    return _entry_point(env_id).startswith("gymnasium.envs.mujoco.half_cheetah")


def _is_mujoco(env_id: str) -> bool:
    """One of gymnasium's MuJoCo tasks with Box actions (Hopper-v5, Ant-v5...)."""
    return _entry_point(env_id).startswith("gymnasium.envs.mujoco") and _is_continuous(env_id)


def _is_box2d(env_id: str) -> bool:
    """A discrete-action gymnasium Box2D env (LunarLander-v3); the continuous ones
    (LunarLanderContinuous-v3, BipedalWalker-v3) are matched as continuous first."""
    return _entry_point(env_id).startswith("gymnasium.envs.box2d") \
        and not _is_continuous(env_id)


def _check_atari(env_id: str) -> str | None:
    return None if atari_game(env_id) is not None else f"no Atari ROM for {env_id!r} in ale-py"


def _make_atari(env_id, num_envs, options, seed, render):
    sticky = options.repeat_action_probability
    if sticky is None:
        sticky = 0.25 if env_id.startswith("ALE/") else 0.0
    return AtariBatchedEnv(atari_game(env_id), num_envs, options, seed, sticky)


def _check_minatar(env_id: str) -> str | None:
    register_minatar()
    if env_id in gym.envs.registry:
        return None
    names = sorted(k for k in gym.envs.registry if is_minatar(k))
    return f"unknown MinAtar env {env_id!r}: one of {', '.join(names)}"


def _make_minatar(env_id, num_envs, options, seed, render):
    register_minatar()
    return GymBatchedEnv(env_id, num_envs, seed, render, pixels=True)


def _make_gym(env_id, num_envs, options, seed, render):
    return GymBatchedEnv(env_id, num_envs, seed, render)


# the mujoco and continuous families' values for every agent (the half_cheetah entry's
# for impala): CleanRL's ppo_continuous_action settings (below)
CONTINUOUS = dict(batch_size=32, r_f_steps=64, optimizer="adam", lr=3e-4, hidden_size=64,
                  envs_per_worker=8, clip_rewards=False, ppo_clip=0.2, normalize_input=True,
                  normalize_returns=True, entropy_loss_weight=0.0, ppo_epochs=10,
                  ppo_minibatches=32)

# the vector family's values for every agent (impala's on Box2D discrete too)
VECTOR = dict(batch_size=16, r_f_steps=20, optimizer="adam", lr=2e-3, hidden_size=64,
              envs_per_worker=8, clip_rewards=False, ppo_clip=0.2, normalize_input=False,
              normalize_returns=False, entropy_loss_weight=0.01, ppo_epochs=4,
              ppo_minibatches=4)

FAMILIES = (
    EnvFamily(
        "atari", looks_atari, _check_atari, _make_atari, emulator_frames=True, skips_frames=True,
        frame_rate=60,
        # ppo learns Pong several times faster per frame than impala did (README:
        # Learning); Sample Factory's Atari defaults for it: rollouts of 128 steps, 8
        # per batch (4 minibatches of 256), a constant learning rate; 3 epochs, not 4:
        # 1.16-1.19x the frames/s on 2 cores, and Pong's 18 at 1.95-2.19M frames over 3
        # seeds, within the 4-epoch seeds' 1.70-2.65M; within 2.5M frames in 4 of 6
        # 3-epoch runs (seed 0 stalled in 2 of 4), 6 of 9 with 4 (docs: results.md);
        # minibatches of steps from all 8 rollouts (CleanRL's way), not of 2 whole
        # rollouts: 18 within 2.5M frames in 7 of 7 seeds (1.93-2.48M), 10 of 12 before
        agent="ppo", ppo_constant_lr=True,
        # impala with both normalisations reached 18 on Pong at 3.85M frames (seed
        # 0); without, mean-100 0 took 8.48M and 18 was not reached in 10M
        defaults=dict(batch_size=8, r_f_steps=20, optimizer="rmsprop", lr=6e-4,
                      hidden_size=512, envs_per_worker=4, clip_rewards=True, ppo_clip=0.1,
                      normalize_input=True, normalize_returns=True, entropy_loss_weight=0.01,
                      ppo_epochs=3, ppo_minibatches=4),
        ppo_defaults=dict(optimizer="adam", lr=2.5e-4, r_f_steps=128, ppo_shuffle="steps")),
    EnvFamily(
        # minatar imports matplotlib and seaborn for its rendering: 1.2 s
        "minatar", is_minatar, _check_minatar, _make_minatar, agent="impala",
        imports=("minatar.gym",),
        defaults=dict(batch_size=8, r_f_steps=20, optimizer="rmsprop", lr=6e-4,
                      hidden_size=256, envs_per_worker=8, clip_rewards=True, ppo_clip=0.1,
                      normalize_input=False, normalize_returns=False,
                      entropy_loss_weight=0.01, ppo_epochs=4, ppo_minibatches=4),
        ppo_defaults=dict(optimizer="adam", lr=2.5e-4, batch_size=32)),
    EnvFamily(
        # Sample Factory's VizDoom settings (sf_examples/vizdoom/doom/doom_params.py and
        # its defaults): an LSTM core, rollouts of 32, one epoch, clip 0.1, an entropy
        # bonus of 0.001, observations and returns normalised, gradients clipped at 4;
        # but 4 minibatches of 4 rollouts at a constant 2.5e-4, not one of 32 at 1e-4,
        # whose one small step a batch left Basic's policy uniform for 480k frames
        # (design notes: ViZDoom's settings on a CPU)
        "vizdoom", is_vizdoom, _check_vizdoom, VizdoomBatchedEnv, agent="ppo",
        skips_frames=True, frame_rate=35, ppo_constant_lr=True, imports=("vizdoom",),
        defaults=dict(use_lstm=True, lstm_size=512, batch_size=16, r_f_steps=32,
                      optimizer="adam", lr=2.5e-4, hidden_size=512, envs_per_worker=8,
                      clip_rewards=False, ppo_clip=0.1, normalize_input=True,
                      normalize_returns=True, entropy_loss_weight=0.001, ppo_epochs=1,
                      ppo_minibatches=4, gradient_clip_by_norm_threshold=4.0)),
    EnvFamily(
        # rl-baselines3-zoo tunes PPO per MuJoCo task (hyperparams/ppo.yml); its
        # HalfCheetah-v3 values: two 256-wide ReLU torsos, a first log-std of -2, 512
        # steps a batch (8 rollouts of 64; on 2 cores 2 actors x 4 envs and one batch
        # queued, so the policy lag is one update), 20 epochs of 8 minibatches of 64
        # steps drawn from all rollouts, a constant lr of 2.06e-5, clip 0.1, gamma 0.98,
        # lambda 0.92.
        # HalfCheetah's median final mean-100 went from 1,658 to 5,208 and 3,000 from
        # never to 272k env steps (README: Continuous control); on Hopper the same
        # values stayed below 750 for 400k env steps, so they are this task's
        "half_cheetah", _is_half_cheetah, _check_gym, _make_gym, agent="ppo",
        ppo_constant_lr=True, defaults=CONTINUOUS,
        ppo_defaults=dict(batch_size=8, lr=2.0633e-5, hidden_size=256,
                          mlp_activation="relu", log_std_init=-2.0, envs_per_worker=4,
                          queued_batches=1, ppo_clip=0.1, entropy_loss_weight=0.000401762,
                          ppo_epochs=20, ppo_minibatches=8, ppo_shuffle="steps",
                          gamma=0.98, gae_lambda=0.92, gradient_clip_by_norm_threshold=0.8,
                          value_loss_weight=0.58096)),
    EnvFamily(
        # CleanRL's ppo_continuous_action settings: 2048 steps a batch (32 rollouts of
        # 64), 10 epochs of 32 minibatches of whole rollouts, lr 3e-4 decaying to 0, no
        # entropy bonus, observations and returns normalised, two 64-wide tanh torsos
        "mujoco", _is_mujoco, _check_gym, _make_gym, agent="ppo", defaults=CONTINUOUS),
    EnvFamily(
        # the same with minibatches of steps drawn from all rollouts (CleanRL's own
        # way): LunarLanderContinuous reached 200 in 3 seeds of 3 (1 with whole
        # rollouts), Pendulum -200 at 99k env steps (129k); BipedalWalker's best
        # mean-100 297 (307) and Hopper's final 1,495 (1,959) were worse, so the
        # MuJoCo family above keeps whole rollouts (README: Continuous control)
        "continuous", _is_continuous, _check_gym, _make_gym, agent="ppo",
        defaults=CONTINUOUS, ppo_defaults=dict(ppo_shuffle="steps")),
    EnvFamily(
        # LunarLander-v3 (discrete): with the vector family's CartPole-tuned values both
        # agents climbed to ~100 and fell back to -100 by 1M steps. rl-baselines3-zoo's
        # PPO values (gamma 0.999, lambda 0.98, an entropy bonus of 0.01, minibatches of
        # 64 steps drawn from all 16 envs, 4 epochs, lr 3e-4), with rollouts of 64 (README:
        # Continuous control)
        "box2d_discrete", _is_box2d, _check_gym, _make_gym, agent="ppo",
        defaults=VECTOR,
        ppo_defaults=dict(lr=3e-4, r_f_steps=64, ppo_minibatches=16, ppo_shuffle="steps",
                          gamma=0.999, gae_lambda=0.98)),
    EnvFamily(
        "vector", lambda env_id: True, _check_gym, _make_gym, agent="impala",
        # CartPole fell back after solving (design notes: Runs that stay solved):
        # impala's critic fitted no raw returns, and ppo's entropy bonus beside its
        # normalised advantages held no policy; impala's advantages are scaled, not
        # shifted, and its entropy bonus is 0.03 (the records: 8 of 10 seeds held)
        defaults=dict(VECTOR, normalize_returns=True, normalize_advantages=True,
                      entropy_loss_weight=0.03),
        ppo_defaults=dict(lr=2.5e-4, batch_size=32, entropy_loss_weight=0.0)),
)


def _import_prefix(env_id: str) -> str:
    """gymnasium's `module:EnvId` form: import the module (it registers the env)."""
    if ":" in env_id:
        module, env_id = env_id.split(":", 1)
        importlib.import_module(module)
    return env_id


def env_modules(env_id: str) -> tuple[str, ...]:
    """The modules that making `env_id`'s envs imports besides this file's: a
    `module:EnvId` prefix's and its family's `imports`. A forkserver imports them once
    before it forks the workers (training/factory.py `worker_context`)."""
    prefix = (env_id.split(":", 1)[0],) if ":" in env_id else ()
    return (*prefix, *family_of(env_id).imports)


def family_of(env_id: str) -> EnvFamily:
    """The family of `env_id` (`vector` for one that cannot be imported or made: its
    check says why)."""
    try:
        env_id = _import_prefix(env_id)
    except Exception:  # noqa: BLE001 - check_env_id says why
        return FAMILIES[-1]
    return next(f for f in FAMILIES if f.matches(env_id))


def check_env_id(env_id: str) -> str | None:
    """None if `env_id` can be built, else a message saying why not."""
    try:
        bare = _import_prefix(env_id)
    except Exception as e:  # noqa: BLE001 - any failure of the user's module
        return f"cannot import the module of {env_id!r}: {e}"
    return family_of(env_id).check(bare)


def make_batched_env(env_id: str, num_envs: int, options: EnvOptions, seed: int,
                     render: bool = False):
    """A batched env (wrappers/batched.py) of `num_envs` copies of `env_id`, built by
    its family. With `render`, `env.frame(obs, i)` gives a picture of env i."""
    family = family_of(env_id)
    return family.make(_import_prefix(env_id), num_envs, options, seed, render)


def playback_fps(env_id: str, frames_per_step: int) -> int:
    """Pictures per second of a recording, one picture per env step: a frame-skipping
    game's real time (Pong: 15, ViZDoom: 9), else 30 (CartPole's real time is 50)."""
    return max(1, round(family_of(env_id).frame_rate / frames_per_step))


def env_info(env_id: str, options: EnvOptions) -> EnvInfo:
    """Observation shape and dtype, actions and frames per step, from the env."""
    family = family_of(env_id)
    env = family.make(_import_prefix(env_id), 1, options, 0, False)
    obs = env.reset()
    info = EnvInfo(
        obs_shape=tuple(obs.shape[1:]),
        obs_dtype=str(obs.dtype),
        num_actions=env.num_actions,
        kind=family.name,
        frames_per_step=options.skipped_frames if family.skips_frames else 1,
        frame_stack=options.frames_stacked if family.emulator_frames else 0,
        action_kind=env.action_kind,
        action_low=tuple(float(x) for x in getattr(env, "low", ())),
        action_high=tuple(float(x) for x in getattr(env, "high", ())),
    )
    env.close()
    return info
