"""Atomic checkpoints: write a temporary file, flush, fsync, rename.

A checkpoint is a dict saved with torch.save:
    format_version, config (dict), model, optimizer, counters
    (env_steps, frames, updates, episodes, wall_time), rng (torch, numpy).
"""

from __future__ import annotations

import os

import torch

FORMAT_VERSION = 1


class CheckpointError(Exception):
    pass


def save_checkpoint(path: str, state: dict) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "wb") as f:
        torch.save({"format_version": FORMAT_VERSION, **state}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def resolve_checkpoint_path(url: str) -> str:
    """A run directory names its checkpoint.pt; a file names itself."""
    return os.path.join(url, "checkpoint.pt") if os.path.isdir(url) else url


def load_checkpoint(url: str) -> dict:
    path = resolve_checkpoint_path(url)
    if not os.path.isfile(path):
        raise CheckpointError(f"no checkpoint at {path}")
    try:
        state = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as e:  # noqa: BLE001 - any unpickling failure means a bad file
        raise CheckpointError(
            f"{path} is not a readable checkpoint (truncated or corrupt): {e}"
        ) from e
    if not isinstance(state, dict) or state.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(f"{path} is not a checkpoint of format {FORMAT_VERSION}")
    return state
