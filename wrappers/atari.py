"""Atari through ale-py's native vector env (`AtariVectorEnv`): grayscale 84x84,
frame stack, frameskip with max-pooling, noop starts, sticky actions; observations
uint8 [E, stack, 84, 84]. Ids: `PongNoFrameskip-v4` or `ALE/Pong-v5`."""

from __future__ import annotations

import re

import gymnasium as gym
import numpy as np

from wrappers.batched import EnvOptions, EpisodeTracker, StepResult

_ATARI_V4 = re.compile(r"^([A-Za-z0-9]+)NoFrameskip-v4$")
_ATARI_V5 = re.compile(r"^ALE/([A-Za-z0-9]+)-v5$")


def looks_atari(env_id: str) -> bool:
    """Whether `env_id` has the form of an Atari id (its ROM may still be missing)."""
    return bool(_ATARI_V4.match(env_id) or _ATARI_V5.match(env_id))


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
        self.action_kind = "discrete"
        self.seed = seed
        self.tracker = EpisodeTracker(num_envs)
        self.lives = np.zeros(num_envs, dtype=np.int64)
        self.episode_frame = np.zeros(num_envs, dtype=np.int64)

    def reset(self) -> np.ndarray:
        """Every env's first observation; games in progress are dropped uncounted."""
        obs, info = self.env.reset(seed=self.seed)
        self.tracker = EpisodeTracker(self.num_envs)
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
