"""One factory from an env id to a batched env with a single API for the actors.

    env = make_batched_env(env_id, num_envs, options, seed)
    obs = env.reset()                     # [E, *obs_shape]
    step = env.step(actions)              # actions int64 [E]

Kinds of env id:
  * Atari, `PongNoFrameskip-v4` or `ALE/Pong-v5`: ale-py's native `AtariVectorEnv`
    (grayscale 84x84, frame stack, frameskip with max-pooling, noop starts,
    sticky actions). Observations uint8 [E, stack, 84, 84].
  * MinAtar, `MinAtar/Breakout-v1` and the rest of the `minatar` package (Young &
    Tian, 2019): gymnasium's sync vector env over the package's envs. Their bool
    [10, 10, C] channel-last observations become channel-first uint8 0/1
    [E, C, 10, 10]: the same pixel path as Atari (uint8 slots, a conv net), but
    the channels are object kinds, not stacked frames.
  * any gymnasium env with a discrete action space and a vector observation
    (CartPole-v1, Acrobot-v1, ShortCorridor-v0, ...): gymnasium's sync vector env.
    Observations float32 [E, D].

Both autoreset in the same step (SAME_STEP): after a step that ends an episode
the observation returned is already the first one of the next episode, and the
last one is kept in `StepResult.final_obs` when it is needed (truncation).

Episode statistics are the unclipped game score and the number of env steps over
the whole game: with `episodic_life` a life loss ends the *trajectory*
(`terminated`), but the game goes on and the episode is reported at game over.
"""

from __future__ import annotations

import dataclasses
import importlib
import re

import gymnasium as gym
import numpy as np

from wrappers import short_corridor

short_corridor.register()

_ATARI_V4 = re.compile(r"^([A-Za-z0-9]+)NoFrameskip-v4$")
_ATARI_V5 = re.compile(r"^ALE/([A-Za-z0-9]+)-v5$")


@dataclasses.dataclass(frozen=True)
class EnvOptions:
    """Preprocessing options (ignored by non-Atari envs except where noted)."""

    skipped_frames: int = 4
    frames_stacked: int = 4
    noop_threshold: int = 30
    episodic_life: bool = True
    repeat_action_probability: float | None = None  # None: 0.25 for ALE/...-v5, else 0
    max_episode_frames: int = 108_000


@dataclasses.dataclass(frozen=True)
class EnvInfo:
    obs_shape: tuple[int, ...]
    obs_dtype: str  # "uint8" or "float32"
    num_actions: int
    kind: str  # "atari", "minatar" or "vector" (see `env_kind`)
    frames_per_step: int  # emulator frames per env step (1 for non-Atari)
    # frames stacked along obs dim 0, which consecutive observations share (Atari);
    # 0 where the channels are not a frame stack
    frame_stack: int


@dataclasses.dataclass
class StepResult:
    """One batched step. Arrays have a leading env dimension E.

    obs: [E, *obs_shape], the observation to act on next (reset one after an end).
    reward: float32 [E], unclipped.
    terminated: bool [E], the trajectory ended (life loss or game over).
    truncated: bool [E], cut by a time limit and not terminated in the same step;
        bootstrapping goes on through final_obs.
    final_obs: [E, *obs_shape] or None; rows valid where truncated.
    episodes: (env index, game return, game length in env steps) of finished games.
    """

    obs: np.ndarray
    reward: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    final_obs: np.ndarray | None
    episodes: list[tuple[int, float, int]]


def _camel_to_snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def atari_game(env_id: str) -> str | None:
    """The ale-py ROM id for an Atari env id, or None if `env_id` is not Atari."""
    m = _ATARI_V4.match(env_id) or _ATARI_V5.match(env_id)
    if not m:
        return None
    from ale_py import roms

    game = _camel_to_snake(m.group(1))
    return game if game in roms.get_all_rom_ids() else None


def is_minatar(env_id: str) -> bool:
    return env_id.startswith("MinAtar/")


def _register_minatar() -> None:
    import minatar.gym

    if not any(is_minatar(k) for k in gym.envs.registry):
        minatar.gym.register_envs()


ENV_KINDS = ("atari", "minatar", "vector")  # what env_kind returns


def env_kind(env_id: str) -> str:
    """"atari", "minatar" or "vector": the observation kind that picks the network and
    the auto defaults of the flags."""
    env_id = env_id.split(":")[-1]
    if atari_game(env_id) is not None:
        return "atari"
    return "minatar" if is_minatar(env_id) else "vector"


