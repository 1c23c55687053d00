"""ViZDoom (wrappers/vizdoom.py): the episode ends the learner sees, and short runs
through main.py's entry (`main.run`, in this process): actors, --serial with the
evaluator, test mode with --render. HealthGatheringSupreme's run is Ray's, in
tests/test_pairs_ray.py, on that module's Ray instance."""

from __future__ import annotations

import glob
import json
import os

import numpy as np

from option_flags import default_values
from tests.pair_runs import DEADLINE_S, deadline, invoke
from training.config import make_config
from wrappers.batched import EnvOptions
from wrappers.envs import check_env_id, env_info, make_batched_env

NOTHING = np.zeros(1, dtype=np.int64)  # action 0: no button pressed


def _first_end(env_id: str):
    """(env steps, the step that ended the first episode, the observation before it)."""
    env = make_batched_env(env_id, 1, EnvOptions(), seed=0)
    before = env.reset()
    for t in range(1, 1000):
        step = env.step(NOTHING)
        if step.episodes:
            env.close()
            return t, step, before
        before = step.obs
    raise AssertionError("no episode ended in 1,000 steps")


def test_a_timeout_truncates_and_bootstraps_from_the_last_screen(tmp_path, monkeypatch):
    # Basic: 300 tics, 75 env steps of 4 tics, at -1 a tic; doing nothing outlives it
    monkeypatch.chdir(tmp_path)
    t, step, before = _first_end("VizdoomBasic-v1")
    assert os.listdir(tmp_path) == []  # no _vizdoom.ini nor _vizdoom/ where it ran
    assert t == 75 and step.episodes == [(0, -300.0, 75)]
    assert step.truncated[0] and not step.terminated[0]
    np.testing.assert_array_equal(step.final_obs[0], before[0])
    assert not np.array_equal(step.obs[0], before[0])  # the next episode's first screen


def test_a_death_terminates():
    # DefendCenter: doing nothing, the player is killed well before 2,100 tics, -1 for it
    t, step, _ = _first_end("VizdoomDefendCenter-v1")
    assert t < 2100 // 4 and step.episodes[0][1] == -1.0
    assert step.terminated[0] and not step.truncated[0] and step.final_obs is None


def test_ids_it_cannot_play_are_refused_with_the_reason():
    assert "MultiBinary" in check_env_id("VizdoomBasic-MultiBinary-v1")
    assert "delta buttons" in check_env_id("VizdoomDeathmatch-v1")
    assert "VizdoomDefendCenter-v1" in check_env_id("VizdoomNoSuch-v1")
    assert check_env_id("VizdoomMyWayHome-v1") is None


def test_observations_frames_and_defaults():
    info = env_info("VizdoomHealthGatheringSupreme-v1", EnvOptions())
    assert (info.obs_shape, info.obs_dtype, info.num_actions) == ((3, 72, 128), "uint8", 4)
    assert (info.frames_per_step, info.frame_stack, info.kind) == (4, 0, "vizdoom")
    cfg, errors = make_config(default_values(env="VizdoomBasic-v1"))
    assert not errors, errors
    assert (cfg.agent, cfg.use_lstm, cfg.lstm_size, cfg.r_f_steps) == ("ppo", True, 512, 32)
    assert (cfg.batch_size, cfg.ppo_epochs, cfg.ppo_minibatches, cfg.lr) == (16, 1, 4, 2.5e-4)
    cfg, errors = make_config(default_values(env="CartPole-v1"))
    assert not cfg.use_lstm and cfg.lstm_size == 128


# a few updates: one actor of 4 envs, batches of 4 rollouts of 32 steps, small nets
SMALL = dict(environment_max_steps=1024, batch_size=4, envs_per_worker=4, worker_count=1,
             hidden_size=64, lstm_size=64, learner_threads=1, status_interval=600.0)


def train(results: str, **flags) -> str:
    """A short run through main.py's entry in this process (tests/pair_runs.py's
    `invoke`); its run directory."""
    with deadline(DEADLINE_S):
        status, err = invoke(**SMALL, **flags, results_dir=results)
    assert status == 0, err[-3000:]
    (run,) = glob.glob(os.path.join(results, "*"))
    summary = json.load(open(os.path.join(run, "summary.json")))
    assert summary["env_steps"] >= 1024 and summary["frames"] == 4 * summary["env_steps"]
    assert summary["updates"] >= 4
    return run


def test_a_serial_run_of_basic_with_its_evaluations(results):
    run = train(results, env="VizdoomBasic-v1", serial=True, eval_interval=512,
                eval_episodes=2)
    assert len(open(os.path.join(run, "eval.csv")).readlines()) >= 3  # a header, 2 rows


def test_actors_train_defend_center_and_test_mode_records_a_gif(results):
    run = train(results, env="VizdoomDefendCenter-v1", eval_interval=0)
    with deadline(DEADLINE_S):
        status, err = invoke(op_mode="test", load_model_url=run, test_episode_count=1,
                             render=True, video_format="gif", worker_count=1,
                             results_dir=results + "_test")
    assert status == 0, err[-3000:]
    (test_run,) = glob.glob(os.path.join(results + "_test", "*"))
    from PIL import Image

    with Image.open(os.path.join(test_run, "test_video.gif")) as gif:
        assert gif.size[0] * 3 == gif.size[1] * 4 and gif.n_frames > 1  # 160x120, scaled
