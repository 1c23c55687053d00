"""How `RolloutStorage` (replay/storage.py) stores stacked pixels: each frame once.

Frame resolution at `put`, entry (t, j) = frame j of the stack at row t:

* an all-zero frame (the padding after a game reset) is the sentinel: pool index
  `pool_frames`, a frame of zeros that is never freed (the "-1" of the design);
* for t >= 1, if frame j equals frame j+1 of row t-1 (the stack shifted by one env
  step), the entry reuses that entry's pool index;
* otherwise the frame is *introduced*: rows 0 and the last C rows look it up (crc32 of
  its bytes, then a byte comparison) among the frames that sit in the last row
  ("tail") of a resident rollout, and reuse a match; everything else gets a new pool
  frame. Two looked-up frames of one rollout with equal bytes share one new frame.

Frames are compared as bytes, so every dtype comes back bit-exact.

A consecutive rollout of the same env therefore finds its row-0 frames in its
predecessor's tail while the predecessor is resident, and costs T new frames, not
T + C. Every entry holds one reference (int32 refcount per pool frame); overwriting
a position drops the old rollout's references and frees frames that reach 0.

Pool size and its bound
-----------------------
The pool has `pool_frames = capacity * T + C * max_chain_heads` frames (+ the zero
sentinel). Default `max_chain_heads`: `capacity // C` (at least 1) when T >= C, which
keeps Atari at <= 7.5 KB per stored step; `capacity` when T < C. With
`max_chain_heads >= capacity` the pool can never run out.

Assumption (A), true of ale-py's frame stacking: at every row t >= 1 at most one
entry is introduced (a shift brings one new frame; a reset row is `[0, .., 0, f]`).

Rollouts of one env are put in the order they were produced (each at most once).
The *predecessor* of r is the previous rollout of r's env (its row T stack is r's
row 0 stack); a resident r is a *chain head* if its predecessor is not resident. Let
R be the resident set and H the number of chain heads in it.

Claim: under (A) and T >= C, the frames in use never exceed T * |R| + C * H, so a
`put` cannot fail while H <= max_chain_heads.

Proof. Invariant (I): the frames referenced by tails of resident rollouts are
pairwise different in content. It holds initially; a `put` gives its tail only
frames that were looked up (entries of row T were introduced in rows > T - C, or
shifted from them), so each is either the resident tail frame with that content or
a new frame whose content no resident tail has, and two new ones never repeat
content; removing a rollout keeps (I). Let N(r) be the frames of r's entries
introduced at rows 1..T: |N(r)| <= T by (A). By induction on t, every frame of
row t is in N(r) or is row 0's entry j + t, which exists only if j + t <= C - 1;
with T >= C every frame of row T is in N(r). If r has a predecessor p, it was
resident when r was put (p is older than r and still resident), so each row-0
frame of r was looked up and, by (I), resolved to the frame of p's tail with that
content: row0(r) is within tail(p), within N(p). Frames are freed exactly when no
entry references them, so the frames in use are the union over r in R of
row0(r) and N(r), within the union of N(r) over R plus the row-0 frames of the
chain heads: at most T * |R| + C * H. QED.

With FIFO overwriting (the oldest position is replaced) and E envs whose every
rollout is put, in order, the chain heads are the oldest resident rollout of each env, so
H <= E: pass `max_chain_heads >= E` (the number of envs feeding the storage). A
replay that keeps only some rollouts of an env, or evicts out of order, makes more
heads; size it for that (`max_chain_heads=capacity` is always safe, 8.4 KB/step for
Atari at T=20). Rows that break (A) (not shifted, not reset-padded) cost up to C
frames each. If a `put` would need more free frames than there are,
`FramePoolExhaustedError` is raised before anything changes: the storage stays as
it was, the rollout is not stored.
"""

from __future__ import annotations

import zlib

import numpy as np
import torch

HASH_MASK = 0x7FFFFFFF  # crc32 folded to int32 >= 0; -1 marks "no frame"


def frame_hash(frame) -> int:
    """crc32 of a contiguous numpy byte row, as a non-negative int32."""
    return zlib.crc32(frame) & HASH_MASK


def plan_frames(obs: torch.Tensor, unroll_length: int, pixel_stack: int):
    """Resolve the entries of one rollout's obs `[T+1, C, *frame_shape]` (any dtype;
    T = `unroll_length`, C = `pixel_stack`) among themselves: no pool access, so a
    storage calls it outside its lock and then looks the result up in its pool.

    Frames are compared as bytes: uint8 reductions are the fast ones, and float
    frames come back bit-exact. Returns (raw: uint8 ndarray [(T+1)*C, bytes per
    frame]; codes: int64 ndarray [(T+1)*C], -1 for a zero frame, else the number
    r of a representative frame; reps: the raw row of each r; hashes: crc of each
    r, -1 where r is not looked up; tail: the hashes of row T's entries).
    """
    t, c = unroll_length, pixel_stack
    t1 = t + 1
    # numpy, single-threaded: torch's intra-op threads stall on a busy machine
    raw = np.ascontiguousarray(
        (obs if obs.dtype == torch.uint8 else obs.view(torch.uint8)).numpy())
    flat = raw.reshape(t1, c, -1)
    raw = raw.reshape(t1 * c, -1)
    nonzero = flat.any(-1).tolist()
    shifted = (~(flat[1:, :-1] ^ flat[:-1, 1:]).any(-1)).tolist() if c > 1 else None
    codes = [-1] * (t1 * c)
    reps: list[int] = []
    hashes: list[int] = []
    local: dict[int, list[int]] = {}
    for row in range(t1):
        looked_up = row == 0 or row > t - c
        for j in range(c):
            k = row * c + j
            if not nonzero[row][j]:
                continue
            if row > 0 and j < c - 1 and shifted[row - 1][j]:
                codes[k] = codes[k - c + 1]
                continue
            h = -1
            if looked_up:
                h = frame_hash(raw[k])
                same = [r for r in local.get(h, ()) if np.array_equal(raw[reps[r]], raw[k])]
                if same:
                    codes[k] = same[0]
                    continue
                local.setdefault(h, []).append(len(reps))
            codes[k] = len(reps)
            reps.append(k)
            hashes.append(h)
    tail = [hashes[codes[t * c + j]] if codes[t * c + j] >= 0 else -1 for j in range(c)]
    return raw, np.array(codes, dtype=np.int64), reps, hashes, tail
