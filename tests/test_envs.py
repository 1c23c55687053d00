"""The env factory: Atari life loss vs game over, unclipped scores, the short corridor,
gymnasium's `module:EnvId` form and one-hot discrete observations (popgym), and the
modules the workers' forkserver imports for an env."""

from __future__ import annotations

import ast
import gc
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest

from tests.conftest import ROOT
from wrappers.envs import (
    EnvOptions,
    check_env_id,
    env_info,
    env_modules,
    make_batched_env,
    playback_fps,
    vector_encoder,
)
from wrappers.short_corridor import ShortCorridorEnv


def test_atari_life_loss_ends_trajectory_game_over_ends_episode():
    env = make_batched_env("ALE/SpaceInvaders-v5", 2, EnvOptions(episodic_life=True), seed=3)
    obs = env.reset()
    assert obs.shape == (2, 4, 84, 84) and obs.dtype == np.uint8
    rng = np.random.default_rng(0)
    start_lives = int(env.lives[0])
    terminations, total, steps = 0, 0.0, 0
    rewards_seen = set()
    while True:
        step = env.step(rng.integers(0, env.num_actions, size=2))
        steps += 1
        total += float(step.reward[0])
        rewards_seen.update(step.reward[0:1].tolist())
        terminations += int(step.terminated[0])
        finished = [e for e in step.episodes if e[0] == 0]
        if finished:
            break
        assert steps < 20_000
    env.close()
    assert start_lives == 3
    # one termination per life; only the last one is a game over
    assert terminations == start_lives
    (_, ret, length), = finished
    assert ret == total and length == steps
    assert max(rewards_seen) > 1.0, "scores must be unclipped"


def test_atari_without_episodic_life_terminates_only_at_game_over():
    env = make_batched_env("ALE/SpaceInvaders-v5", 1, EnvOptions(episodic_life=False), seed=1)
    env.reset()
    rng = np.random.default_rng(1)
    for _ in range(20_000):
        step = env.step(rng.integers(0, env.num_actions, size=1))
        if step.terminated[0]:
            assert step.episodes, "a termination without episodic life is a game over"
            break
        assert not step.episodes, "a game over is a termination"
    else:
        raise AssertionError("no game over in 20,000 env steps")
    env.close()


def test_atari_game_without_lives_every_termination_is_a_game_over():
    env = make_batched_env("PongNoFrameskip-v4", 2, EnvOptions(episodic_life=True), seed=2)
    env.reset()
    rng = np.random.default_rng(2)
    games = 0
    for _ in range(5000):
        step = env.step(rng.integers(0, env.num_actions, size=2))
        ended = set(np.flatnonzero(step.terminated | step.truncated).tolist())
        assert ended == {i for i, _, _ in step.episodes}
        for _, ret, _ in step.episodes:
            assert -21 <= ret <= 21 and ret == int(ret)
        games += len(step.episodes)
        if games >= 2:
            break
    env.close()
    assert games >= 2


def test_env_info_comes_from_the_env():
    pong = env_info("PongNoFrameskip-v4", EnvOptions(frames_stacked=2))
    assert pong.obs_shape == (2, 84, 84) and pong.num_actions == 6 and pong.frames_per_step == 4
    assert (pong.kind, pong.frame_stack) == ("atari", 2)
    acro = env_info("Acrobot-v1", EnvOptions())
    assert acro.obs_shape == (6,) and acro.num_actions == 3 and acro.frames_per_step == 1
    assert (acro.kind, acro.frame_stack) == ("vector", 0)
    breakout = env_info("MinAtar/Breakout-v1", EnvOptions())
    assert breakout.obs_shape == (4, 10, 10) and breakout.obs_dtype == "uint8"
    assert breakout.num_actions == 3 and breakout.frames_per_step == 1
    # MinAtar channels are object kinds, not a frame stack the replays could share
    assert (breakout.kind, breakout.frame_stack) == ("minatar", 0)


def test_recordings_of_frame_skipping_games_play_in_real_time():
    # one picture per env step: Atari's 60 frames/s over 4 skipped, ViZDoom's 35 over 4
    assert playback_fps("PongNoFrameskip-v4", 4) == 15
    assert playback_fps("PongNoFrameskip-v4", 1) == 60
    assert playback_fps("VizdoomBasic-v1", 4) == 9
    assert playback_fps("CartPole-v1", 1) == 30  # the recorder's default elsewhere


