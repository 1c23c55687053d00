"""Atomic file writes: the one helper behind every file that is replaced while others read it.

The new content goes to `<path>.tmp`, is flushed and fsynced, then renamed over `path`
(os.replace), so a reader sees the old file or the new one, never part of one; a write
that fails or is killed leaves at most the stray `<path>.tmp`.

    atomic_write_text   text as given (newline=""), e.g. CSV rows ending in \\r\\n
    atomic_write        bytes from write_fn(file), e.g. torch.save; then the directory is
                        fsynced, so the rename itself survives a crash
    fsync_path          fsync of a file or directory by name (a directory, for callers that
                        rename more than one file)

Used by training/run_dir.py (flags.json, summary.json, cut CSVs), training/checkpoint.py
(checkpoint_<updates>.pt) and the sweeps (sweeps/directory.py's sweep_summary.csv,
multi_train.py's sweep.json).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import BinaryIO


def atomic_write(path: str, write_fn: Callable[[BinaryIO], object], *,
                 sync_dir: bool = True) -> None:
    """Replace `path` with the bytes `write_fn` writes into the binary file it is given.

    With `sync_dir` (the default) the directory is fsynced after the rename; a caller that
    renames more files may pass False and call `fsync_path` once after the last.
    """
    tmp = f"{path}.tmp"
    with open(tmp, "wb") as f:
        write_fn(f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    if sync_dir:
        fsync_path(os.path.dirname(path) or ".")


def fsync_path(path: str) -> None:
    """fsync a file or a directory by name: a file's data (any descriptor of it syncs
    them), a directory's entries (renames, links) reach the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)



def atomic_write_text(path: str, text: str) -> None:
    """Replace `path` with `text` in UTF-8, written as given (no newline translation)."""
    atomic_write(path, lambda f: f.write(text.encode("utf-8")), sync_dir=False)
