"""gymnasium envs through its sync vector env: vector tasks (float32 [E, D]
observations; Discrete and MultiDiscrete ones one-hot) with Discrete or 1-D Box
actions, and MinAtar (Young & Tian, 2019), whose bool [10, 10, C] channel-last
observations become channel-first uint8 0/1 [E, C, 10, 10]: the same pixel path as
Atari (uint8 slots, a conv net), but the channels are object kinds, not stacked
frames. Box actions arrive as float32 [E, A], unbounded (a Gaussian policy's
samples), and are clipped to the space's bounds here, on their way to the env: the
actors store what the policy sampled."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from wrappers.batched import EpisodeTracker, StepResult


def is_minatar(env_id: str) -> bool:
    return env_id.startswith("MinAtar/")


def register_minatar() -> None:
    import minatar.gym

    if not any(is_minatar(k) for k in gym.envs.registry):
        minatar.gym.register_envs()


def action_kind(space: gym.spaces.Space) -> str | None:
    """"discrete" for a Discrete action space, "box" for a 1-D Box of floats, None for
    anything else (Dict, Tuple, MultiDiscrete, ...)."""
    if isinstance(space, gym.spaces.Discrete):
        return "discrete"
    if isinstance(space, gym.spaces.Box) and len(space.shape) == 1 \
            and np.issubdtype(space.dtype, np.floating):
        return "box"
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
        space = self.env.single_action_space
        self.action_kind = action_kind(space)
        if self.action_kind == "box":
            self.num_actions = int(space.shape[0])
            self.low, self.high = space.low, space.high
        else:
            self.num_actions = int(space.n)
        self.seed = seed
        self.tracker = EpisodeTracker(num_envs)

    def reset(self) -> np.ndarray:
        """Every env's first observation; games in progress are dropped uncounted."""
        obs, _ = self.env.reset(seed=self.seed)
        self.tracker = EpisodeTracker(self.num_envs)
        return self.to_obs(obs)

    def step(self, actions: np.ndarray) -> StepResult:
        """actions: int64 [E], or float32 [E, A] for a Box space, clipped to its
        bounds here (the caller's array is not changed)."""
        if self.action_kind == "box":
            actions = np.clip(actions, self.low, self.high)
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
        """What env `i` shows: its rgb_array render, uint8 [H, W, 3] (needs render=True).
        MinAtar renders float64 colours in [0, 1]: scaled to uint8."""
        frame = self.env.render()[i]
        if frame.dtype != np.uint8:
            frame = np.rint(np.clip(frame, 0.0, 1.0) * 255).astype(np.uint8)
        return frame

    def close(self) -> None:
        self.env.close()