def check_env_id(env_id: str) -> str | None:
    """None if `env_id` can be built, else a message saying why not."""
    try:
        env_id = _import_prefix(env_id)
    except ImportError as e:
        return f"cannot import the module of {env_id!r}: {e}"
    if atari_game(env_id) is not None:
        return None
    if is_minatar(env_id):
        _register_minatar()
        if env_id in gym.envs.registry:
            return None
        names = sorted(k for k in gym.envs.registry if is_minatar(k))
        return f"unknown MinAtar env {env_id!r}: one of {', '.join(names)}"
    if _ATARI_V4.match(env_id) or _ATARI_V5.match(env_id):
        return f"no Atari ROM for {env_id!r} in ale-py"
    if env_id not in gym.envs.registry:
        return (
            f"unknown env {env_id!r}: use an Atari id (PongNoFrameskip-v4, ALE/Pong-v5) "
            "or a registered gymnasium id (CartPole-v1, ShortCorridor-v0)"
        )
    try:
        env = gym.make(env_id)
    except Exception as e:  # noqa: BLE001 - report any construction failure
        return f"{env_id!r} could not be created: {e}"
    action_space, observation_space = env.action_space, env.observation_space
    env.close()
    if not isinstance(action_space, gym.spaces.Discrete):
        return f"{env_id!r} has the action space {action_space}; only Discrete is supported"
    try:
        vector_encoder(observation_space)
    except ValueError as e:
        return f"{env_id!r}: {e}"
    return None


def vector_encoder(space: gym.spaces.Space):
    """The function that turns a batch of `space`'s observations into float32 [E, D]:
    a 1-D Box as it is; Discrete(n) one-hot (D = n); MultiDiscrete one-hot per
    component, concatenated (D = sum of nvec). Any other space: ValueError naming it."""
    if isinstance(space, gym.spaces.Box) and len(space.shape) == 1:
        return lambda o: np.asarray(o, dtype=np.float32)
    if isinstance(space, gym.spaces.Discrete):
        eye, start = np.eye(int(space.n), dtype=np.float32), int(space.start)
        return lambda o: eye[np.asarray(o, dtype=np.int64) - start]
    if isinstance(space, gym.spaces.MultiDiscrete) and space.nvec.ndim == 1:
        eyes = [np.eye(int(n), dtype=np.float32) for n in space.nvec]
        start = np.asarray(space.start, dtype=np.int64)

        def encode(o):
            o = np.asarray(o, dtype=np.int64) - start
            return np.concatenate([eye[o[:, i]] for i, eye in enumerate(eyes)], axis=1)
        return encode
    raise ValueError(f"the observation space {space} is not supported: a 1-D Box, Discrete "
                     "or 1-D MultiDiscrete (one-hot encoded) is")


class _EpisodeTracker:
    """Running unclipped return and length per env; reports finished games."""

    def __init__(self, num_envs: int):
        self.returns = np.zeros(num_envs, dtype=np.float64)
        self.lengths = np.zeros(num_envs, dtype=np.int64)

    def update(self, reward: np.ndarray, game_over: np.ndarray) -> list[tuple[int, float, int]]:
        self.returns += reward
        self.lengths += 1
        done = []
        for i in np.flatnonzero(game_over):
            done.append((int(i), float(self.returns[i]), int(self.lengths[i])))
            self.returns[i] = 0.0
            self.lengths[i] = 0
        return done


class AtariBatchedEnv:
    def __init__(self, game: str, num_envs: int, options: EnvOptions, seed: int, sticky: float):
        from ale_py.vector_env import AtariVectorEnv

        self.episodic_life = options.episodic_life
        self.env = AtariVectorEnv(
            game,
            num_envs,
            num_threads=1,
            frameskip=options.skipped_frames,
            stack_num=options.frames_stacked,
            noop_max=options.noop_threshold,
            repeat_action_probability=sticky,
            max_num_frames_per_episode=options.max_episode_frames,
            life_loss_info=options.episodic_life,
            episodic_life=False,
            reward_clipping=False,
            autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
        )
        self.num_envs = num_envs
        self.num_actions = int(self.env.single_action_space.n)
        self.seed = seed
        self.tracker = _EpisodeTracker(num_envs)
        self.lives = np.zeros(num_envs, dtype=np.int64)
        self.episode_frame = np.zeros(num_envs, dtype=np.int64)

    def reset(self) -> np.ndarray:
        """Every env's first observation; games in progress are dropped uncounted."""
        obs, info = self.env.reset(seed=self.seed)
        self.tracker = _EpisodeTracker(self.num_envs)
        self.lives = info["lives"].astype(np.int64)
        self.episode_frame = info["episode_frame_number"].astype(np.int64)
        return obs

    def step(self, actions: np.ndarray) -> StepResult:
        obs, reward, terminated, truncated, info = self.env.step(actions.astype(np.int32))
        reward = reward.astype(np.float32)
        truncated = truncated & ~terminated
        episode_frame = info["episode_frame_number"].astype(np.int64)
        lives = info["lives"].astype(np.int64)
        if self.episodic_life:
            # A life loss raises `terminated` and the game goes on, with one life fewer.
            # A game over resets in the same step: the episode's frame counter starts
            # again, and the lives seen do not go down (Pong has none at all).
            restarted = episode_frame < self.episode_frame
            game_over = restarted | (terminated & (lives >= self.lives)) | truncated
        else:
            game_over = terminated | truncated
        self.episode_frame = episode_frame
        self.lives = lives
        final_obs = info["final_obs"] if truncated.any() else None
        episodes = self.tracker.update(reward, game_over)
        return StepResult(obs, reward, terminated, truncated, final_obs, episodes)

    def frame(self, obs: np.ndarray, i: int) -> np.ndarray:
        """What env `i` shows: the newest frame the agent sees, uint8 [84, 84]."""
        return obs[i, -1]

    def close(self) -> None:
        self.env.close()


