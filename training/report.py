"""What a run counts and reports: counters, episodes, the status line, TensorBoard
scalars, learner.csv rows and summary.json.

Counting: an env step is one agent decision of one env; frames = env steps x
frameskip (1 outside Atari). Each status line (every `status_interval` s) also
writes the interval's TensorBoard scalars at the current env steps: losses and
pipeline figures averaged over the interval, system figures sampled then; every
finished episode goes to `charts/` and to episodes.csv.
"""

from __future__ import annotations

import collections
import dataclasses
import math
import sys
import time

import numpy as np

from training import metrics
from training.run_dir import RunDir


@dataclasses.dataclass
class Counters:
    env_steps: int = 0
    updates: int = 0
    episodes: int = 0
    wall_time: float = 0.0  # seconds of training, summed over resumed runs
    resumes: int = 0  # how many times the run was resumed (actor seeds differ by it)
    evaluations: int = 0  # rows of eval.csv


class Report:
    """Counters and returns of a run, and everything written about them."""

    def __init__(self, run: RunDir, env: str, frames_per_step: int, max_env_steps: int,
                 state: dict | None = None,
                 status_stats: tuple[tuple[str, str, str], ...] = (), label: str = "",
                 csv_interval: int = 1):
        """`state`: a checkpoint's (counters, recent returns, best mean) to go on from;
        `status_stats`: the agent's statistics on the status line, (label, name,
        format) each (`agents.agent.Agent.STATUS`); `label` begins the status line (a
        policy's: "policy 1: "); `csv_interval`: updates per learner.csv row
        (`--learner_csv_interval`)."""
        self.run_dir = run
        self.label = label
        self.status_stats = status_stats
        self.log = run.log
        self.env = env
        self.frames_per_step = frames_per_step
        self.max_env_steps = max_env_steps
        self.counters = Counters()
        self.returns: collections.deque[float] = collections.deque(maxlen=100)
        self.best_mean_return = -math.inf
        self.last_eval: dict | None = None  # eval.csv rows: the newest and the best mean
        self.best_eval: dict | None = None
        if state is not None:
            self.counters = Counters(**state["counters"])
            self.returns.extend(state.get("recent_returns", []))
            best = state.get("best_mean_return_100")
            self.best_mean_return = -math.inf if best is None else best
            self.last_eval, self.best_eval = state.get("last_eval"), state.get("best_eval")
        self.last_stats: dict[str, float] = {}
        self.fps = 0.0
        self.first_rollout_at: tuple[float, int] | None = None  # (time, env steps before)
        self._t_start = time.time()
        self._wall_at_start = self.counters.wall_time
        self._env_steps_at_start = self.counters.env_steps
        self._last_status = (self._t_start, self.counters.env_steps)
        self.pipeline = metrics.PipelineStats()
        self.csv_interval = csv_interval
        self._row = metrics.PipelineStats()  # the updates since learner.csv's last row
        self._free_slots = 0
        self.system = metrics.SystemMonitor()
        self.tb = metrics.TensorBoardLog(run.path)

    # --- what happened ---------------------------------------------------------------
    def rollouts(self, env_steps: int, policy_id: int = 0) -> None:
        """`env_steps` more env steps arrived (of the one policy)."""
        if self.first_rollout_at is None:
            self.first_rollout_at = (time.time(), self.counters.env_steps)
        self.counters.env_steps += env_steps

    def episodes(self, episodes: list[tuple[float, int]], policy_id: int = 0) -> None:
        """Finished episodes, (return, length) each."""
        now = round(self.wall(), 3)
        c = self.counters
        for ret, length in episodes:
            c.episodes += 1
            self.returns.append(ret)
            self.tb.episode(ret, length, c.env_steps, c.env_steps * self.frames_per_step)
            self.run_dir.episodes.writerow({
                "env_steps": c.env_steps, "frames": c.env_steps * self.frames_per_step,
                "episode_return": ret, "episode_length": length, "wall_time": now,
            })
            if len(self.returns) == self.returns.maxlen:
                self.best_mean_return = max(self.best_mean_return, float(np.mean(self.returns)))

    def update(self, stats: dict[str, float], wait_s: float, update_s: float,
               lag: tuple[float, float], free_slots: int, policy_id: int = 0) -> None:
        """One learner update: its loss statistics and pipeline figures. learner.csv
        gets a row every `csv_interval` updates (`write_learner_row`)."""
        self.counters.updates += 1
        self.last_stats = stats
        self.pipeline.add_update(wait_s, update_s, lag[0], lag[1], stats)
        self._row.add_update(wait_s, update_s, lag[0], lag[1], stats)
        self._free_slots = free_slots
        if self.counters.updates % self.csv_interval == 0:
            self.write_learner_row()

    def write_learner_row(self) -> None:
        """learner.csv's row for the updates since its last row (none: no row), at the
        counters now: each figure their mean, but policy_lag_max their max, and
        free_slots now. One update's row holds its figures as they are."""
        r = self._row
        if not r.updates:
            return
        n, c = r.updates, self.counters
        self.run_dir.learner.writerow({
            "updates": c.updates, "env_steps": c.env_steps,
            "frames": c.env_steps * self.frames_per_step,
            "fps": round(self.fps, 1), **{k: f"{v / n:.6g}" for k, v in r.losses.items()},
            "policy_lag_mean": f"{r.lag_sum / n:.4g}", "policy_lag_max": f"{r.lag_max:.4g}",
            "batch_wait_s": f"{r.wait_s / n:.4g}", "update_s": f"{r.update_s / n:.4g}",
            "free_slots": self._free_slots,
        })
        r.reset()

    # --- figures ---------------------------------------------------------------------
    def wall(self) -> float:
        """Seconds of training, over resumed runs too."""
        return self._wall_at_start + time.time() - self._t_start

    def reached(self, target: float | None, window: int) -> bool:
        """Whether the mean return of the last `window` (<= 100) episodes is >= `target`
        (never with `target` None)."""
        if target is None or len(self.returns) < window:
            return False
        return float(np.mean(list(self.returns)[-window:])) >= target

    def policy_steps(self) -> list[int] | None:
        """Each policy's own env steps (None: one policy, whose are the run's)."""
        return None

    def mean_return(self) -> float | None:
        return float(np.mean(self.returns)) if self.returns else None

    def mean_fps(self) -> float:
        elapsed = time.time() - self._t_start
        steps = self.counters.env_steps - self._env_steps_at_start
        return 0.0 if elapsed <= 0 else steps * self.frames_per_step / elapsed

    def summary(self, actor_restarts: int) -> dict:
        c = self.counters
        best = self.best_mean_return
        return {
            "env": self.env,
            "env_steps": c.env_steps,
            "frames": c.env_steps * self.frames_per_step,
            "updates": c.updates,
            "episodes": c.episodes,
            "wall_time_s": round(self.wall(), 3),
            "mean_return_last100": self.mean_return(),
            "best_mean_return_100": None if math.isinf(best) else best,
            "fps_mean": round(self.mean_fps(), 1),
            "actor_restarts": actor_restarts,
            "eval_last": self.last_eval,
            "eval_best": self.best_eval,
        }

    def state_dict(self) -> dict:
        """What a checkpoint keeps of the counting (see `__init__`'s `state`)."""
        self.counters.wall_time = self.wall()
        best = self.best_mean_return
        return {"counters": dataclasses.asdict(self.counters),
                "recent_returns": list(self.returns),
                "best_mean_return_100": None if math.isinf(best) else best,
                "last_eval": self.last_eval, "best_eval": self.best_eval,
                "saved_at": time.time()}  # what a resume cuts TensorBoard events at

    def evaluation(self, env_steps: int, version: int, returns: list[float],
                   lengths: list[int], policy_id: int = 0) -> None:
        """One evaluation of the policy (workers/evaluator.py), requested at `env_steps`
        and played by weights `version`: a row of eval.csv, `eval/` scalars at those
        env steps, a log line; summary.json keeps the last and the best."""
        r = np.asarray(returns, dtype=np.float64)
        row = {"env_steps": env_steps, "frames": env_steps * self.frames_per_step,
               "weights_version": version, "mean": round(float(r.mean()), 4),
               "std": round(float(r.std()), 4), "min": float(r.min()), "max": float(r.max()),
               "episodes": len(r), "wall_time": round(self.wall(), 3)}
        self.run_dir.eval.writerow(row)
        self.counters.evaluations += 1
        self.last_eval = row
        if self.best_eval is None or row["mean"] > self.best_eval["mean"]:
            self.best_eval = row
        self.tb.scalars({"eval/mean_return": row["mean"], "eval/std_return": row["std"],
                         "eval/min_return": row["min"], "eval/max_return": row["max"],
                         "eval/mean_length": float(np.mean(lengths))}, env_steps)
        self.log.info(f"{self.label}eval at {env_steps:,} env steps (weights {version}): mean "
                      f"{row['mean']:.2f} +- {row['std']:.2f} over {len(r)} whole games")

    # --- the status line -------------------------------------------------------------
    def status(self, extra_scalars: dict[str, float], actor_restarts: int,
               extra_summary: dict | None = None, line: bool = True) -> None:
        """The status line (unless not `line`), the interval's scalars (with
        `extra_scalars`: replay and system figures) and summary.json (with
        `extra_summary`); every file flushed."""
        now = time.time()
        t0, s0 = self._last_status
        if now > t0:
            self.fps = (self.counters.env_steps - s0) * self.frames_per_step / (now - t0)
        self._last_status = (now, self.counters.env_steps)
        c = self.counters
        mean = self.mean_return()
        s = self.last_stats
        lag = self.pipeline.lag()
        losses = " ".join(f"{label} {s[name]:{fmt}}" for label, name, fmt in self.status_stats
                          if name in s) if s else "no update yet"
        bar, eta = metrics.progress(c.env_steps, self.max_env_steps,
                                    (self.fps or self.mean_fps()) / self.frames_per_step,
                                    sys.stdout.isatty())
        if line:
            self.log.info(
                f"{self.label}{bar}frames {c.env_steps * self.frames_per_step:,} | env steps "
                f"{c.env_steps:,} | fps {self.fps:,.0f} (mean {self.mean_fps():,.0f}) | updates "
                f"{c.updates:,} | return(100) {'n/a' if mean is None else f'{mean:.2f}'} "
                f"[{c.episodes} episodes] | {losses} | "
                f"lag {'n/a' if lag is None else f'{lag:.1f}'} | ETA {eta}")
        values = {"perf/fps": self.fps, "perf/fps_mean": self.mean_fps(),
                  "charts/episodes": float(c.episodes),
                  **self.pipeline.scalars(now - t0), **extra_scalars}
        if mean is not None:
            values["charts/mean_return_100"] = mean
        self.tb.scalars(values, c.env_steps)
        self.flush()
        self.run_dir.write_summary({**self.summary(actor_restarts), **(extra_summary or {})})

    def flush(self, sync: bool = False) -> None:
        """Flush the CSVs and the TensorBoard events; with `sync`, first write
        learner.csv's row of the updates since its last, then fsync them and the log
        (before a checkpoint: the rows it counts must be on disk)."""
        if sync:
            self.write_learner_row()
        self.tb.flush()
        self.run_dir.flush(sync)

    def close(self) -> None:
        self.tb.close()



