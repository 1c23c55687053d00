"""Data-parallel learners of one policy (`--learner_count=N`): the process group,
its collectives, and the rank processes.

Each rank is a learner process with its share of the actors (`actor_share`), its
own rollout slots and replays, and a batch of `--batch_size` rollouts: the group
trains as one learner on N x `--batch_size` at the same learning rate (CleanRL's
`ppo_atari_multigpu.py` and Cleanba's rule: the gradients are averaged, so the
step is the one of the mean loss over the group's batch). Rank 0 is the main
process; it starts ranks 1..N-1 (training/ranks/spawn.py), or torchrun started
every rank, on one node or many (training/ranks/torchrun.py); either way the ranks
other than 0 live in training/ranks/follower.py.

What keeps the ranks identical (training/ranks/driver.py drives them):
- the same initial weights (the same seed, then rank 0's weights broadcast) and
  the same checkpoint on a resume;
- one flat all-reduce of the gradients per optimizer step, before the norm clip
  (`ProcessGroup.reduce_gradients`, through `agents.agent.Agent.step`), and the
  losses' means and normalisations over the group's batch (agents/group.py);
- the running statistics merged from every rank's moments, in rank order;
- agreed pacing: every loop iteration the ranks agree on stopping and on the env
  steps received, and a rank trains only when every rank has a batch
  (`GroupPacer`), so all take the same optimizer steps in the same order.

Every collective has `--learner_timeout`: a rank that hangs makes the others fail
within it; a rank that dies is seen at the next collective (its sockets close).
Either way the others stop with status 1, rank 0 saving the last agreed update.
The one wait without it is for what rank 0 does alone (`wait_for_rank_0`: its final
evaluation, writing a checkpoint): the others wait as long as that takes, while
rank 0 still gives up within the timeout on a rank that does not come. Proven for
gloo only; NCCL reports its failures otherwise (`_collective`).
"""

from __future__ import annotations

import dataclasses
import datetime
import functools

import torch
import torch.distributed as dist
from torch.nn.utils import parameters_to_vector

from agents.group import Group, Moments
from training.pacer import Pacer


class GroupFailure(RuntimeError):
    """A collective failed: another learner died, or hung past --learner_timeout."""


# how long the other ranks wait for rank 0's own work (`wait_for_rank_0`): in effect
# without a timeout; a rank 0 that dies ends the wait at once (its sockets close)
RANK_0_WAIT = datetime.timedelta(days=7)


def _collective(fn):
    """`fn`, a method with collectives, whose failure is raised as `GroupFailure`
    (training/session.py and rank_main stop on it, saving the last agreed update).

    What this catches is an error raised synchronously by the collective call, as
    gloo raises them: a timeout, a connection a dead rank closed. That is what the
    tests prove (tests/test_data_parallel*.py, gloo on CPU). NCCL (every rank on a GPU
    of its own: the losses' and gradients' collectives, `max_difference`) is not
    proven, and by PyTorch's documentation would not be caught here: its collectives
    return once queued on the GPU, and a timeout or error is found later by its
    watchdog thread, which with the default TORCH_NCCL_ASYNC_ERROR_HANDLING=3 tears
    the process down; the run would end killed, not with status 1, with no checkpoint
    past the last periodic one. TORCH_NCCL_BLOCKING_WAIT=1 is documented to make the
    wait block and raise on the timeout, which this would catch. Neither was run. The
    driver's agreements, gathers and `wait_for_rank_0` are gloo in either case."""
    @functools.wraps(fn)
    def wrapper(self, *args, **kwargs):
        try:
            return fn(self, *args, **kwargs)
        except GroupFailure:
            raise
        except (RuntimeError, ValueError, OSError) as e:  # gloo's and NCCL's errors
            raise GroupFailure(
                f"learner rank {self.rank}: a collective with the other learners failed (one "
                f"died, or hung past --learner_timeout={self.timeout_s:g}s): {e}") from e
    return wrapper


