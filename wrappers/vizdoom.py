"""ViZDoom (Kempka et al., 2016): first-person 3D scenarios, as batched envs.

The ids are those `vizdoom.gymnasium_wrapper` registers with a Discrete action
space: `VizdoomBasic-v1`, `VizdoomDefendCenter-v1`,
`VizdoomHealthGatheringSupreme-v1`, `VizdoomMyWayHome-v1`... (its `-MultiBinary-`
ids, and scenarios with delta buttons such as `VizdoomDeathmatch-v1`, are
refused). Each env is a `vizdoom.DoomGame` made from the id's scenario file, set
up as Sample Factory sets up its VizDoom envs (sf_examples/vizdoom):
  * a 160x120 render, resized (nearest pixel) to 128x72 in colour, uint8
    [3, 72, 128] channels first: the game's CRCGCB format needs no transpose;
  * one action per env step, repeated for --skipped_frames tics (4), so frames =
    env steps x 4, as on Atari; no frame stack (an LSTM core carries the past);
  * Discrete(1 + buttons): nothing, or one button (the ids' own action space, and
    Sample Factory's "flat actions");
  * the scenario's own reward (its `living_reward`, `death_penalty`...).

Episode ends: a death, or the scenario's own objective, ends the trajectory
(`terminated`); the scenario's `episode_timeout` truncates it, and the learner
bootstraps from the last screen (gymnasium's wrapper returns zeros there, and
sets both flags). At a timeout the game has no state left, so the bootstrap
observation is the screen seen one step (4 tics) before it.
"""

from __future__ import annotations

import os
import tempfile

import gymnasium as gym
import numpy as np

from wrappers.batched import EnvOptions, EpisodeTracker, StepResult

HEIGHT, WIDTH = 72, 128  # Sample Factory's --res_h, --res_w
RENDER = (120, 160)  # the game's RES_160X120


def is_vizdoom(env_id: str) -> bool:
    return env_id.startswith("Vizdoom")


def register() -> None:
    """Registers ViZDoom's gymnasium ids (importing the wrapper package does)."""
    import vizdoom.gymnasium_wrapper  # noqa: F401


def scenario_file(env_id: str) -> str:
    """The scenario .cfg path of `env_id`; raises ValueError saying why it has none."""
    import vizdoom

    register()
    spec = gym.envs.registry.get(env_id)
    if spec is None:
        names = sorted(k for k in gym.envs.registry
                       if is_vizdoom(k) and "MultiBinary" not in k)
        raise ValueError(f"unknown ViZDoom env {env_id!r}: one of {', '.join(names)}")
    kwargs = spec.kwargs or {}
    if kwargs.get("max_buttons_pressed") != 1 or "scenario_config_file" not in kwargs:
        raise ValueError(f"{env_id!r}: only the Discrete ViZDoom ids are supported (not the "
                         "-MultiBinary- ones), e.g. VizdoomBasic-v1")
    path = os.path.join(vizdoom.scenarios_path, kwargs["scenario_config_file"])
    game = vizdoom.DoomGame()
    game.load_config(path)  # reads the file; starts no game
    delta = [b.name for b in game.get_available_buttons() if vizdoom.is_delta_button(b)]
    if delta:
        raise ValueError(f"{env_id!r}: its scenario has delta buttons ({', '.join(delta)}), "
                         "which take a number, not a press; scenarios of binary buttons are "
                         "supported, e.g. VizdoomDefendCenter-v1")
    return path


def check(env_id: str) -> str | None:
    try:
        scenario_file(env_id)
    except ImportError as e:
        return f"{env_id!r} needs the vizdoom package ({e}): pip install -r requirements.txt"
    except ValueError as e:
        return str(e)
    return None


def _start(game) -> None:
    """`game.init()`, which makes an empty `_vizdoom` folder in the working directory:
    made from the temp directory instead, so that no run litters the user's."""
    cwd = os.getcwd()
    os.chdir(tempfile.gettempdir())
    try:
        game.init()
    finally:
        os.chdir(cwd)


