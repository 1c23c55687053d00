"""Frames sent once (workers/codec.py): exact round trips against made-up stacks with
shifts, reset rows and rows that are neither, and the size it saves."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from workers.codec import pack_frames, unpack_frames


def play(rng, t1: int, e: int, c: int, p_reset: float, p_other: float) -> np.ndarray:
    """obs [T+1, E, C, 3, 2] uint8 as an env would stack them."""
    obs = np.zeros((t1, e, c, 3, 2), dtype=np.uint8)
    obs[0] = rng.integers(0, 256, obs[0].shape)
    for t in range(1, t1):
        for j in range(e):
            u = rng.random()
            frame = rng.integers(0, 4, (3, 2))  # few values: equal frames are common
            if u < p_reset:
                obs[t, j, :-1] = 0
                obs[t, j, -1] = frame
            elif u < p_reset + p_other:
                obs[t, j] = rng.integers(0, 4, obs[t, j].shape)
            else:
                obs[t, j, :-1] = obs[t - 1, j, 1:]
                obs[t, j, -1] = frame
    return obs


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 12), st.integers(1, 4), st.integers(1, 5), st.floats(0, 0.5),
       st.floats(0, 0.3), st.integers(0, 2**31))
def test_round_trip_is_exact(t, e, c, p_reset, p_other, seed):
    obs = play(np.random.default_rng(seed), t + 1, e, c, p_reset, p_other)
    frames, ends = pack_frames(obs)
    assert ends.shape == (t + 1, e) and frames.dtype == obs.dtype
    assert np.array_equal(unpack_frames(frames, ends, c), obs)


def test_a_shifting_rollout_costs_one_frame_per_step():
    t1, e, c = 21, 3, 4
    obs = play(np.random.default_rng(0), t1, e, c, p_reset=0.0, p_other=0.0)
    frames, _ = pack_frames(obs)
    assert len(frames) == e * (c + t1 - 1)  # 24 frames per env, not 84


def test_float_frames_and_a_single_frame_stack():
    rng = np.random.default_rng(1)
    obs = rng.standard_normal((5, 2, 1, 4)).astype(np.float32)
    frames, ends = pack_frames(obs)
    assert np.array_equal(unpack_frames(frames, ends, 1), obs)