def _channel_first_uint8(obs: np.ndarray) -> np.ndarray:
    """bool [..., H, W, C] -> uint8 0/1 [..., C, H, W] (MinAtar)."""
    return np.ascontiguousarray(np.moveaxis(obs, -1, -3), dtype=np.uint8)


class GymBatchedEnv:
    """gymnasium's sync vector env. Vector observations come as float32 [E, D]
    (Discrete and MultiDiscrete ones one-hot, `vector_encoder`); with `pixels`
    (MinAtar) bool [E, H, W, C] observations come as uint8 [E, C, H, W]."""

    def __init__(self, env_id: str, num_envs: int, seed: int, render: bool = False,
                 pixels: bool = False):
        self.env = gym.make_vec(
            env_id,
            num_envs=num_envs,
            vectorization_mode="sync",
            vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP},
            **({"render_mode": "rgb_array"} if render else {}),
        )
        self.to_obs = _channel_first_uint8 if pixels else vector_encoder(
            self.env.single_observation_space)
        self.num_envs = num_envs
        self.num_actions = int(self.env.single_action_space.n)
        self.seed = seed
        self.tracker = _EpisodeTracker(num_envs)

    def reset(self) -> np.ndarray:
        """Every env's first observation; games in progress are dropped uncounted."""
        obs, _ = self.env.reset(seed=self.seed)
        self.tracker = _EpisodeTracker(self.num_envs)
        return self.to_obs(obs)

    def step(self, actions: np.ndarray) -> StepResult:
        obs, reward, terminated, truncated, info = self.env.step(actions)
        reward = reward.astype(np.float32)
        truncated = truncated & ~terminated
        final_obs = None
        if truncated.any():  # rows not truncated hold their own obs (a valid value), unread
            final_obs = self.to_obs(np.stack(
                [np.asarray(o, dtype=obs.dtype) if t else own
                 for o, own, t in zip(info["final_obs"], obs, truncated, strict=True)]
            ))
        episodes = self.tracker.update(reward, terminated | truncated)
        obs = self.to_obs(obs)
        return StepResult(obs, reward, terminated, truncated, final_obs, episodes)

    def frame(self, obs: np.ndarray, i: int) -> np.ndarray:
        """What env `i` shows: its rgb_array render, uint8 [H, W, 3] (needs render=True)."""
        return self.env.render()[i]

    def close(self) -> None:
        self.env.close()


def _import_prefix(env_id: str) -> str:
    """gymnasium's `module:EnvId` form: import the module (it registers the env)."""
    if ":" in env_id:
        module, env_id = env_id.split(":", 1)
        importlib.import_module(module)
    return env_id


def make_batched_env(env_id: str, num_envs: int, options: EnvOptions, seed: int,
                     render: bool = False):
    """An `AtariBatchedEnv` or `GymBatchedEnv` of `num_envs` copies of `env_id`.
    With `render`, `env.frame(obs, i)` gives a picture of env i."""
    env_id = _import_prefix(env_id)
    if is_minatar(env_id):
        _register_minatar()
        return GymBatchedEnv(env_id, num_envs, seed, render, pixels=True)
    game = atari_game(env_id)
    if game is not None:
        sticky = options.repeat_action_probability
        if sticky is None:
            sticky = 0.25 if env_id.startswith("ALE/") else 0.0
        return AtariBatchedEnv(game, num_envs, options, seed, sticky)
    return GymBatchedEnv(env_id, num_envs, seed, render)


def env_info(env_id: str, options: EnvOptions) -> EnvInfo:
    """Observation shape and dtype, action count and frames per step, from the env."""
    env = make_batched_env(env_id, 1, options, seed=0)
    obs = env.reset()
    atari = isinstance(env, AtariBatchedEnv)
    info = EnvInfo(
        obs_shape=tuple(obs.shape[1:]),
        obs_dtype=str(obs.dtype),
        num_actions=env.num_actions,
        kind=env_kind(env_id),
        frames_per_step=options.skipped_frames if atari else 1,
        frame_stack=options.frames_stacked if atari else 0,
    )
    env.close()
    return info
