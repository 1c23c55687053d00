"""Atomic, rotated checkpoints.

`save_checkpoint` writes `checkpoint_<updates>.pt` through a temporary file
(flush, fsync, rename: training/files.py's atomic_write), then points
`checkpoint.pt` at it (a hard link, replaced atomically), fsyncs the directory
and deletes all but the newest `keep`. At every moment
`checkpoint.pt` is a complete checkpoint: a save that fails or is killed leaves
at most a stray `*.tmp` file. A resume from an older numbered checkpoint starts a
branch (`start_branch`): the later checkpoints move to `superseded/`.

A checkpoint is a dict saved with torch.save:
    format_version (2), config (dict), counters (env_steps, updates, episodes,
    wall_time, resumes, evaluations), recent_returns, best_mean_return_100,
    last_eval, best_eval, saved_at (unix time), rng (torch, numpy, python; cuda where
    used: `rng_state`), env_info, and policies: one dict per policy (its
    `training.policy_learner.PolicyLearner.state_dict`): agent (the agent's
    state_dict: model, optimizers by name, targets by name, and what the algorithm
    keeps: ppo's minibatch generator, impact's update count), replays (one state dict
    per --replay_parameters entry: sampling counters and lambda, and the stored
    rollouts only with --checkpoint_replay) and, from data-parallel learners
    (--learner_count), rank_replays: the replays of ranks 1.. in order.
`load_checkpoint` converts a checkpoint of format 1 (one policy whose agent's parts
lay at the top level) with `upgrade`, so runs saved before resume and test.
"""

from __future__ import annotations

import glob
import os
import random
import re

import numpy as np
import torch

from training.files import atomic_write, fsync_path

FORMAT_VERSION = 2
# format 1's top-level keys that were the agent's state (impact's target under its own key)
_AGENT_KEYS_V1 = ("model", "optimizer", "ppo_generator", "impact_target", "impact_updates")
LATEST = "checkpoint.pt"
_NUMBERED = re.compile(r"checkpoint_(\d+)\.pt$")


class CheckpointError(Exception):
    pass


def _point_latest_at(run_path: str, path: str) -> None:
    """Make `checkpoint.pt` a hard link to `path`, replaced atomically."""
    latest = os.path.join(run_path, LATEST)
    link_tmp = f"{latest}.tmp"
    if os.path.lexists(link_tmp):
        os.remove(link_tmp)
    os.link(path, link_tmp)
    os.replace(link_tmp, latest)


def save_checkpoint(run_path: str, updates: int, state: dict, keep: int = 3) -> str:
    """Write a checkpoint of `state` in `run_path`; returns the path of checkpoint.pt."""
    name = os.path.join(run_path, f"checkpoint_{updates:09d}.pt")
    atomic_write(name, lambda f: torch.save({"format_version": FORMAT_VERSION, **state}, f),
                 sync_dir=False)  # one fsync of the directory below covers both renames
    _point_latest_at(run_path, name)
    fsync_path(run_path)
    numbered = sorted(p for p in glob.glob(os.path.join(run_path, "checkpoint_*.pt"))
                      if _NUMBERED.search(p))
    for old in numbered[:-keep]:
        os.remove(old)
    return os.path.join(run_path, LATEST)


def start_branch(run_path: str, loaded: str, updates: int) -> list[str]:
    """Make a resumed checkpoint the newest of its run directory before the resumed
    run writes anything: numbered checkpoints of more than `updates` updates (saved
    by a later run from which this resume branches off) are moved into
    `superseded/`, out of rotation's and a later resume's way, and `checkpoint.pt`
    points at `loaded` (the file the resume read). Returns the moved file names."""
    moved = []
    for path in sorted(glob.glob(os.path.join(run_path, "checkpoint_*.pt"))):
        m = _NUMBERED.search(path)
        if m and int(m.group(1)) > updates:
            os.makedirs(os.path.join(run_path, "superseded"), exist_ok=True)
            os.replace(path, os.path.join(run_path, "superseded", os.path.basename(path)))
            moved.append(os.path.basename(path))
    latest = os.path.join(run_path, LATEST)
    if os.path.abspath(loaded) != os.path.abspath(latest) and os.path.exists(loaded):
        _point_latest_at(run_path, loaded)
    fsync_path(run_path)
    return moved


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
    if not isinstance(state, dict) or state.get("format_version") not in (1, FORMAT_VERSION):
        raise CheckpointError(f"{path} is not a checkpoint of format 1 or {FORMAT_VERSION}")
    return upgrade(state)


def upgrade(state: dict) -> dict:
    """A checkpoint of format 1 as format 2 (one policy); a format-2 one as it is."""
    if state["format_version"] == FORMAT_VERSION:
        return state
    state = dict(state)
    old = {k: state.pop(k) for k in _AGENT_KEYS_V1 if k in state}
    agent = {"model": old.pop("model"), "optimizers": {"main": old.pop("optimizer")},
             "targets": {}, **old}
    if "impact_target" in agent:
        agent["targets"]["impact"] = agent.pop("impact_target")
    state["policies"] = [{"agent": agent, "replays": state.pop("replays", [])}]
    state["format_version"] = FORMAT_VERSION
    return state


def acting_weights(state: dict, policy_id: int = 0) -> dict:
    """The state dict of the model policy `policy_id` of a checkpoint acts with: its
    "acting_model" where the agent acts with a part of its model (off-policy agents'
    actor), else the agent's model."""
    part = state["policies"][policy_id]
    return part.get("acting_model", part["agent"]["model"])


def policy_view(state: dict, policy_id: int) -> dict:
    """A checkpoint of several policies seen as one of policy `policy_id` alone (its
    flags as "config", its part as the only policy): what test mode plays."""
    part = state["policies"][policy_id]
    return {**state, "config": part.get("config", state["config"]), "policies": [part]}


def chosen_policy(state: dict, index: int | None) -> tuple[int, str]:
    """The policy test mode plays (`--policy_index`, or the best by its last
    evaluation, else by its mean-100 training return) and why."""
    count = len(state["policies"])
    if index is not None:
        return index, f"--policy_index={index}"
    reports = state.get("policy_reports") or [{}] * count
    evals = [r.get("last_eval") for r in reports]
    if all(evals):
        scores, by = [e["mean"] for e in evals], "its last evaluation"
    else:
        scores = [float(np.mean(r["recent_returns"])) if r.get("recent_returns") else None
                  for r in reports]
        by = "its mean training return over its last 100 episodes"
    known = [(v, -k) for k, v in enumerate(scores) if v is not None]
    if not known:
        return 0, "no policy has a score yet: policy 0"
    best = -max(known)[1]
    return best, f"the best of the {count} policies by {by} ({scores[best]:.3g})"


def rng_state() -> dict:
    """The learner process's random states, for a checkpoint (CUDA's where it is used)."""
    state = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(),
             "python": random.getstate()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(rng: dict) -> None:
    torch.set_rng_state(rng["torch"])
    np.random.set_state(rng["numpy"])
    random.setstate(rng["python"])
    if "cuda" in rng and torch.cuda.is_available() \
            and len(rng["cuda"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(rng["cuda"])
