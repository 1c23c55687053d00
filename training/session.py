"""One invocation of the platform: a new run, a resumed run, or a test.

Interrupts (SIGINT, and SIGTERM turned into one by main.py) stop the actors,
save a checkpoint, flush the logs and exit 0.
"""

from __future__ import annotations

import os
import sys

from training.checkpoint import CheckpointError, load_checkpoint
from training.learner import ActorFailure, Learner
from training.run_dir import RunDir


def run(cfg) -> int:
    if cfg.op_mode == "test":
        from training.evaluate import evaluate

        return evaluate(cfg)
    checkpoint = None
    if cfg.op_mode == "train_w_load":
        try:
            checkpoint = load_checkpoint(cfg.load_model_url)
        except CheckpointError as e:
            print(f"error: --load_model_url: {e}", file=sys.stderr)
            return 2
        if checkpoint["config"]["env"] != cfg.env:
            print(f"error: --env: the checkpoint was trained on {checkpoint['config']['env']}, "
                  f"not {cfg.env}; pass --env={checkpoint['config']['env']}", file=sys.stderr)
            return 2
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
