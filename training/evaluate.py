"""Test mode: play full games with a saved agent, headless.

Games are whole games (no life-loss endings) and scores are unclipped. Up to 8
envs play in one batched env; each env has a fixed quota of games so that short
games are not over-represented. Writes test_episodes.csv and test_summary.json
into a new run directory and prints the summary.
"""

from __future__ import annotations

import csv
import json
import sys

import numpy as np
import torch

from agents.networks import build_model
from training.checkpoint import CheckpointError, load_checkpoint
from training.learner import env_options
from training.run_dir import RunDir
from wrappers.envs import make_batched_env


def play(model, env, episodes: int, greedy: bool, seed: int) -> list[tuple[float, int]]:
    """Play `episodes` games over env.num_envs envs; (return, length in env steps)."""
    n = env.num_envs
    quotas = np.array([episodes // n + (1 if i < episodes % n else 0) for i in range(n)])
    done = np.zeros(n, dtype=np.int64)
    results: list[tuple[float, int]] = []
    gen = torch.Generator().manual_seed(seed)
    obs = torch.from_numpy(env.reset())
    with torch.inference_mode():
        while (done < quotas).any():
            logits, _ = model(obs)
            if greedy:
                action = logits.argmax(-1)
            else:
                action = torch.multinomial(torch.softmax(logits, -1), 1, generator=gen)[:, 0]
            step = env.step(action.numpy())
            obs = torch.from_numpy(step.obs)
            for i, ret, length in step.episodes:
                if done[i] < quotas[i]:
                    done[i] += 1
                    results.append((ret, length))
    return results


def evaluate(cfg, greedy: bool = False) -> int:
    try:
        ckpt = load_checkpoint(cfg.load_model_url)
    except CheckpointError as e:
        print(f"error: --load_model_url: {e}", file=sys.stderr)
        return 2
    trained = ckpt["config"]
    info = ckpt["env_info"]
    model = build_model(tuple(info["obs_shape"]), info["num_actions"], trained["hidden_size"])
    model.load_state_dict(ckpt["model"])
    model.eval()
    run = RunDir(cfg.results_dir, trained["env"], {**cfg.to_dict(), "trained_config": trained})
    n_envs = min(cfg.test_episode_count, 8)
    # The env exactly as trained (frameskip, stack, noops, sticky actions), whole games.
    options = env_options(trained, training=False)
    env = make_batched_env(trained["env"], n_envs, options, cfg.seed)
    try:
        results = play(model, env, cfg.test_episode_count, greedy, cfg.seed)
    finally:
        env.close()
    returns = np.array([r for r, _ in results])
    with open(run.file("test_episodes.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["episode", "episode_return", "episode_length"])
        for i, (ret, length) in enumerate(results):
            w.writerow([i, ret, length])
    summary = {
        "episodes": len(results),
        "mean": float(returns.mean()),
        "std": float(returns.std()),
        "min": float(returns.min()),
        "max": float(returns.max()),
        "median": float(np.median(returns)),
        "frames": int(sum(n for _, n in results) * info["frames_per_step"]),
        "checkpoint": cfg.load_model_url,
    }
    with open(run.file("test_summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
    run.log.info(f"test: {json.dumps(summary)}")
    run.close()
    return 0
