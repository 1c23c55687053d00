"""Atomic, rotated checkpoints.

`save_checkpoint` writes `checkpoint_<updates>.pt` through a temporary file
(flush, fsync, rename: training/files.py's atomic_write), then points
`checkpoint.pt` at it (a hard link, replaced atomically), fsyncs the directory
and deletes all but the newest `keep`. At every moment
`checkpoint.pt` is a complete checkpoint: a save that fails or is killed leaves
at most a stray `*.tmp` file.

A checkpoint is a dict saved with torch.save:
    format_version, config (dict), model, optimizer, counters (env_steps, updates,
    episodes, wall_time), recent_returns, best_mean_return_100,
    rng (torch, numpy, python), replays (one state dict per --replay_parameters
    entry: sampling counters and lambda, and the stored rollouts only with
    --checkpoint_replay), env_info.
"""

from __future__ import annotations

import glob
import os
import re

import torch

from training.files import atomic_write, fsync_dir

FORMAT_VERSION = 1
LATEST = "checkpoint.pt"
_NUMBERED = re.compile(r"checkpoint_(\d+)\.pt$")


class CheckpointError(Exception):
    pass


def save_checkpoint(run_path: str, updates: int, state: dict, keep: int = 3) -> str:
    """Write a checkpoint of `state` in `run_path`; returns the path of checkpoint.pt."""
    name = os.path.join(run_path, f"checkpoint_{updates:09d}.pt")
    atomic_write(name, lambda f: torch.save({"format_version": FORMAT_VERSION, **state}, f),
                 sync_dir=False)  # one fsync of the directory below covers both renames
    latest = os.path.join(run_path, LATEST)
    link_tmp = f"{latest}.tmp"
    if os.path.lexists(link_tmp):
        os.remove(link_tmp)
    os.link(name, link_tmp)
    os.replace(link_tmp, latest)
    fsync_dir(run_path)
    numbered = sorted(p for p in glob.glob(os.path.join(run_path, "checkpoint_*.pt"))
                      if _NUMBERED.search(p))
    for old in numbered[:-keep]:
        os.remove(old)
    return latest


def resolve_checkpoint_path(url: str) -> str:
    """A run directory names its checkpoint.pt; a file names itself."""
    return os.path.join(url, LATEST) if os.path.isdir(url) else url


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
