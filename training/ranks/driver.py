"""The driver of one rank of data-parallel learners (`--learner_count=N`,
training/ranks/group.py).

The loop of `training.driver.Driver`, with everything the ranks must do alike
agreed after each iteration's rollouts arrive (one small all-reduce): the env steps
every rank received (so the counters, the env-step budget and the progress of the
learning-rate schedules are the same on every rank, and an update sees the env
steps a lone learner's would), whether to stop (a signal to any rank, or an
observer of rank 0), and the episodes every rank's actors finished (gathered to
rank 0, which counts and records each once). A learner trains
only when every rank has a batch (`GroupPacer`). Checkpoints fall at the same
update on every rank: each sends rank 0 its replays' state and the largest
parameter difference between the ranks is logged (it must be 0); the others wait
for rank 0's own work around it (its final evaluation, its write) without the
timeout. Before each update a rank keeps a `Snapshot` of its agent to roll back to.

Rank 0 writes every file of the run directory: the CSVs, TensorBoard, summary.json,
checkpoints, and the status line and evaluations. The others keep the counters
(`FollowerReport`) and append their log lines to run.log (`FollowerRun`).
"""

from __future__ import annotations

import logging
import sys

import torch

from training.driver import Driver
from training.policy_learner import PolicyLearner
from training.report import Counters


class FollowerRun:
    """What a rank other than 0 has of the run directory: its path and a log that
    appends to its run.log (and, from warnings up, to stderr); with no path (a rank
    torchrun started, maybe on another node), a log to stderr alone."""

    def __init__(self, path: str | None, rank: int):
        self.path = path if path is not None else "(rank 0's)"
        self.log = logging.getLogger(f"run.{path}.rank{rank}")
        self.log.setLevel(logging.INFO)
        self.log.propagate = False
        fmt = logging.Formatter(f"%(asctime)s rank {rank}: %(message)s", "%H:%M:%S")
        to_err = logging.StreamHandler(sys.stderr)
        handlers = [to_err]
        if path is not None:
            handlers.append(logging.FileHandler(f"{path}/run.log"))
            to_err.setLevel(logging.WARNING)
        for handler in handlers:
            handler.setFormatter(fmt)
            self.log.addHandler(handler)

    def open_learner(self, stat_names) -> None:
        """Rank 0 writes learner.csv."""

    def close(self) -> None:
        for h in list(self.log.handlers):
            h.close()
            self.log.removeHandler(h)


class FollowerReport:
    """A rank other than 0 counts what the group agreed (`training.report.Report`'s
    counting, none of its writing)."""

    def __init__(self, run: FollowerRun, state: dict | None):
        self.run_dir = run
        self.log = run.log
        self.counters = Counters(**state["counters"]) if state is not None else Counters()
        self.max_env_steps = 0

    def rollouts(self, env_steps: int, policy_id: int = 0) -> None:
        self.counters.env_steps += env_steps

    def update(self, stats, wait_s, update_s, lag, free_slots, policy_id: int = 0) -> None:
        self.counters.updates += 1

    def flush(self, sync: bool = False) -> None:
        pass

    def close(self) -> None:
        pass


class Snapshot:
    """An agent's state (`Agent.state_dict()`: the model, the optimizers' moments, the
    targets, the generators) as of the last `take`, in tensors allocated once: each
    later take copies into them, allocating again only when the state's tensors change
    in number, shape, dtype or device (an optimizer's first step creates its moments).
    Half a deep copy's time per update (impala on Pong, 2 CPU cores: 1.8 ms against
    3.4; bench/rollback_copy.py), for a copy of the state kept between updates."""

    def __init__(self):
        self._buffers: list[torch.Tensor] = []
        self.state: dict | None = None

    def take(self, agent) -> None:
        """Keep `agent`'s state as it is now."""
        state = agent.state_dict()
        tensors = _tensors(state)
        if [(t.shape, t.dtype, t.device) for t in tensors] != \
                [(b.shape, b.dtype, b.device) for b in self._buffers]:
            self._buffers = [t.detach().clone() for t in tensors]
        else:
            for buffer, t in zip(self._buffers, tensors, strict=True):
                buffer.copy_(t)
        buffers = iter(self._buffers)
        self.state = _replace_tensors(state, lambda _: next(buffers))

    def restore(self, agent) -> None:
        """Load the state of the last `take` into `agent` (its buffers stay this one's:
        `Agent.load_state_dict` copies)."""
        agent.load_state_dict(self.state)


def _tensors(obj) -> list[torch.Tensor]:
    """The tensors in `obj` (nested dicts, lists and tuples), depth first."""
    if isinstance(obj, torch.Tensor):
        return [obj]
    items = obj.values() if isinstance(obj, dict) else obj if isinstance(obj, list | tuple) \
        else ()
    return [t for item in items for t in _tensors(item)]


