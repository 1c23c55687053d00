"""Test mode: play full games with a saved agent, headless by default.

Games are whole games (no life-loss endings) and scores are unclipped. The games
are spread over `worker_count` processes, each playing its quota on a batched env
of up to `envs_per_worker` envs; each env has a fixed quota of games so that
short games are not over-represented. Actions are sampled from the policy, or
the most likely one with `--test_policy=greedy`. With `--render` the first games
are shown in a window, or, headless, recorded to `test_video.mp4`.
Writes test_episodes.csv and test_summary.json into a new run directory.
"""

from __future__ import annotations

import csv
import json
import signal
import time

import numpy as np
import torch
import torch.multiprocessing as mp

from agents.registry import model_spec
from training.checkpoint import acting_weights
from training.config import SAVED_BEFORE, Config, env_options
from training.run_dir import RunDir
from workers.evaluator import play
from wrappers.envs import make_batched_env, playback_fps
from wrappers.video import VideoSink, has_display


def trained_model(info: dict, trained: dict):
    """The net the checkpoint's policy acts with (`acting_weights`), before its
    weights are loaded (`SAVED_BEFORE` fills what older checkpoints lack)."""
    return model_spec(info, {**SAVED_BEFORE, **trained}).build()


def acting_model(ckpt: dict):
    """The checkpoint's acting policy (`acting_weights`), loaded, in eval mode."""
    model = trained_model(ckpt["env_info"], ckpt["config"])
    model.load_state_dict(acting_weights(ckpt))
    return model.eval()


def _play_quota(model_state, info, trained, env_id, n_envs, episodes, greedy, seed):
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    torch.set_num_threads(1)
    model = trained_model(info, trained)
    model.load_state_dict(model_state)
    model.eval()
    env = make_batched_env(env_id, n_envs, env_options(trained, training=False), seed)
    try:
        return play(model, env, episodes, greedy, seed)
    finally:
        env.close()


def evaluate(cfg: Config, ckpt: dict, stop_requested) -> int:
    info, trained = ckpt["env_info"], ckpt["config"]
    run = RunDir(cfg.results_dir, cfg.env, cfg.to_dict())
    greedy = cfg.test_policy == "greedy"
    quotas = [q for q in np.array_split(np.arange(cfg.test_episode_count), cfg.worker_count)
              if len(q)]
    results: list[tuple[float, int]] = []
    if cfg.render:
        results += _render_games(cfg, ckpt, run, greedy, min(3, len(quotas[0])))
        quotas[0] = quotas[0][len(results):]
    jobs = [(acting_weights(ckpt), info, trained, cfg.env, min(len(q), cfg.envs_per_worker), len(q),
             greedy, cfg.seed + 7919 * (i + 1)) for i, q in enumerate(quotas) if len(q)]
    results += _play_in_parallel(jobs, stop_requested, run.log)
    return _write_results(cfg, run, results, info)


def _play_in_parallel(jobs: list, stop_requested, log) -> list[tuple[float, int]]:
    """Run `_play_quota` jobs in processes; on a stop, what finished so far (nothing)."""
    if not jobs:
        return []
    with mp.get_context("spawn").Pool(len(jobs)) as pool:
        pending = pool.starmap_async(_play_quota, jobs)
        while not pending.ready():
            if stop_requested():
                pool.terminate()
                log.info("stopped before the games finished")
                return []
            time.sleep(0.1)
        return [episode for part in pending.get() for episode in part]


def _render_games(cfg: Config, ckpt: dict, run: RunDir, greedy: bool, games: int
                  ) -> list[tuple[float, int]]:
    """Play `games` games on one env, shown or recorded."""
    info, trained = ckpt["env_info"], ckpt["config"]
    model = acting_model(ckpt)
    path = None if has_display() else run.file(f"test_video.{cfg.video_format}")
    scale = 4 if len(info["obs_shape"]) == 3 else 1
    video = VideoSink(path, fps=playback_fps(cfg.env, info["frames_per_step"]), scale=scale)
    env = make_batched_env(cfg.env, 1, env_options(trained, training=False), cfg.seed,
                           render=True)
    try:
        results = play(model, env, games, greedy, cfg.seed, video, video_games=games)
    finally:
        env.close()
        video.close()
    run.log.info(f"recorded the first {games} games to {path}" if path
                 else f"showed the first {games} games")
    return results


def _write_results(cfg: Config, run: RunDir, results, info) -> int:
    with open(run.file("test_episodes.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["episode", "episode_return", "episode_length"])
        for i, (ret, length) in enumerate(results):
            w.writerow([i, ret, length])
    returns = np.array([r for r, _ in results]) if results else np.zeros(0)
    stat = (lambda fn: float(fn(returns))) if results else (lambda fn: None)
    summary = {
        "episodes": len(results),
        "mean": stat(np.mean), "std": stat(np.std), "min": stat(np.min),
        "max": stat(np.max), "median": stat(np.median),
        "frames": int(sum(n for _, n in results) * info["frames_per_step"]),
        "policy": cfg.test_policy,
        "checkpoint": cfg.load_model_url,
    }
    with open(run.file("test_summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
    run.log.info(f"test: {json.dumps(summary)}")
    run.close()
    return 0