def test_minatar_observations_are_the_game_state_channel_first():
    import gymnasium as gym

    env = make_batched_env("MinAtar/Breakout-v1", 3, EnvOptions(), seed=5)
    raw = gym.make("MinAtar/Breakout-v1")
    obs = env.reset()
    assert obs.shape == (3, 4, 10, 10) and obs.dtype == np.uint8
    rng = np.random.default_rng(0)
    games, seen = 0, set()
    for _ in range(2000):
        step = env.step(rng.integers(0, 3, size=3))
        assert step.obs.dtype == np.uint8 and set(np.unique(step.obs)) <= {0, 1}
        seen.update(np.unique(step.obs).tolist())
        games += len(step.episodes)
        for _, ret, length in step.episodes:
            assert ret >= 0 and length >= 1
    assert games > 10 and seen == {0, 1}
    # channel c of our obs is channel c of the package's [10, 10, C] state
    raw_obs, _ = raw.reset(seed=11)
    ours = make_batched_env("MinAtar/Breakout-v1", 1, EnvOptions(), seed=11).reset()[0]
    np.testing.assert_array_equal(ours, np.moveaxis(raw_obs, -1, 0).astype(np.uint8))
    env.close()


def test_env_id_checks():
    assert check_env_id("ALE/Breakout-v5") is None
    assert check_env_id("BreakoutNoFrameskip-v4") is None
    assert "unknown env" in check_env_id("Breakout-v99")
    assert check_env_id("Pendulum-v1") is None  # a 1-D Box: continuous actions
    assert "action space Dict(" in check_env_id("tests.counting_env:DictAction-v0")
    assert "action space MultiDiscrete(" in check_env_id("popgym:popgym-MineSweeperEasy-v0")
    assert check_env_id("MinAtar/Breakout-v1") is None
    assert "MinAtar/Asterix-v1" in check_env_id("MinAtar/Pong-v1")  # lists the real ones


def test_short_corridor_dynamics():
    env = ShortCorridorEnv()
    env.reset()
    # left at S stays at S; right goes to the reversed state; right there goes back
    assert env.step(0)[1:3] == (-1.0, False) and env._state == 0
    env.step(1)
    assert env._state == 1
    env.step(1)
    assert env._state == 0
    env.step(1)
    env.step(0)  # reversed: left moves right
    assert env._state == 2
    obs, reward, terminated, truncated, _ = env.step(1)
    assert (reward, terminated, truncated) == (-1.0, True, False)
    assert obs.tolist() == [1.0]


def test_discrete_observations_are_one_hot():
    space = gym.spaces.Discrete(3, start=1)
    np.testing.assert_array_equal(vector_encoder(space)(np.array([1, 3])),
                                  [[1, 0, 0], [0, 0, 1]])
    multi = gym.spaces.MultiDiscrete([2, 3])
    np.testing.assert_array_equal(vector_encoder(multi)(np.array([[1, 2], [0, 0]])),
                                  [[0, 1, 0, 0, 1], [1, 0, 1, 0, 0]])
    for odd in (gym.spaces.Box(0, 1, (2, 2)), gym.spaces.Tuple([space, space])):
        with pytest.raises(ValueError, match="is not supported"):
            vector_encoder(odd)


def test_a_popgym_env_through_its_module():
    env_id = "popgym:popgym-RepeatPreviousEasy-v0"  # Discrete(4) observations
    assert check_env_id(env_id) is None
    info = env_info(env_id, EnvOptions())
    assert info.obs_shape == (4,) and info.kind == "vector" and info.num_actions == 4
    env = make_batched_env(env_id, 3, EnvOptions(), seed=0)
    obs = env.reset()
    assert obs.dtype == np.float32 and (obs.sum(1) == 1).all()
    env.close()
    assert "MultiDiscrete" in check_env_id("popgym:popgym-BattleshipEasy-v0")  # its actions


def test_env_modules_name_the_imports_an_env_needs_besides():
    assert env_modules("MinAtar/Breakout-v1") == ("minatar.gym",)
    assert env_modules("popgym:popgym-RepeatPreviousEasy-v0") == ("popgym",)
    assert env_modules("CartPole-v1") == () and env_modules("PongNoFrameskip-v4") == ()


def report_imports(conn) -> None:
    """A worker's target: whether MinAtar was imported before it ran, and how many
    objects it shares frozen with its server."""
    conn.send(("minatar" in sys.modules, gc.get_freeze_count()))


def test_the_workers_forkserver_imports_the_envs_modules_and_freezes_them():
    # in a process of its own: a forkserver is one per process, and this one's may
    # have started for another test with another preload
    script = (
        "from training.factory import worker_context\n"
        "from tests.test_envs import report_imports\n"
        "ctx = worker_context(('minatar.gym',))\n"
        "r, w = ctx.Pipe(duplex=False)\n"
        "p = ctx.Process(target=report_imports, args=(w,))\n"
        "p.start()\n"
        "print(r.recv())\n"
        "p.join()\n")
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    imported, frozen = ast.literal_eval(proc.stdout.strip().splitlines()[-1])
    assert imported and frozen > 100_000, (imported, frozen)
