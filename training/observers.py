"""Observers: what sees every learner update and every finished episode of a run,
without the driver knowing what they do with them (Sample Factory's runner
observers; the home of population-based training, and of metrics that need more
than one update).

    observer.update(policy_id, stats)      after each update of that policy
    observer.episodes(policy_id, episodes) after each rollout that ended episodes,
                                           (return, length) each
    observer.stop_reason()                 a reason to stop the run now, or None

`StopAtReturn` is `--stop_at_return`'s.
"""

from __future__ import annotations

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
