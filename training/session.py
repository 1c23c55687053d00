"""One invocation of the platform: a new run, a resumed run, or a test.

Everything that can be checked is checked before anything is written: settings
that cannot change mid-run, and whether the shared-memory rollout slots fit.
A resumed run continues in its own run directory: counters, optimizer, learning
rate schedule and RNG states go on, and rows are appended to its CSVs.
"""

from __future__ import annotations

import os
import shutil
import sys

import psutil

from replay.config import parse_replay_parameters
from replay.storage_replay import planned_bytes
from training.checkpoint import resolve_checkpoint_path
from training.learner import Learner, env_options, slot_count, store_features_of
from training.run_dir import RunDir
from training.signals import StopSignal
from workers.pool import ActorFailure
from workers.slots import rollout_spec, spec_bytes
from wrappers.envs import env_info

# Settings a resumed or tested agent must share with its checkpoint.
FIXED = ("env", "hidden_size", "frames_stacked", "optimizer")


def _fail(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2


def preflight(cfg, checkpoint: dict | None) -> str | None:
    """None if the run can start, else the message of why not."""
    if checkpoint is not None:
        for name in FIXED if cfg.op_mode == "train_w_load" else FIXED[:3]:
            saved = checkpoint["config"][name]
            if saved != getattr(cfg, name):
                return (f"--{name}: the checkpoint was trained with --{name}={saved}, which "
                        f"cannot change; leave it out or pass --{name}={saved}")
    if cfg.op_mode == "test":
        return None
    info = env_info(cfg.env, env_options(cfg.to_dict()))
    entries, _ = parse_replay_parameters(cfg.replay_parameters, cfg.batch_size)
    spec = rollout_spec(cfg.r_f_steps, info.obs_shape, info.obs_dtype, info.num_actions,
                        feature_size=cfg.hidden_size if store_features_of(entries) else 0)
    slots = spec_bytes(spec) * slot_count(cfg)
    shm = psutil.virtual_memory().available
    if os.path.isdir("/dev/shm"):
        shm = min(shm, shutil.disk_usage("/dev/shm").free)
    if slots > 0.8 * shm:
        return (f"--r_f_steps / --worker_count / --envs_per_worker / --batch_size: the rollout "
                f"slots need {slots / 2**30:.2f} GiB of shared memory and {shm / 2**30:.2f} GiB "
                "is free; make them smaller")
    stack = info.frame_stack or None
    n_envs = cfg.worker_count * cfg.envs_per_worker
    replays = [planned_bytes(e, spec, cfg.r_f_steps, stack, 2 * n_envs)
               for e in entries if e["type"] != "queue"]
    ram = psutil.virtual_memory().available
    if slots + sum(replays) > 0.8 * ram:
        sizes = ", ".join(f"{b / 2**30:.2f} GiB" for b in replays)
        return (f"--replay_parameters: the replay capacities need {sizes} of memory (plus "
                f"{slots / 2**30:.2f} GiB of rollout slots) and {ram / 2**30:.2f} GiB is "
                "available; lower 'capacity'")
    return None


def run(cfg, checkpoint: dict | None = None) -> int:
    problem = preflight(cfg, checkpoint)
    if problem:
        return _fail(problem)
    stop = StopSignal().install()
    if cfg.op_mode == "test":
        from training.evaluate import evaluate

        return evaluate(cfg, checkpoint, stop)
    if checkpoint is not None:
        c = checkpoint["counters"]
        run_dir = RunDir(cfg.results_dir, cfg.env, cfg.to_dict(),
                         resume_path=os.path.dirname(os.path.abspath(
                             resolve_checkpoint_path(cfg.load_model_url))),
                         keep_rows=(c["episodes"], c["updates"]))
        run_dir.log.info(f"resuming from {cfg.load_model_url} at {c['env_steps']:,} env steps, "
                         f"{c['updates']:,} updates")
    else:
        run_dir = RunDir(cfg.results_dir, cfg.env, cfg.to_dict())
    learner = None
    status = 0
    try:
        learner = Learner(cfg, run_dir, checkpoint)
        learner.run(stop_requested=stop)
        if stop():
            run_dir.log.info("stop requested: stopping the actors and saving a checkpoint")
    except ActorFailure as e:
        run_dir.log.error(str(e))
        status = 1
    except Exception:
        run_dir.log.exception("the learner failed; saving what it can")
        status = 1
    finally:
        if learner is not None:
            learner.close()
            path = learner.save()
            run_dir.write_summary(learner.summary())
            run_dir.log.info(f"checkpoint saved: {os.path.abspath(path)}")
        run_dir.flush()
        run_dir.close()
    return status