def _replace_tensors(obj, new):
    """`obj` (nested dicts, lists and tuples) rebuilt with each tensor `t` replaced by
    `new(t)`, in `_tensors`'s order; other values as they are."""
    if isinstance(obj, torch.Tensor):
        return new(obj)
    if isinstance(obj, dict):
        return {k: _replace_tensors(v, new) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return type(obj)(_replace_tensors(v, new) for v in obj)
    return obj


class GroupDriver(Driver):
    """`Driver` for rank `group.rank` of the group (see the module docstring)."""

    def __init__(self, *args, group, **kwargs):
        super().__init__(*args, **kwargs)
        self.group = group
        self.leader = group.rank == 0  # rank 0 reports
        self.agreed = True  # False once a collective failed: checkpoints are rank 0's alone
        self._steps = 0  # env steps received since the last agreement
        self._episodes: list[tuple[int, list]] = []  # (policy id, episodes) since then
        self._snapshots = [Snapshot() for _ in self.learners]  # by policy id

    def run(self, stop_requested=lambda: False, max_env_steps: int | None = None) -> None:
        try:
            super().run(stop_requested, max_env_steps)
        except BaseException:
            self.agreed = False
            raise

    def _stop_before(self, stop_requested) -> bool:
        return False  # stops are agreed after receipt, by every rank

    def _stop_after_receipt(self, stop_requested) -> bool:
        return self._agree(stop_requested)

    def _train(self, learner: PolicyLearner) -> None:
        """Every rank had a batch (`GroupPacer`): not taking it would desynchronise
        the ranks' collectives."""
        batch = learner.next_batch()
        if batch is None:
            raise RuntimeError("a learner had a batch ready and then none")
        self._update(learner, batch)

    def _agree(self, stop_requested) -> bool:
        """The iteration's agreement (see the module docstring): count what every rank
        received; whether any rank asks to stop."""
        reasons = [r for r in (o.stop_reason() for o in self.observers) if r]
        stop, steps, episodes = self.group.agree(
            [float(stop_requested() or bool(reasons)), float(self._steps),
             float(len(self._episodes))])
        self._steps = 0
        if steps:
            self.report.rollouts(int(steps))
        if episodes:
            gathered = self.group.gather(self._episodes)
            for part in gathered or []:
                for policy_id, finished in part:
                    self.report.episodes(finished)
                    for observer in self.observers:
                        observer.episodes(policy_id, finished)
        self._episodes = []
        if stop:
            if self.leader:
                self.log.info(f"{reasons[0] if reasons else 'a stop was requested'}: stopping "
                              f"the {self.group.size} learners")
            return True
        return False

    def _receive(self, rollouts) -> None:
        for rollout in rollouts:
            self.learners[rollout.policy_id].receive(rollout)
            self._steps += self.cfg.r_f_steps * len(rollout.indices)
            if rollout.episodes:
                self._episodes.append((rollout.policy_id, rollout.episodes))

    def _update(self, learner: PolicyLearner, batch: dict[str, torch.Tensor]) -> None:
        """An update; should a collective fail part-way (after the update changed the
        agent: several optimizer steps, merged statistics), the agent goes back to the
        last agreed update (its `Snapshot`, taken before), which the checkpoint then
        holds."""
        snapshot = self._snapshots[learner.policy_id]
        snapshot.take(learner.agent)
        try:
            super()._update(learner, batch)
        except BaseException:
            snapshot.restore(learner.agent)
            raise

    def summary(self) -> dict:
        return {**super().summary(),
                "learners": {"count": self.group.size, "waits": self.group.waits}}

    def save(self) -> str | None:
        """The checkpoint of the last agreed update, written by rank 0 (returns its path;
        None on the other ranks): every rank's replays' state, after the group agreed.
        The other ranks wait for what rank 0 does alone, without --learner_timeout
        (`ProcessGroup.wait_for_rank_0`): its final evaluation before the checkpoint's
        collectives, its write after them (a large replay, a slow disk), so that no
        rank waits in a collective while rank 0 is busy. Once a collective failed,
        rank 0 writes its own part alone."""
        policies = [learner.state_dict(self.cfg.checkpoint_replay) for learner in self.learners]
        if not self.agreed:
            if self.leader:
                self.log.warning("checkpoint of rank 0 alone (the learners lost each other): "
                                 "the other ranks' replays are not in it")
                return self.write_checkpoint(policies)
            return None
        try:
            self.group.wait_for_rank_0()
            diff = max(self.group.max_difference(learner.agent.model)
                       for learner in self.learners)
            parts = self.group.gather([p["replays"] for p in policies])
            path = None
            if self.leader:
                for i, policy in enumerate(policies):
                    policy["rank_replays"] = [part[i] for part in parts[1:]]
                log = self.log.info if diff == 0 else self.log.error
                log(f"checkpoint at {self.counters.updates:,} updates: the largest parameter "
                    f"difference between the {self.group.size} learners is {diff:g}")
                path = self.write_checkpoint(policies)
            self.group.wait_for_rank_0()
        except BaseException:
            self.agreed = False
            raise
        return path
