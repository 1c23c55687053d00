"""Data-parallel learners started by torchrun, on one node or many.

    torchrun --nnodes=2 --nproc_per_node=1 --node_rank=K --master_addr=HOST \
        --master_port=29500 main.py --env=PongNoFrameskip-v4 ...

Every rank runs main.py with the same flags; torchrun gives each its RANK,
WORLD_SIZE, LOCAL_RANK and LOCAL_WORLD_SIZE, and the address of rank 0's store
(`env://`). Instead of rank 0 spawning the other ranks (training/ranks/spawn.py),
the ranks all join a gloo process group first, before anything else. Then:

* Rank 0 is the run: it checks the flags, loads a checkpoint and writes the run
  directory, as a run of one learner does. Through the group it sends each other
  rank what that rank needs (`Leader`): the run's config and, on a resume, the
  checkpoint less the other ranks' replays; or, when the run does not start (bad
  flags), its exit status, which every rank then exits with.
* The other ranks (`follow`) write nothing: their log lines go to stderr
  (torchrun's `--log_dir` or `--tee` keeps them). From there on they are the ranks
  of training/ranks/group.py: the same collectives, pacing and checkpoints.
* `--learner_count` is the world size (given, it must equal it). Each rank takes
  its device from LOCAL_RANK (cuda:LOCAL_RANK when --device is CUDA, NCCL between
  the GPUs). Auto values are sized for the node: `--learner_threads` this node's
  cores over its ranks, `--worker_count` the nodes' cores (this one's times the
  number of nodes); the memory check counts this node's ranks. With `--backend=ray`
  each rank's Ray actors run on its own node (`--ray_actor_node=learner`).
"""

from __future__ import annotations

import dataclasses
import os

import torch
import torch.distributed as dist

from training.config import auto_learner_threads
from training.ranks.driver import FollowerRun
from training.ranks.follower import exit_now, follow
from training.ranks.group import RANK_0_WAIT, GroupFailure, ProcessGroup, rank_device


@dataclasses.dataclass(frozen=True)
class Launch:
    """This process's place among torchrun's ranks."""
    rank: int
    size: int  # WORLD_SIZE: every node's ranks
    local_rank: int
    local_size: int  # this node's ranks


def launched() -> Launch | None:
    """Where torchrun (or another launcher setting its variables) put this process;
    None when nothing did, or it started a single rank."""
    env = os.environ
    try:
        launch = Launch(int(env["RANK"]), int(env["WORLD_SIZE"]), int(env.get("LOCAL_RANK", 0)),
                        int(env.get("LOCAL_WORLD_SIZE", 1)))
    except (KeyError, ValueError):
        return None
    return launch if launch.size > 1 else None


def node_ranks(learner_count: int) -> range:
    """The learner ranks on this node: torchrun's LOCAL_WORLD_SIZE of them from
    RANK - LOCAL_RANK, or all `learner_count` where rank 0 spawns the others."""
    launch = launched()
    if launch is None:
        return range(learner_count)
    first = launch.rank - launch.local_rank
    return range(first, first + launch.local_size)


def settle(values: dict, explicit: set[str], launch: Launch) -> tuple[dict, set[str], list[str]]:
    """The flags as torchrun's ranks take them: --learner_count is the world size, the
    auto threads and actors are sized for the nodes, and Ray actors stay on their
    rank's node; with what is wrong."""
    errors = []
    if "learner_count" in explicit and values["learner_count"] != launch.size:
        errors.append(f"--learner_count: torchrun started {launch.size} learners (WORLD_SIZE); "
                      f"leave --learner_count out or pass --learner_count={launch.size}")
    if values.get("learner_devices") is not None:
        errors.append("--learner_devices: under torchrun each rank takes cuda:LOCAL_RANK (or "
                      "the CPU, by --device); leave the flag out")
    if values.get("backend") == "ray" and not values.get("ray_address"):
        errors.append("--backend: under torchrun every rank would start a Ray instance of its "
                      "own; start a cluster (ray start) and pass --ray_address=auto")
    cores = os.cpu_count() or 1
    settled = {"learner_count": launch.size}
    if values.get("learner_threads") is None:
        settled["learner_threads"] = auto_learner_threads(values.get("agent"),
                                                          launch.local_size)
    if values.get("worker_count") is None:
        settled["worker_count"] = cores * launch.size // launch.local_size
    if values.get("backend") == "ray" and values.get("ray_actor_node") is None:
        settled["ray_actor_node"] = "learner"  # each node's actors beside its learner
    return {**values, **settled}, explicit | set(settled), errors


