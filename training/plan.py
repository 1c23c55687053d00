"""The run plan: the env probed once, and every size the run derives from it.

`make_plan(cfg)` builds one env to read its `EnvInfo`, then computes the rollout
slot spec, the slot count, the frame stack the replays share frames by, and the
bytes each replay will allocate (with `RolloutStorage`'s own formula). The session
checks the plan against the machine's memory before anything starts
(`check_memory`); the learner is built from it. Nothing here allocates.
"""

from __future__ import annotations

import dataclasses
import os
import shutil

import psutil
import torch

from replay.storage_replay import planned_bytes
from training.config import Config
from workers.slots import rollout_spec, spec_bytes
from wrappers.envs import EnvInfo, env_info


@dataclasses.dataclass(frozen=True)
class RunPlan:
    info: EnvInfo
    # field -> (shape [T+1, ...], dtype) of one rollout slot (workers/slots.py)
    spec: dict[str, tuple[tuple[int, ...], torch.dtype]]
    # one being written per env, then --queued_batches batches of finished rollouts, or
    # (flag unset) one more per env and two batches
    num_slots: int
    slot_bytes: int  # of all slots together, in shared memory
    pixel_stack: int | None  # frames per stacked obs that replays store once; None: no stack
    # frame-pool sizing of FIFO replays (replay/storage.py: a FIFO storage fed by E
    # envs has at most E chains of shared frames): the envs' own chains, those of a
    # resumed run's stored rollouts (--checkpoint_replay), and those every allowed
    # actor restart leaves behind (--max_actor_restarts x --envs_per_worker)
    max_chain_heads: int
    replay_bytes: tuple[int, ...]  # per `cfg.replay_specs` entry; 0 for the queue


def make_plan(cfg: Config, info: EnvInfo | None = None) -> RunPlan:
    """The plan of `cfg`'s run; `info` saves the probe when the caller has it."""
    info = info or env_info(cfg.env, cfg.env_options())
    model = cfg.model_spec(info)
    spec = rollout_spec(cfg.r_f_steps, info.obs_shape, info.obs_dtype, info.num_actions,
                        feature_size=model.feature_size if cfg.store_features else 0,
                        state_shape=model.state_shape, action_kind=model.action_kind,
                        final_obs=cfg.off_policy)
    ahead = cfg.queued_batches * cfg.batch_size if cfg.queued_batches else \
        cfg.n_envs + 2 * cfg.batch_size
    num_slots = cfg.n_envs + ahead  # one being written per env, the rest finished
    pixel_stack = info.frame_stack or None
    max_chain_heads = 2 * cfg.n_envs + cfg.max_actor_restarts * cfg.envs_per_worker
    return RunPlan(
        info=info, spec=spec, num_slots=num_slots,
        slot_bytes=spec_bytes(spec) * num_slots, pixel_stack=pixel_stack,
        max_chain_heads=max_chain_heads,
        replay_bytes=tuple(0 if e.type == "queue" else
                           planned_bytes(e, spec, cfg.r_f_steps, pixel_stack, max_chain_heads)
                           for e in cfg.replay_specs))


def check_memory(plan: RunPlan) -> str | None:
    """None if the slots fit shared memory and slots plus replays fit RAM (80% of
    what is free), else the message naming the flags to change."""
    shm = psutil.virtual_memory().available
    if os.path.isdir("/dev/shm"):
        shm = min(shm, shutil.disk_usage("/dev/shm").free)
    slots = plan.slot_bytes
    if slots > 0.8 * shm:
        return (f"--r_f_steps / --worker_count / --envs_per_worker / --batch_size: the rollout "
                f"slots need {slots / 2**30:.2f} GiB of shared memory and {shm / 2**30:.2f} GiB "
                "is free; make them smaller")
    replays = [b for b in plan.replay_bytes if b > 0]
    ram = psutil.virtual_memory().available
    if slots + sum(replays) > 0.8 * ram:
        sizes = ", ".join(f"{b / 2**30:.2f} GiB" for b in replays)
        return (f"--replay_parameters: the replay capacities need {sizes} of memory (plus "
                f"{slots / 2**30:.2f} GiB of rollout slots) and {ram / 2**30:.2f} GiB is "
                "available; lower 'capacity'")
    return None
