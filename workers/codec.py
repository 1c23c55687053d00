"""Stacked frames sent once: the wire format of rollouts that leave the machine
(workers/ray_actor.py packs them, workers/ray_pool.py unpacks them).

A rollout's obs `[T+1, E, C, *F]` (C stacked frames of shape F per step, usually
uint8 4x84x84) mostly repeats itself: row t's stack is row t-1's shifted by one
new frame. `pack_frames` keeps, per env, row 0's C frames and then one frame per
row where the stack shifted, or the whole stack where it did not (a reset row
`[0, .., 0, f]`, or anything else); `ends[t, e]` is where row t's stack ends in
`frames`, so that `obs[t, e] == frames[ends[t, e] - C : ends[t, e]]`. A T=20 Pong
rollout costs about (C + T) frames per env instead of (T+1) x C. Exact for any
dtype and content: frames are compared as values.
"""

from __future__ import annotations

import numpy as np


def pack_frames(obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """obs [T+1, E, C, *F] -> (frames [N, *F] of obs's dtype, ends int64 [T+1, E])."""
    t1, e, c = obs.shape[:3]
    by_env = np.ascontiguousarray(np.swapaxes(obs, 0, 1))  # [E, T+1, C, *F]
    shifted = (by_env[:, 1:, :-1] == by_env[:, :-1, 1:]).reshape(e, t1 - 1, -1).all(-1)
    counts = np.full((e, t1), c, dtype=np.int64)
    counts[:, 1:][shifted] = 1
    flat_counts = counts.ravel()  # env-major rows
    starts = np.cumsum(flat_counts) - flat_counts
    row = np.repeat(np.arange(e * t1), flat_counts)
    k = np.arange(int(flat_counts.sum())) - np.repeat(starts, flat_counts)
    source = row * c + (c - flat_counts[row]) + k  # the newest `count` frames of each row
    frames = by_env.reshape(e * t1 * c, *obs.shape[3:])[source]
    ends = (starts + flat_counts).reshape(e, t1).T.copy()
    return frames, ends


def unpack_frames(frames: np.ndarray, ends: np.ndarray, stack: int) -> np.ndarray:
    """(frames [N, *F], ends [T+1, E]) -> obs [T+1, E, stack, *F]: `pack_frames`'s inverse."""
    return frames[ends[..., None] - stack + np.arange(stack)]