def join(launch: Launch) -> None:
    """Join the ranks' default gloo group through torchrun's store (`env://`; torchrun
    started every node's ranks, so they meet at once). It carries rank 0's word, which
    may come after a long time alone (a large checkpoint to load, a test's games):
    without --learner_timeout; the learners' collectives have their own groups, with it
    (`ProcessGroup`). GroupFailure if it cannot be joined."""
    Leader.told = False
    try:
        dist.init_process_group("gloo", init_method="env://", rank=launch.rank,
                                world_size=launch.size, timeout=RANK_0_WAIT)
    except (RuntimeError, ValueError) as e:
        raise GroupFailure(f"learner rank {launch.rank}: the {launch.size} learners torchrun "
                           f"started could not join: {e}") from e


def nccl_for(device: torch.device, launch: Launch) -> bool:
    """Whether the learners' tensors go by NCCL: every rank on a GPU of its own (this
    node's ranks no more than its GPUs), agreed by all ranks (a CPU node among GPU
    nodes makes it gloo for all)."""
    ok = device.type == "cuda" and launch.local_size <= torch.cuda.device_count()
    if ok:
        torch.cuda.set_device(device)
    vote = torch.tensor([int(ok)])
    dist.all_reduce(vote, op=dist.ReduceOp.MIN)
    return bool(vote.item())


def rank_part(checkpoint: dict | None, rank: int) -> dict | None:
    """What rank `rank` needs of `checkpoint`: all of it but the other ranks' replays
    (each policy's `replays` are rank 0's, its `rank_replays` those of ranks 1..)."""
    if checkpoint is None:
        return None
    policies = []
    for part in checkpoint["policies"]:
        by_rank = [part["replays"], *part.get("rank_replays", [])]
        mine = [r if i == rank else None for i, r in enumerate(by_rank)]
        policies.append({**part, "replays": mine[0], "rank_replays": mine[1:]})
    return {**checkpoint, "policies": policies}


class Leader:
    """Rank 0's side (`training.ranks.spawn.Ranks`'s place): what each rank needs is
    sent, then rank 0 joins the learners' ProcessGroup."""

    told = False  # whether the other ranks were sent the run (else `release` tells them)

    def __init__(self, cfg, checkpoint: dict | None, launch: Launch):
        try:
            dist.broadcast_object_list([("run", cfg)], src=0)
            Leader.told = True
            for rank in range(1, cfg.learner_count):
                dist.send_object_list([rank_part(checkpoint, rank)], dst=rank)
            device = rank_device(cfg, launch.local_rank)
            nccl = nccl_for(device, launch)
        except RuntimeError as e:
            raise GroupFailure(f"learner rank 0: the other learners left before the run "
                               f"started: {e}") from e
        self.group = ProcessGroup(0, cfg.learner_count, None, device, cfg.learner_timeout,
                                  nccl=nccl)

    def close(self, wait_s: float = 0.0) -> list[int | None]:
        """Leave the group; the other ranks' exit codes are torchrun's to report."""
        self.group.close()
        return []


def release(status: int) -> None:
    """Rank 0 at its exit: the other ranks, if they were not sent the run, are told
    to exit with `status` (a run refused for its flags: 2)."""
    if not dist.is_initialized():
        return
    try:
        if not Leader.told:
            dist.broadcast_object_list([("exit", status)], src=0)
    except RuntimeError:  # a rank that left already: nothing to tell it
        pass
    finally:
        dist.destroy_process_group()


def follower(launch: Launch, explicit: set[str]) -> int:
    """A rank other than 0: rank 0's word, then its part of the run (this process
    ends in it) or the exit status rank 0 sent. `explicit`: the flags given on its
    command line (the auto --learner_threads are this node's)."""
    run = FollowerRun(None, launch.rank)
    word, part = [None], [None]
    try:
        dist.broadcast_object_list(word, src=0)
        if word[0][0] == "exit":
            dist.destroy_process_group()
            return word[0][1]
        cfg = word[0][1]
        if "learner_threads" not in explicit:
            cfg = dataclasses.replace(cfg, learner_threads=auto_learner_threads(
                cfg.agent, launch.local_size))
        dist.recv_object_list(part, src=0)
        device = rank_device(cfg, launch.local_rank)
        nccl = nccl_for(device, launch)
    except RuntimeError as e:  # rank 0 died before the run started
        run.log.error(f"learner rank {launch.rank}: rank 0 left before the run started: {e}")
        exit_now(1)

    def group():
        return ProcessGroup(launch.rank, launch.size, None, device, cfg.learner_timeout,
                            nccl=nccl)

    exit_now(follow(cfg, launch.rank, run, lambda: part[0], group))
    return 1  # not reached
