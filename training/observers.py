"""Observers: what sees every learner update and every finished episode of a run,
without the driver knowing what they do with them (Sample Factory's runner
observers; the home of population-based training, and of metrics that need more
than one update).

    observer.update(policy_id, stats)      after each update of that policy
    observer.episodes(policy_id, episodes) after each rollout that ended episodes,
                                           (return, length) each
    observer.stop_reason()                 a reason to stop the run now, or None

`StopAtReturn` is `--stop_at_return`'s, `WeightSyncObserver` `--weight_sync`'s;
population-based training's is training/pbt.py's.
"""

from __future__ import annotations

import torch

from training.report import Report


class Observer:
    """Sees updates and episodes; does nothing unless a subclass says so."""

    def update(self, policy_id: int, stats: dict[str, float]) -> None:
        """After an update of `policy_id`: its agent's statistics."""

    def episodes(self, policy_id: int, episodes: list[tuple[float, int]]) -> None:
        """After a rollout of `policy_id` that ended these episodes."""

    def stop_reason(self) -> str | None:
        """Why the run should stop now; None to go on."""
        return None

    def state_dict(self) -> dict | None:
        """What a checkpoint keeps of it (None: nothing)."""
        return None

    def load_state_dict(self, state: dict) -> None:
        """Go on from a checkpoint's `state_dict`."""

    def close(self) -> None:
        """At the end of the run: close what it writes."""


class StopAtReturn(Observer):
    """Stops the run once the mean return of the last `window` training episodes
    (the report's, <= 100) reaches `target`; checked when new episodes arrive."""

    def __init__(self, report: Report, target: float, window: int):
        self.report = report
        self.target = target
        self.window = window
        self.reached = False

    def episodes(self, policy_id: int, episodes: list[tuple[float, int]]) -> None:
        self.reached = self.report.reached(self.target, self.window)

    def stop_reason(self) -> str | None:
        if not self.reached:
            return None
        return (f"the mean return of the last {self.window} episodes reached "
                f"--stop_at_return={self.target}")


class WeightSyncObserver(Observer):
    """`--weight_sync` (Wheeler's cooperating agents): every `sync.every_updates` updates
    of policy `sync.source`, its acting model's parameters and buffers but the excluded
    ones are copied (under their `sync.rename`d names) into those of each policy of
    `sync.targets`, which publish them to their actors at once. It runs between
    updates (the driver's thread), so no learner is mid-step. `learners`: the run's
    `PolicyLearner`s by policy id."""

    def __init__(self, learners, sync, log):
        self.learners = learners
        self.sync = sync
        self.log = log
        self.syncs = 0

    def update(self, policy_id: int, stats: dict[str, float]) -> None:
        source = self.learners[self.sync.source]
        if policy_id != self.sync.source or source.updates % self.sync.every_updates:
            return
        for k in self.sync.targets:
            target = self.learners[k]
            copy_parameters(source.agent.acting_model, target.agent.acting_model, self.sync)
            target.publish()
        if not self.syncs:
            self.log.info(f"weight sync: policy {self.sync.source}'s weights copied into "
                          f"policies {list(self.sync.targets)} (every "
                          f"{self.sync.every_updates} of its updates)")
        self.syncs += 1

    def state_dict(self) -> dict:
        return {"syncs": self.syncs}

    def load_state_dict(self, state: dict) -> None:
        self.syncs = state["syncs"]


def synced_names(model: torch.nn.Module, sync) -> dict[str, str]:
    """The entries of `model`'s state dict a weight sync `sync` copies: source name ->
    the target's name (the first `sync.rename` prefix that matches, replaced)."""
    out = {}
    for name in model.state_dict():
        if name.startswith(tuple(sync.exclude)):
            continue
        old = next((p for p in sync.rename if name.startswith(p)), None)
        out[name] = name if old is None else sync.rename[old] + name[len(old):]
    return out


def sync_problem(source: torch.nn.Module, target: torch.nn.Module, sync) -> str | None:
    """Why `source`'s entries cannot be copied into `target`'s (an entry to copy that
    the target lacks, or has in another shape), or None."""
    theirs, mine = source.state_dict(), target.state_dict()
    odd = [(name, to) for name, to in synced_names(source, sync).items()
           if to not in mine or mine[to].shape != theirs[name].shape]
    if not odd:
        return None
    return (f"{len(odd)} of the entries to copy are missing in the target or shaped "
            f"otherwise, e.g. {odd[:3]} (source name, target name); exclude them by a name "
            "prefix, rename them, or give the two policies the same architecture for them")


@torch.no_grad()
def copy_parameters(source: torch.nn.Module, target: torch.nn.Module, sync) -> None:
    """Copy `source`'s entries that `sync` names into `target`'s (`sync_problem` checked
    that they fit)."""
    theirs, mine = source.state_dict(), target.state_dict()
    for name, to in synced_names(source, sync).items():
        mine[to].copy_(theirs[name])
