"""What every batched env shares: its preprocessing options, the result of a step
and the per-env episode bookkeeping. The API a batched env offers (the actors,
the evaluator and test mode use nothing else):

    env.num_envs, env.num_actions, env.action_kind   # "discrete" or "box"
    obs = env.reset()                     # [E, *obs_shape]
    step = env.step(actions)              # actions int64 [E] or float32 [E, A] -> StepResult
    env.frame(obs, i)                     # a picture of env i (for videos)
    env.close()

Both kinds of env autoreset in the same step (SAME_STEP): after a step that ends an
episode the observation returned is already the first one of the next episode,
and the last one is kept in `StepResult.final_obs` when it is needed (truncation).

Episode statistics are the unclipped game score and the number of env steps over
the whole game: with `episodic_life` a life loss ends the *trajectory*
(`terminated`), but the game goes on and the episode is reported at game over.
"""

from __future__ import annotations

import dataclasses

import numpy as np


@dataclasses.dataclass(frozen=True)
class EnvOptions:
    """Preprocessing options (ignored by non-Atari envs except where noted)."""

    skipped_frames: int = 4
    frames_stacked: int = 4
    noop_threshold: int = 30
    episodic_life: bool = True
    repeat_action_probability: float | None = None  # None: 0.25 for ALE/...-v5, else 0
    max_episode_frames: int = 108_000


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


class EpisodeTracker:
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
