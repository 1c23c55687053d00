"""One invocation of the platform: a new run, a resumed run, or a test.

Everything that can be checked is checked before the run directory is created:
the checkpoint (resume), settings that cannot change mid-run, and whether the
shared-memory rollout slots fit. Interrupts (SIGINT, and SIGTERM turned into one
by main.py) stop the actors, save a checkpoint, flush the logs and exit 0.
"""

from __future__ import annotations

import os
import shutil
import sys

import psutil

from training.checkpoint import CheckpointError, load_checkpoint
from training.learner import ActorFailure, Learner, env_options, slot_count
from training.run_dir import RunDir
from workers.slots import rollout_spec, spec_bytes
from wrappers.envs import env_info

# Settings a resumed run must share with its checkpoint (network shape, optimizer state).
FIXED_ON_RESUME = ("env", "hidden_size", "frames_stacked", "optimizer")


def _fail(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2


def preflight(cfg, checkpoint: dict | None) -> str | None:
    """None if the run can start, else the message of why not."""
    if checkpoint is not None:
        for name in FIXED_ON_RESUME:
            saved = checkpoint["config"][name]
            if saved != getattr(cfg, name):
                return (f"--{name}: the checkpoint was trained with --{name}={saved}, which "
                        f"cannot change when resuming; pass --{name}={saved}")
    info = env_info(cfg.env, env_options(cfg.to_dict()))
    spec = rollout_spec(cfg.r_f_steps, info.obs_shape, info.obs_dtype, info.num_actions)
    need = spec_bytes(spec) * slot_count(cfg)
    room = psutil.virtual_memory().available
    if os.path.isdir("/dev/shm"):
        room = min(room, shutil.disk_usage("/dev/shm").free)
    if need > 0.8 * room:
        return (f"--r_f_steps / --worker_count / --envs_per_worker / --batch_size: the rollout "
                f"slots need {need / 2**30:.2f} GiB of shared memory and {room / 2**30:.2f} GiB "
                "is free; make them smaller")
    return None


def run(cfg) -> int:
    if cfg.op_mode == "test":
        from training.evaluate import evaluate

        return evaluate(cfg)
    checkpoint = None
    if cfg.op_mode == "train_w_load":
        try:
            checkpoint = load_checkpoint(cfg.load_model_url)
        except CheckpointError as e:
            return _fail(f"--load_model_url: {e}")
    problem = preflight(cfg, checkpoint)
    if problem:
        return _fail(problem)
    run_dir = RunDir(cfg.results_dir, cfg.env, cfg.to_dict())
    learner = None
    status = 0
    try:
        learner = Learner(cfg, run_dir, checkpoint)
        learner.run()
    except KeyboardInterrupt:
        run_dir.log.info("interrupted: stopping the actors and saving a checkpoint")
    except ActorFailure as e:
        run_dir.log.error(str(e))
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
