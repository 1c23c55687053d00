"""bench/pong_points.py: a game's points add up to its score, the losses are counted by
point, the RAM tracker returns Pong's opening serve (the point every trained policy
of the results page loses), and a run's games are read in windows of frames."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from bench.pong_points import (
    DOWN,
    ENV_ID,
    NUM_ENVS,
    episode_windows,
    episodes_csv,
    main,
    play_points,
    policy_act,
    policy_trace,
    trace_env,
    tracker_points,
)
from option_flags import default_values
from training.config import make_config
from wrappers.envs import env_info, make_batched_env


def _untrained_checkpoint() -> dict:
    """What `policy_act` reads of a checkpoint, for Pong's default model, untrained."""
    cfg, errors = make_config(default_values(env=ENV_ID))
    assert not errors
    shapes = env_info(ENV_ID, cfg.env_options())
    model = cfg.model_spec(shapes).build()
    return {"env_info": dataclasses.asdict(shapes), "config": cfg.to_dict(),
            "policies": [{"agent": {"model": model.state_dict()}}]}


def test_the_points_lost_add_up_to_the_scores():
    cfg, _ = make_config(default_values(env=ENV_ID))
    env = make_batched_env(ENV_ID, 2, cfg.env_options(training=False), seed=0)
    rng = np.random.default_rng(0)
    try:
        out = play_points(lambda obs, starts: rng.integers(0, 6, len(obs)), env, games=2)
    finally:
        env.close()
    assert out["games"] == 2 and len(out["returns"]) == 2
    # a game ends at 21: the loser lost 21 points, the winner 21 - its margin
    expected = sum(21 if r < 0 else 21 - r for r in out["returns"])
    assert sum(out["lost_by_point"].values()) == expected
    assert len(out["first_point_lost_at_step"]) == out["lost_by_point"].get(0, 0)
    assert all(0 < t < 500 for t in out["first_point_lost_at_step"])
    # every point but a game's first follows a lost or a won one
    (lost_l, played_l), (lost_w, played_w) = out["lost_after_a_loss"], out["lost_after_a_win"]
    assert lost_l + lost_w == expected - out["lost_by_point"].get(0, 0)
    points_played = sum(21 + (21 - abs(r)) for r in out["returns"])
    assert played_l + played_w == points_played - 2 and lost_l <= played_l and lost_w <= played_w
    assert 0 < out["steps_per_point"] < 500


def test_a_runs_games_in_windows_of_frames(tmp_path, capsys):
    run = tmp_path / "PongNoFrameskip-v4_1"
    run.mkdir()
    # (frames, return, length): windows of 1,000 frames hold games 1-2, none, game 3
    games = [(400, -21.0, 840), (900, 5.0, 3700), (2500, 21.0, 1050)]
    (run / "episodes.csv").write_text(
        "env_steps,frames,episode_return,episode_length,wall_time\n"
        + "".join(f"{f // 4},{f},{r},{n},1.0\n" for f, r, n in games))
    assert episodes_csv(str(tmp_path)) == str(run / "episodes.csv") == episodes_csv(str(run))
    windows = episode_windows(str(run / "episodes.csv"), 1000)
    # 21 + 21 - |return| points a game: 21 + 37 in the first window, 21 in the last
    assert windows == [
        {"from_frames": 0, "games": 2, "mean_return": -8.0, "steps_per_point": round(4540 / 58, 1)},
        {"from_frames": 2000, "games": 1, "mean_return": 21.0, "steps_per_point": 50.0}]
    assert main([f"--episodes={tmp_path}", "--window_frames=1000"]) == 0
    assert '"games": 2' in capsys.readouterr().out
    (run / "episodes.csv").write_text("env_steps,frames,episode_return,episode_length,wall_time\n")
    assert episode_windows(str(run / "episodes.csv"), 1000) == []  # a run with no game yet


def test_episodes_without_a_run_is_a_usage_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        main([f"--episodes={tmp_path}"])
    assert stop.value.code == 2 and "no episodes.csv" in capsys.readouterr().err
    (tmp_path / "episodes.csv").write_text(
        "env_steps,frames,episode_return,episode_length,wall_time\n")
    with pytest.raises(SystemExit) as stop:  # a run's games, not beside a mode that plays
        main([f"--episodes={tmp_path}", "--tracker_offset=4"])
    assert stop.value.code == 2 and "leave out --checkpoint" in capsys.readouterr().err


def test_a_saved_policy_acts_on_every_env():
    cfg, _ = make_config(default_values(env=ENV_ID))
    env = make_batched_env(ENV_ID, NUM_ENVS, cfg.env_options(training=False), seed=0)
    try:
        obs = env.reset()
    finally:
        env.close()
    starts = np.ones(NUM_ENVS, dtype=bool)
    greedy = policy_act(_untrained_checkpoint(), greedy=True, seed=0)
    actions = greedy(obs, starts)
    assert actions.shape == (NUM_ENVS,) and ((0 <= actions) & (actions < 6)).all()
    assert (greedy(obs, starts) == actions).all()


def test_the_tracker_returns_the_opening_serve():
    points = tracker_points(offset=4, wait=45, max_points=1)
    assert points and points[0][1] == 1, points  # the first point won: it can be returned
    assert points[0][0] > 64  # past the step where the trained policies lose it


def test_the_trace_env_shows_what_the_training_env_shows():
    cfg, _ = make_config(default_values(env=ENV_ID))
    options = dataclasses.replace(cfg.env_options(training=False), noop_threshold=0)
    batched, single = make_batched_env(ENV_ID, 1, options, seed=0), trace_env(options)
    rng = np.random.default_rng(0)
    try:
        obs, (mine, _) = batched.reset(), single.reset(seed=0)
        assert (obs[0] == np.asarray(mine)).all()
        for _ in range(300):
            action = int(rng.integers(0, 6))
            step = batched.step(np.array([action]))
            mine, reward, *_ = single.step(action)
            assert (step.obs[0] == np.asarray(mine)).all() and step.reward[0] == reward
    finally:
        batched.close()
        single.close()


def test_the_trace_follows_the_paddle_and_the_ball_by_the_ram():
    out = policy_trace(_untrained_checkpoint(), points=1, hold_down=20)
    (step, reward), = out["points"]
    trace = np.array(out["trace"])
    assert len(trace) == step and reward in (-1, 1)
    assert (trace[:, 0] == np.arange(1, step + 1)).all()
    assert (trace[:20, 4] == DOWN).all()
    paddle = trace[:, 3]
    assert paddle[0] < 150 <= paddle[20] and paddle[20] >= paddle[:20].max()  # DOWN lowered it
    ball_x = trace[trace[:, 2] > 0, 1]
    assert ball_x.max() - ball_x.min() > 80  # the ball crossed the court before the point
    p_up, p_down = trace[:, 5], trace[:, 6]
    assert ((p_up >= 0) & (p_down >= 0) & (p_up + p_down <= 1.0 + 1e-3)).all()
