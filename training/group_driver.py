"""The driver of one rank of data-parallel learners (`--learner_count=N`,
training/data_parallel.py).

The loop of `training.driver.Driver`, with everything the ranks must do alike
agreed after each iteration's rollouts arrive (one small all-reduce): the env steps
every rank received (so the counters, the env-step budget and the progress of the
learning-rate schedules are the same on every rank, and an update sees the env
steps a lone learner's would), whether to stop (a signal to any rank, or an
observer of rank 0), and the episodes every rank's actors finished (gathered to
rank 0, which counts and records each once). A learner trains
only when every rank has a batch (`GroupPacer`). Checkpoints fall at the same
update on every rank: each sends rank 0 its replays' state and the largest
parameter difference between the ranks is logged (it must be 0).

Rank 0 writes every file of the run directory: the CSVs, TensorBoard, summary.json,
checkpoints, and the status line and evaluations. The others keep the counters
(`FollowerReport`) and append their log lines to run.log (`FollowerRun`).
"""

from __future__ import annotations

import copy
import logging
import sys

import torch

from training.driver import Driver
from training.policy_learner import PolicyLearner
from training.report import Counters


class FollowerRun:
    """What a rank other than 0 has of the run directory: its path and a log that
    appends to its run.log (and, from warnings up, to stderr)."""

    def __init__(self, path: str, rank: int):
        self.path = path
        self.log = logging.getLogger(f"run.{path}.rank{rank}")
        self.log.setLevel(logging.INFO)
        self.log.propagate = False
        fmt = logging.Formatter(f"%(asctime)s rank {rank}: %(message)s", "%H:%M:%S")
        to_file = logging.FileHandler(f"{path}/run.log")
        to_err = logging.StreamHandler(sys.stderr)
        to_err.setLevel(logging.WARNING)
        for handler in (to_file, to_err):
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


class GroupDriver(Driver):
    """`Driver` for rank `group.rank` of the group (see the module docstring)."""

    def __init__(self, *args, group, **kwargs):
        super().__init__(*args, **kwargs)
        self.group = group
        self.leader = group.rank == 0  # rank 0 reports
        self.agreed = True  # False once a collective failed: checkpoints are rank 0's alone
        self._steps = 0  # env steps received since the last agreement
        self._episodes: list[tuple[int, list]] = []  # (policy id, episodes) since then

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
        """An update; should a collective fail part-way (several optimizer steps), the
        agent goes back to the last agreed update, which the checkpoint then holds."""
        before = copy.deepcopy(learner.agent.state_dict())
        try:
            super()._update(learner, batch)
        except BaseException:
            learner.agent.load_state_dict(before)
            raise

    def summary(self) -> dict:
        return {**super().summary(),
                "learners": {"count": self.group.size, "waits": self.group.waits}}

    def save(self) -> str | None:
        """The checkpoint of the last agreed update, written by rank 0 (returns its path;
        None on the other ranks): every rank's replays' state, after the group agreed.
        Once a collective failed, rank 0 writes its own part alone."""
        policies = [learner.state_dict(self.cfg.checkpoint_replay) for learner in self.learners]
        if self.agreed:
            try:
                diff = max(self.group.max_difference(learner.agent.model)
                           for learner in self.learners)
                parts = self.group.gather([p["replays"] for p in policies])
            except BaseException:
                self.agreed = False
                raise
        if not self.leader:
            return None
        if self.agreed:
            for i, policy in enumerate(policies):
                policy["rank_replays"] = [part[i] for part in parts[1:]]
            log = self.log.info if diff == 0 else self.log.error
            log(f"checkpoint at {self.counters.updates:,} updates: the largest parameter "
                f"difference between the {self.group.size} learners is {diff:g}")
        else:
            self.log.warning("checkpoint of rank 0 alone (the learners lost each other): "
                             "the other ranks' replays are not in it")
        return self.write_checkpoint(policies)
