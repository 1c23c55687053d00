"""Which points of a Pong game a saved policy loses, as JSON: where a run's last points go.

    python -m bench.pong_points --checkpoint=results/<run> [--games=24] [--policy=greedy]
                                [--noop_threshold=30] [--seed=0]
    python -m bench.pong_points --tracker_offset=4 --tracker_wait=45 [--games=1]
    python -m bench.pong_points --checkpoint=results/<run> --trace_points=1 [--hold_down=40]
    python -m bench.pong_points --episodes=results/<run> [--window_frames=250000]

With --checkpoint: whole games of PongNoFrameskip-v4 (test mode's env options, but
`--noop_threshold` as given: 0 makes every game start alike) on 8 envs, actions
sampled from the policy or (`--policy=greedy`) its most likely one. For each point of
a game (index 0 = the game's first) it counts how often the agent lost it
(`lost_by_point`), and for each loss of a first point the env step of the game at
which it fell (`first_point_lost_at_step`). `lost_after_a_loss` and `lost_after_a_win`
are [points lost, points played] over the points that followed a lost and a won one:
whether losses come in runs. `steps_per_point` is the games' env steps over their
points (a game of return r has 42 - |r| points): short points are won outright, long
ones are rallies. Games still running when the quota is met are not counted.

With --episodes: no play, but a training run's episodes.csv read in windows of
`--window_frames` frames: for each window its games, their mean return and their env
steps per point, as above. Whether a run learned to win points outright or in rallies.

With --tracker_offset: no policy, but a paddle that follows the ball by the emulator's
RAM (ball y at byte 54, the agent's paddle at byte 51): after `--tracker_wait` env
steps of no-ops it moves the paddle down when the ball is below paddle + offset, up
when above it by more than 4, on one env with no no-op starts. It tells whether a
point can be returned at all from where the game puts it; `points` lists each point
as (env step, +1 won or -1 lost).

With --checkpoint and --trace_points=N: one game's first N points played greedily by
the policy, the emulator's RAM read at every env step. The env is gymnasium's
`AtariPreprocessing` (no no-ops) with a zero-padded frame stack and one frame of FIRE
after the reset: frame for frame the training envs' observations (ale-py's vector env)
at `--noop_threshold=0`. `points` lists (env step, +1 or -1), steps counted from 1 as
above; `trace` lists each env step as [step, ball x, ball y, paddle y, action, p(up),
p(down), value]. Heights are the RAM's: they grow downward, from 38 (the paddle
against the top wall) to 203 (against the bottom one). p(up) sums RIGHT and RIGHTFIRE,
p(down) LEFT and LEFTFIRE (the rest is NOOP and FIRE); value is the critic's, in
return units. `--hold_down=K` plays DOWN for the first K steps (the odds listed for
them are the policy's, not played) before the policy takes over.
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import json
import os
import sys

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from agents.networks import step_model  # noqa: E402
from bench.learning import curve  # noqa: E402
from training.checkpoint import load_checkpoint  # noqa: E402
from training.config import env_options  # noqa: E402
from training.evaluate import acting_model  # noqa: E402
from wrappers.envs import make_batched_env  # noqa: E402

ENV_ID = "PongNoFrameskip-v4"
NUM_ENVS = 8
BALL_X, BALL_Y, PADDLE_Y = 49, 54, 51  # Pong's RAM bytes
# Pong's minimal action set: RIGHT moves the paddle up, LEFT down
NOOP, FIRE, UP, DOWN, UP_FIRE, DOWN_FIRE = range(6)


def play_points(act, env, games: int) -> dict:
    """Play `games` whole games on the batched `env` with `act(obs, starts) -> actions`
    (uint8 [E, stack, 84, 84], bool [E] -> int [E]); the points the games lost, by index."""
    n = env.num_envs
    obs, starts = env.reset(), np.ones(n, dtype=bool)
    steps = np.zeros(n, dtype=np.int64)
    points: list[list[tuple[int, float]]] = [[] for _ in range(n)]  # (env step, reward)
    lost: dict[int, int] = {}
    after = {"loss": [0, 0], "win": [0, 0]}  # points lost, points played, after a lost/won one
    first_lost_at: list[int] = []
    returns: list[float] = []
    lengths: list[int] = []
    while len(returns) < games:
        step = env.step(act(obs, starts))
        obs, starts = step.obs, step.terminated | step.truncated
        steps += 1
        for i in np.flatnonzero(step.reward):
            points[i].append((int(steps[i]), float(step.reward[i])))
        for i, ret, _ in step.episodes:
            if len(returns) < games:
                assert sum(r for _, r in points[i]) == ret, "the points do not add up"
                returns.append(float(ret))
                lengths.append(int(steps[i]))
                for k, (t, r) in enumerate(points[i]):
                    if r < 0:
                        lost[k] = lost.get(k, 0) + 1
                        if k == 0:
                            first_lost_at.append(t)
                    if k:
                        cell = after["loss" if points[i][k - 1][1] < 0 else "win"]
                        cell[0], cell[1] = cell[0] + (r < 0), cell[1] + 1
            points[i], steps[i] = [], 0
    return {"games": len(returns), "mean": float(np.mean(returns)), "returns": returns,
            "lost_by_point": dict(sorted(lost.items())),
            "first_point_lost_at_step": first_lost_at,
            "lost_after_a_loss": after["loss"], "lost_after_a_win": after["win"],
            "steps_per_point": steps_per_point(np.array(lengths), np.array(returns))}


def steps_per_point(lengths: np.ndarray, returns: np.ndarray) -> float:
    """Env steps per point over whole games of Pong: int [G] lengths, float [G] returns
    (a game ends at 21, so it has 21 + 21 - |return| points)."""
    return float(lengths.sum() / (42 - np.abs(returns)).sum())


def episodes_csv(run: str) -> str | None:
    """The episodes.csv of a run directory (or of the one run under a `bench.learning`
    results directory), or None."""
    found = [os.path.join(run, "episodes.csv")] + sorted(
        glob.glob(os.path.join(run, "*", "episodes.csv")))
    return next((f for f in found if os.path.isfile(f)), None)


def episode_windows(path: str, window_frames: int) -> list[dict]:
    """The training games of an episodes.csv in windows of `window_frames` frames: per
    window, the frame it starts at, its games, their mean return and env steps per
    point."""
    cols = curve(path, window=1)
    frames, returns = cols["frames"], cols["episode_return"]
    if len(frames) == 0:
        return []
    windows = []
    for start in range(0, int(frames.max()) + 1, window_frames):
        inside = (frames >= start) & (frames < start + window_frames)
        if inside.any():
            windows.append({"from_frames": start, "games": int(inside.sum()),
                            "mean_return": round(float(returns[inside].mean()), 2),
                            "steps_per_point": round(steps_per_point(
                                cols["episode_length"][inside], returns[inside]), 1)})
    return windows


def policy_act(checkpoint: dict, greedy: bool, seed: int):
    """The saved policy as `act(obs, starts)`: one forward pass per env step."""
    model = acting_model(checkpoint)
    gen = torch.Generator().manual_seed(seed)
    state = model.initial_state(NUM_ENVS)

    def act(obs: np.ndarray, starts: np.ndarray) -> np.ndarray:
        nonlocal state
        with torch.inference_mode():
            logits, _, _, state = step_model(model, torch.from_numpy(obs), state,
                                             torch.from_numpy(starts))
            policy = model.distribution(logits)
            return (policy.mode() if greedy else policy.sample(gen)).numpy()
    return act


def trace_env(options):
    """One PongNoFrameskip-v4 whose observations are those of `make_batched_env` with
    `options` and no no-ops, frame for frame, and whose RAM can be read:
    `env.unwrapped.ale.getRAM()`."""
    import ale_py
    import gymnasium as gym

    class FireOnReset(gym.Wrapper):
        """One frame of FIRE after a reset, as ale-py's vector env presses it."""

        def reset(self, **kwargs):
            out = self.env.reset(**kwargs)
            self.env.unwrapped.ale.act(ale_py.Action.FIRE)
            return out

    gym.register_envs(ale_py)
    return gym.wrappers.FrameStackObservation(
        gym.wrappers.AtariPreprocessing(FireOnReset(gym.make(ENV_ID)), noop_max=0,
                                        frame_skip=options.skipped_frames),
        options.frames_stacked, padding_type="zero")


