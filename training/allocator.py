"""Freed memory stays in the learner's heap for its next allocations (glibc's malloc).

A learner's update allocates and frees the same large tensors in every minibatch pass
(Pong's: a minibatch of 256 stacked frames as float32 is 29 MB, the first
convolution's output 13 MB; the pass over the whole batch's 1,032 frames for the
value targets, 53 MB). By default glibc gives such a block back to the kernel on
`free` (one above its mmap threshold, which it raises as far as 32 MiB, and the
heap's free top past its trim threshold), and the next allocation faults each page of
it in again, zero-filled by the kernel. `keep_freed_memory()` raises both thresholds
with `mallopt` (what the environment variables MALLOC_MMAP_THRESHOLD_ and
MALLOC_TRIM_THRESHOLD_ do) for the process that calls it: `build_driver` does, in each
learner's process, except in the serial mode, whose actors step in that process. The
actors keep glibc's defaults: with these thresholds an actor alone stepped 10-17%
slower (its envs' and its forward pass's allocations are many and small).

Where the environment names either threshold, the user's setting (which glibc read
at start-up) stands and nothing is changed. What is computed does not change; the
process's resident memory stays at its peak instead of shrinking. The figures are in
docs/design-notes.md ("Where a 2-core run spends its CPU").
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # mallopt's parameters (glibc's malloc.h)
MMAP_THRESHOLD = 1 << 30  # blocks below 1 GiB come from the heap
TRIM_THRESHOLD = (1 << 31) - 1  # the heap is never trimmed (mallopt takes an int)
USER_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")


def keep_freed_memory() -> bool:
    """Raise this process's mmap and trim thresholds; True where glibc took both, False
    where the environment sets either (`USER_SETTINGS`: left as the user set them) or
    the C library has no `mallopt` (not glibc: macOS, musl). Calling it again changes
    nothing."""
    if any(name in os.environ for name in USER_SETTINGS):
        return False
    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c")).mallopt
    except (OSError, AttributeError, TypeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)
                and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
