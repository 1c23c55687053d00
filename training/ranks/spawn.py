"""Ranks 1..N-1 of `--learner_count=N` as processes rank 0 spawns on its own node,
meeting through a file in a temporary directory (the process group of
training/ranks/group.py); each runs `rank_main`."""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
import time

import torch.multiprocessing as mp

from training.checkpoint import load_checkpoint, resolve_checkpoint_path
from training.ranks.driver import FollowerRun
from training.ranks.follower import exit_now, follow
from training.ranks.group import GroupFailure, ProcessGroup, rank_device, uses_nccl
from workers.actor import die_with_parent


class Ranks:
    """Ranks 1..N-1 as processes of the main process (rank 0), and rank 0's group."""

    def __init__(self, cfg, run_path: str, log):
        self.tmp = tempfile.mkdtemp(prefix="learners-")
        rendezvous = os.path.join(self.tmp, "rendezvous")
        self.started_ray = False
        rank_cfg = cfg
        if cfg.backend == "ray" and not cfg.ray_address:  # one local Ray for every rank
            import ray

            from workers.ray_actor import init_ray

            self.started_ray = init_ray("", cfg.worker_count, log)
            rank_cfg = dataclasses.replace(
                cfg, ray_address=ray.get_runtime_context().gcs_address)
        ctx = mp.get_context("spawn")
        self.procs = [ctx.Process(target=rank_main, args=(rank_cfg, r, rendezvous, run_path),
                                  name=f"learner-{r}", daemon=False)
                      for r in range(1, cfg.learner_count)]
        for p in self.procs:
            p.start()
        try:
            self.group = ProcessGroup(0, cfg.learner_count, rendezvous, rank_device(cfg, 0),
                                      cfg.learner_timeout, nccl=uses_nccl(cfg))
        except GroupFailure:
            self.close(wait_s=0.0)
            raise

    def close(self, wait_s: float = 30.0) -> list[int | None]:
        """Leave the group (a rank still waiting on rank 0 fails at once; after a clean
        run none is: the last checkpoint's `wait_for_rank_0` let them go), wait up to
        `wait_s` for the ranks to exit, kill the rest; their exit codes."""
        if getattr(self, "group", None) is not None:
            self.group.close()
        deadline = time.monotonic() + wait_s
        for p in self.procs:
            p.join(max(0.0, deadline - time.monotonic()))
        for p in self.procs:
            if p.is_alive():
                p.kill()
                p.join(5.0)
        shutil.rmtree(self.tmp, ignore_errors=True)  # the rendezvous, once no rank reads it
        if self.started_ray:
            import ray

            ray.shutdown()
        return [p.exitcode for p in self.procs]


def rank_main(cfg, rank: int, rendezvous: str, run_path: str) -> None:
    """A rank other than 0 started by rank 0: its part of the run, in the run directory
    of rank 0, which writes every file (this rank logs to its run.log). Dies with the
    main process."""
    die_with_parent()

    def checkpoint():
        return load_checkpoint(resolve_checkpoint_path(cfg.load_model_url)) \
            if cfg.op_mode == "train_w_load" else None

    def group():
        return ProcessGroup(rank, cfg.learner_count, rendezvous, rank_device(cfg, rank),
                            cfg.learner_timeout, nccl=uses_nccl(cfg))

    exit_now(follow(cfg, rank, FollowerRun(run_path, rank), checkpoint, group))