def policy_trace(checkpoint: dict, points: int, hold_down: int = 0) -> dict:
    """The first `points` points of one greedy game, step by step (see the module's
    docstring): {"points": [(env step, +1 or -1)], "trace": [[step, ball x, ball y,
    paddle y, action, p(up), p(down), value], ...]}."""
    model = acting_model(checkpoint)
    env = trace_env(env_options(checkpoint["config"], training=False))
    obs, _ = env.reset(seed=0)
    ale, state = env.unwrapped.ale, model.initial_state(1)
    step, out, trace, over = 0, [], [], False
    while len(out) < points and not over:
        with torch.inference_mode():
            logits, value, _, state = step_model(model, torch.from_numpy(np.asarray(obs)[None]),
                                                 state, torch.tensor([step == 0]))
        p = torch.softmax(logits.float(), -1).reshape(-1)
        action = DOWN if step < hold_down else int(p.argmax())
        step += 1
        ram = ale.getRAM()
        trace.append([step, int(ram[BALL_X]), int(ram[BALL_Y]), int(ram[PADDLE_Y]), action,
                      round(float(p[UP] + p[UP_FIRE]), 3), round(float(p[DOWN] + p[DOWN_FIRE]), 3),
                      round(float(value.reshape(-1)[0]), 3)])
        obs, reward, terminated, truncated, _ = env.step(action)
        over = terminated or truncated
        if reward:
            out.append((step, int(np.sign(reward))))
    env.close()
    return {"points": out, "trace": trace}