def _resize_index(size: int, to: int) -> np.ndarray:
    """The source pixel of each of `to` target pixels (nearest, centres aligned)."""
    return np.minimum(((np.arange(to) + 0.5) * size / to).astype(np.int64), size - 1)


class VizdoomBatchedEnv:
    """`num_envs` DoomGames stepped in turn (wrappers/batched.py's API); observations
    uint8 [E, 3, 72, 128], actions int64 [E] in [0, 1 + buttons)."""

    action_kind = "discrete"

    def __init__(self, env_id: str, num_envs: int, options: EnvOptions, seed: int,
                 render: bool = False):
        """`render` is the family API's: the last full screen is always kept (`frame`)."""
        import vizdoom as vzd

        config = scenario_file(env_id)
        self.num_envs, self.skip = num_envs, options.skipped_frames
        self.games = []
        for i in range(num_envs):
            game = vzd.DoomGame()
            game.load_config(config)
            game.set_window_visible(False)
            game.set_sound_enabled(False)
            game.set_screen_resolution(vzd.ScreenResolution.RES_160X120)
            game.set_screen_format(vzd.ScreenFormat.CRCGCB)
            game.set_mode(vzd.Mode.PLAYER)
            game.set_doom_config_path(os.devnull)  # no _vizdoom.ini in the working directory
            game.set_seed((seed * 1_000_003 + i) % 2**32)
            self.games.append(game)
        buttons = self.games[0].get_available_buttons_size()
        self.num_actions = 1 + buttons
        self.actions = np.vstack([np.zeros(buttons), np.eye(buttons)]).tolist()
        self.rows = _resize_index(RENDER[0], HEIGHT)[:, None]
        self.cols = _resize_index(RENDER[1], WIDTH)[None, :]
        self.screens = np.zeros((num_envs, 3, *RENDER), dtype=np.uint8)  # the last seen
        self.tracker = EpisodeTracker(num_envs)
        self.started = False

    def _screen(self, i: int) -> np.ndarray:
        """Env i's current screen, kept in `self.screens`, as uint8 [3, 72, 128]."""
        self.screens[i] = self.games[i].get_state().screen_buffer
        return self.screens[i][:, self.rows, self.cols]

    def reset(self) -> np.ndarray:
        """Every env's first observation; games in progress are dropped uncounted."""
        for game in self.games:
            if self.started:
                game.new_episode()
            else:
                _start(game)
        self.started = True
        self.tracker = EpisodeTracker(self.num_envs)
        return np.stack([self._screen(i) for i in range(self.num_envs)])

    def step(self, actions: np.ndarray) -> StepResult:
        """actions: int64 [E]. A game that ends starts its next episode at once."""
        n = self.num_envs
        obs = np.empty((n, 3, HEIGHT, WIDTH), dtype=np.uint8)
        reward = np.zeros(n, dtype=np.float32)
        terminated = np.zeros(n, dtype=bool)
        truncated = np.zeros(n, dtype=bool)
        final_obs = None
        for i, (game, a) in enumerate(zip(self.games, actions.tolist(), strict=True)):
            reward[i] = game.make_action(self.actions[a], self.skip)
            if game.is_episode_finished():
                if game.is_episode_timeout_reached() and not game.is_player_dead():
                    truncated[i] = True
                    if final_obs is None:  # rows not truncated are never read
                        final_obs = np.zeros_like(obs)
                    final_obs[i] = self.screens[i][:, self.rows, self.cols]
                else:
                    terminated[i] = True
                game.new_episode()
            obs[i] = self._screen(i)
        episodes = self.tracker.update(reward, terminated | truncated)
        return StepResult(obs, reward, terminated, truncated, final_obs, episodes)

    def frame(self, obs: np.ndarray, i: int) -> np.ndarray:
        """Env i's last full screen, uint8 [120, 160, 3]."""
        return np.ascontiguousarray(self.screens[i].transpose(1, 2, 0))

    def close(self) -> None:
        for game in self.games:
            game.close()
