"""A learner rank other than 0: its part of the run (its share of the actors, its
replays, its learner; rank 0 writes every file), and its exit."""

from __future__ import annotations

import os
import signal
import sys

from training.factory import build_driver
from training.plan import make_plan
from training.ranks.group import GroupFailure, rank_view
from training.signals import StopSignal


def follow(cfg, rank: int, run, checkpoint, group) -> int:
    """Rank `rank`'s (not 0) part of the run: its driver, with the checkpoint
    `checkpoint()` gives and the ProcessGroup `group()` joins; its exit status. SIGINT
    is rank 0's to decide; SIGTERM stops the group cleanly."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    stop = StopSignal()
    signal.signal(signal.SIGTERM, stop._handle)
    run.log.info(f"learner rank {rank} started (pid {os.getpid()})")
    driver = None
    joined = None
    status = 1
    try:
        state = checkpoint()
        joined = group()
        plan = make_plan(rank_view(cfg, rank))
        driver = build_driver(cfg, plan, run, state, group=joined)
        driver.run(stop_requested=stop)
        status = 0
    except Exception:
        run.log.exception(f"learner rank {rank} failed")
    finally:
        if driver is not None:
            driver.close()
            if status == 0:
                try:
                    driver.save()  # its part of the last checkpoint, until rank 0 wrote it
                except GroupFailure as e:
                    run.log.error(str(e))
                    status = 1
        if joined is not None:
            joined.close()
        run.close()
    return status


def exit_now(status: int) -> None:
    """A rank's exit, without the interpreter's teardown: it could meet gloo's
    transport threads still winding down and abort the process (seen twice in ~40
    runs on 2 busy cores)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