def tracker_points(offset: int, wait: int, max_points: int) -> list[tuple[int, int]]:
    """One game's first `max_points` points for the RAM tracker: (env step, +1 or -1)."""
    import ale_py
    import gymnasium as gym

    gym.register_envs(ale_py)
    env = gym.make(ENV_ID)  # no frameskip: 4 frames an env step, by hand
    env.reset(seed=0)
    ale = env.unwrapped.ale
    t, points, over = 0, [], False
    while len(points) < max_points and not over:
        ram = ale.getRAM()
        ball, paddle = int(ram[BALL_Y]), int(ram[PADDLE_Y]) + offset
        action = NOOP if t < wait else DOWN if ball > paddle else UP if ball < paddle - 4 else NOOP
        reward = 0.0
        for _ in range(4):
            _, r, terminated, truncated, _ = env.step(action)
            reward += float(r)
            over = over or terminated or truncated
        t += 1
        if reward:
            points.append((t, int(np.sign(reward))))
    env.close()
    return points


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--checkpoint", help="a run directory or a checkpoint file of a Pong run")
    p.add_argument("--games", type=int, default=24)
    p.add_argument("--policy", choices=("greedy", "sample"), default="greedy")
    p.add_argument("--noop_threshold", type=int, help="no-ops at a reset, up to (30)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tracker_offset", type=int, help="play the RAM tracker, not a policy")
    p.add_argument("--tracker_wait", type=int, default=0)
    p.add_argument("--trace_points", type=int, help="trace one greedy game's first N points")
    p.add_argument("--hold_down", type=int, default=0, help="with --trace_points: DOWN first")
    p.add_argument("--episodes", help="a training run's directory: its games in windows")
    p.add_argument("--window_frames", type=int, default=250_000)
    a = p.parse_args(argv)
    if a.episodes is not None:
        if a.checkpoint or a.tracker_offset is not None or a.trace_points is not None:
            p.error("--episodes: reads a run's training games; leave out --checkpoint, "
                    "--tracker_offset and --trace_points")
        path = episodes_csv(a.episodes)
        if path is None:
            p.error(f"--episodes: no episodes.csv in {a.episodes} or a directory under it")
        if a.window_frames <= 0:
            p.error("--window_frames: give a positive number of frames")
        print(json.dumps({"episodes": path, "windows": episode_windows(path, a.window_frames)}))
        return 0
    if a.tracker_offset is not None:
        points = tracker_points(a.tracker_offset, a.tracker_wait, max_points=a.games * 21)
        print(json.dumps({"tracker_offset": a.tracker_offset, "tracker_wait": a.tracker_wait,
                          "points": points}))
        return 0
    if a.checkpoint is None:
        p.error("--checkpoint: name a Pong run directory or checkpoint (or give --tracker_offset)")
    if a.hold_down and a.trace_points is None:
        p.error("--hold_down: only with --trace_points")
    if a.trace_points is not None and (a.policy != "greedy" or a.noop_threshold or a.seed):
        p.error("--trace_points: one greedy game without no-ops; leave out --policy, "
                "--noop_threshold and --seed")
    a.noop_threshold = 30 if a.noop_threshold is None else a.noop_threshold
    checkpoint = load_checkpoint(a.checkpoint)
    if checkpoint["config"]["env"] != ENV_ID:
        p.error(f"--checkpoint: a run of {checkpoint['config']['env']}, not of {ENV_ID}")
    torch.set_num_threads(1)
    if a.trace_points is not None:
        out = policy_trace(checkpoint, a.trace_points, a.hold_down)
        print(json.dumps({"checkpoint": a.checkpoint, "hold_down": a.hold_down, **out}))
        return 0
    options = dataclasses.replace(env_options(checkpoint["config"], training=False),
                                  noop_threshold=a.noop_threshold)
    env = make_batched_env(ENV_ID, NUM_ENVS, options, a.seed)
    try:
        out = play_points(policy_act(checkpoint, a.policy == "greedy", a.seed), env, a.games)
    finally:
        env.close()
    print(json.dumps({"checkpoint": a.checkpoint, "policy": a.policy,
                      "noop_threshold": a.noop_threshold, **out}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