class ProcessGroup(Group):
    """Rank `rank` of `size` learners, joined through the file `rendezvous` (a fresh
    path), or, with `rendezvous` None, among torchrun's ranks, whose default group
    (without the timeout: it waits for rank 0's own work) joined already
    (training/ranks/torchrun.py). Device tensors travel by NCCL when `device` is CUDA
    and `nccl`, else by gloo (CPU or CUDA tensors); the driver's small agreements
    always by gloo. `device_group` and `cpu` are the groups of each (None: the
    default one), each with the timeout."""

    def __init__(self, rank: int, size: int, rendezvous: str | None, device: torch.device,
                 timeout_s: float, nccl: bool = True):
        self.rank, self.size, self.device, self.timeout_s = rank, size, device, timeout_s
        timeout = datetime.timedelta(seconds=timeout_s)
        backend = "nccl" if nccl and device.type == "cuda" else "gloo"
        self.cpu = self.device_group = None
        try:
            if rendezvous is None:  # torchrun's: groups of their own, with the timeout
                self.cpu = dist.new_group(backend="gloo", timeout=timeout)
                self.device_group = dist.new_group(backend=backend, timeout=timeout)
            else:
                dist.init_process_group(backend, init_method=f"file://{rendezvous}",
                                        rank=rank, world_size=size, timeout=timeout)
                if backend == "nccl":
                    self.cpu = dist.new_group(backend="gloo", timeout=timeout)
        except (RuntimeError, ValueError) as e:
            raise GroupFailure(f"learner rank {rank}: the {size} learners did not all start "
                               f"within --learner_timeout={timeout_s:g}s: {e}") from e
        self.backend = backend
        self.waits = 0  # agreements where this rank had a batch and another had none

    # --- the losses' collectives (agents/group.py) -------------------------------------
    @_collective
    def sum(self, x: torch.Tensor) -> torch.Tensor:
        y = x.detach().clone().reshape(-1)
        dist.all_reduce(y, group=self.device_group)
        return y.reshape(x.shape)

    def mean(self, x: torch.Tensor) -> torch.Tensor:
        count = self.sum(torch.tensor(float(x.numel()), device=x.device))
        return x.sum() / count

    def standardize(self, x: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
        """Two passes (count and sum, then squared deviations); no gradient through the
        moments."""
        n, total = self.sum(torch.stack([torch.tensor(float(x.numel()), device=x.device),
                                         x.detach().sum()]))
        mean = total / n
        var = self.sum((x.detach() - mean).pow(2).sum()) / (n - 1).clamp(min=1.0)
        return (x - mean) / (var.sqrt() + eps)

    @_collective
    def reduce_gradients(self, params: list[torch.Tensor]) -> None:
        """One flat all-reduce (sum) of the gradients; a parameter without a gradient
        counts as zeros, and every parameter has one after."""
        flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1)
                          for p in params])
        dist.all_reduce(flat, group=self.device_group)
        offset = 0
        for p in params:
            n = p.numel()
            p.grad = flat[offset:offset + n].view_as(p)
            offset += n

    @_collective
    def gather_moments(self, moments: Moments) -> list[Moments]:
        """Every rank's (count, mean, var), through one all-reduce of a [size, 1 + 2D]
        float64 table in which each rank fills its row."""
        n, mean, var = moments
        width = 1 + 2 * mean.numel()
        table = torch.zeros(self.size, width, dtype=torch.float64, device=mean.device)
        table[self.rank, 0] = n
        table[self.rank, 1:] = torch.cat([mean.reshape(-1), var.reshape(-1)]).double()
        dist.all_reduce(table, group=self.device_group)
        d = mean.numel()
        return [(int(row[0]), row[1:1 + d].to(mean.dtype).reshape(mean.shape),
                 row[1 + d:].to(var.dtype).reshape(var.shape)) for row in table]

    # --- the driver's collectives ------------------------------------------------------
    @_collective
    def agree(self, values: list[float]) -> list[float]:
        """The group's sums of `values` (float64, by gloo)."""
        t = torch.tensor(values, dtype=torch.float64)
        dist.all_reduce(t, group=self.cpu)
        return t.tolist()

    @_collective
    def gather(self, obj) -> list | None:
        """Every rank's picklable `obj`, in rank order, on rank 0 (None elsewhere)."""
        out = [None] * self.size if self.rank == 0 else None
        dist.gather_object(obj, out, dst=0, group=self.cpu)
        return out

    @_collective
    def broadcast_module(self, module: torch.nn.Module) -> None:
        """Give every rank rank 0's parameters and buffers."""
        for t in module.state_dict().values():
            dist.broadcast(t, src=0, group=self.device_group)

    @_collective
    def max_difference(self, module: torch.nn.Module) -> float:
        """The largest absolute difference between a parameter of any rank and rank 0's
        (0.0 while the ranks are identical)."""
        flat = parameters_to_vector(module.parameters()).detach()
        ref = flat.clone()
        dist.broadcast(ref, src=0, group=self.device_group)
        diff = (flat - ref).abs().max().reshape(1)
        dist.all_reduce(diff, op=dist.ReduceOp.MAX, group=self.device_group)
        return float(diff)

    @_collective
    def wait_for_rank_0(self) -> None:
        """Every rank calls it once rank 0's own work is due to be over (its final
        evaluation, writing a checkpoint): rank 0 tells each other rank, giving up
        after --learner_timeout on one that does not listen; the others wait for it
        up to RANK_0_WAIT, not the timeout (by point-to-point messages on the gloo
        group: a gloo send completes only once its receiver takes it)."""
        flag = torch.zeros(1)
        if self.rank == 0:
            timeout = datetime.timedelta(seconds=self.timeout_s)
            for work in [dist.isend(flag, dst=r, group=self.cpu) for r in range(1, self.size)]:
                work.wait(timeout)
        else:
            dist.irecv(flag, src=0, group=self.cpu).wait(RANK_0_WAIT)

    def close(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()


class GroupPacer(Pacer):
    """Train when every rank's learner has a batch: all ranks train or none does, so
    they take the same steps. A rank whose partner has none waits (counted in
    `group.waits`)."""

    def __init__(self, group: ProcessGroup):
        self.group = group

    def due(self, learner) -> bool:
        ready = learner.ready()
        agreed = self.group.agree([float(ready)])[0] == self.group.size
        if ready and not agreed:
            self.group.waits += 1
        return agreed


def actor_share(worker_count: int, size: int, rank: int) -> tuple[int, int]:
    """(first actor id, actor count) of rank `rank`: the actors split as evenly as they
    go, the first ranks taking one more."""
    base, extra = divmod(worker_count, size)
    return rank * base + min(rank, extra), base + (rank < extra)


def rank_device(cfg, rank: int) -> torch.device:
    """Rank `rank`'s device: its --learner_devices entry; else --device, on CUDA the
    GPUs taken in turn (cuda:rank modulo the GPU count)."""
    from training.config import resolve_device

    if cfg.learner_devices:
        return torch.device(cfg.learner_devices.split(",")[rank].strip())
    device = resolve_device(cfg.device)
    if device.type == "cuda":
        return torch.device("cuda", rank % torch.cuda.device_count())
    return device


def uses_nccl(cfg) -> bool:
    """Whether the ranks' device tensors go by NCCL: every rank on a GPU of its own
    (NCCL refuses two ranks on one GPU; those share it through gloo)."""
    devices = [rank_device(cfg, r) for r in range(cfg.learner_count)]
    return all(d.type == "cuda" for d in devices) and len(set(devices)) == len(devices)


def rank_view(cfg, rank: int):
    """`cfg` as rank `rank`'s plan sees it: its share of the actors."""
    _, count = actor_share(cfg.worker_count, cfg.learner_count, rank)
    return dataclasses.replace(cfg, worker_count=count, n_envs=count * cfg.envs_per_worker)