class PopulationReport:
    """Several policies (`--num_policies`): a `Report` per policy (`policies`, each on its
    folder `policy_<k>/`: its own counters, CSVs, status line and TensorBoard events)
    and the run's (`run`: the run's counters, which the budget, the checkpoint cadence
    and the schedules read, the run-wide TensorBoard figures and the top summary.json
    that compares the policies). The driver calls it as it calls a `Report`, with the
    policy of each rollout, episode, update and evaluation."""

    def __init__(self, run: Report, policies: list[Report]):
        self.run = run
        self.policies = policies
        self.run_dir, self.log = run.run_dir, run.log
        self.pipeline, self.system = run.pipeline, run.system

    @property
    def counters(self) -> Counters:
        return self.run.counters

    @property
    def max_env_steps(self) -> int:
        return self.run.max_env_steps

    @property
    def first_rollout_at(self) -> tuple[float, int] | None:
        return self.run.first_rollout_at

    @max_env_steps.setter
    def max_env_steps(self, value: int) -> None:
        self.run.max_env_steps = value
        for p in self.policies:  # a policy's status line shows its share of the budget
            p.max_env_steps = value // len(self.policies)

    def rollouts(self, env_steps: int, policy_id: int = 0) -> None:
        self.run.rollouts(env_steps)
        self.policies[policy_id].rollouts(env_steps)

    def episodes(self, episodes: list[tuple[float, int]], policy_id: int = 0) -> None:
        self.run.counters.episodes += len(episodes)
        self.policies[policy_id].episodes(episodes)

    def update(self, stats: dict[str, float], wait_s: float, update_s: float,
               lag: tuple[float, float], free_slots: int, policy_id: int = 0) -> None:
        self.run.counters.updates += 1
        self.run.pipeline.add_update(wait_s, update_s, lag[0], lag[1], {})
        self.policies[policy_id].update(stats, wait_s, update_s, lag, free_slots)

    def evaluation(self, env_steps: int, version: int, returns: list[float],
                   lengths: list[int], policy_id: int = 0) -> None:
        self.run.counters.evaluations += 1
        self.policies[policy_id].evaluation(env_steps, version, returns, lengths)

    def policy_steps(self) -> list[int]:
        return [p.counters.env_steps for p in self.policies]

    def reached(self, target: float | None, window: int) -> bool:
        """Whether any policy's mean return of its last `window` episodes is >= `target`."""
        return any(p.reached(target, window) for p in self.policies)

    def status(self, extra_scalars: dict[str, float], actor_restarts: int,
               extra_summary: dict | None = None) -> None:
        """A status line per policy (each policy's summary.json and scalars), then the
        run's scalars and the top summary.json."""
        for p in self.policies:
            p.status({}, actor_restarts)
        self.run.status(extra_scalars, actor_restarts, extra_summary, line=False)
        self.run.run_dir.write_summary({**self.summary(actor_restarts), **(extra_summary or {})})

    def summary(self, actor_restarts: int) -> dict:
        """The run's counters and each policy's figures; `best_policy`: the best by its
        last evaluation, else by its mean-100 training return (None before either)."""
        top = self.run.summary(actor_restarts)
        for key in ("mean_return_last100", "best_mean_return_100", "eval_last", "eval_best"):
            top.pop(key)
        policies = [p.summary(actor_restarts) for p in self.policies]
        return {**top, "policies": policies, "best_policy": best_policy(policies)}

    def state_dict(self) -> dict:
        return {**self.run.state_dict(),
                "policy_reports": [p.state_dict() for p in self.policies]}

    def flush(self, sync: bool = False) -> None:
        self.run.flush(sync)
        for p in self.policies:
            p.flush(sync)

    def close(self) -> None:
        self.run.close()
        for p in self.policies:
            p.close()


def best_policy(summaries: list[dict]) -> int | None:
    """The index of the best policy by its summary's last evaluation (when every policy
    has one), else by its mean-100 training return; None when neither is known."""
    if all(s.get("eval_last") for s in summaries):
        scores = [s["eval_last"]["mean"] for s in summaries]
    else:
        scores = [s.get("mean_return_last100") for s in summaries]
    known = [(v, -k) for k, v in enumerate(scores) if v is not None]
    return -max(known)[1] if known else None
