"""The run directory `results/<env>_<unix_ts>/` and everything written into it.

    flags.json      the full Config of the run
    episodes.csv    env_steps,frames,episode_return,episode_length,wall_time
    learner.csv     updates,env_steps,frames,fps,policy_loss,value_loss,entropy,lr,...
    events.out.tfevents.*   TensorBoard scalars (training/metrics.py)
    summary.json    counters and returns, rewritten as the run goes
    run.log         the log (status lines included)
    checkpoint.pt   the newest complete checkpoint
CSV files are flushed at every status line, summary.json is replaced atomically
(training/files.py).
"""

from __future__ import annotations

import csv
import json
import logging
import os
import sys
import time

from training.files import atomic_write_text

EPISODE_COLUMNS = ["env_steps", "frames", "episode_return", "episode_length", "wall_time"]
LEARNER_COLUMNS = ["updates", "env_steps", "frames", "fps", "policy_loss", "value_loss",
                   "entropy", "lr", "mean_rho", "grad_norm",
                   # pipeline figures, added at the end (older files lack them)
                   "policy_lag_mean", "policy_lag_max", "batch_wait_s", "update_s", "free_slots",
                   # learning diagnostics (issue 8): KL(behaviour || learner), V-trace
                   # advantages and targets, the critic's explained variance, the RMS
                   # parameter step over the lr
                   "kl", "adv_mean", "adv_std", "vs_mean", "value_mean", "explained_variance",
                   "step_over_lr"]


class RunDir:
    """Creates the run directory and owns its files."""

    def __init__(self, results_dir: str, env_id: str, config: dict, echo: bool = True,
                 resume_path: str | None = None, keep_rows: tuple[int, int] | None = None):
        """A new directory under `results_dir`, or, with `resume_path`, the directory of
        the run being resumed: its CSVs and log are appended to, after cutting them to
        `keep_rows` = (episodes, updates) rows, what the checkpoint had counted (rows
        written after the checkpoint, by a run that was killed, would be counted twice)."""
        if resume_path is None:
            name = env_id.split(":")[-1].replace("/", "-")
            ts = int(time.time())
            path = os.path.join(results_dir, f"{name}_{ts}")
            while os.path.exists(path):  # two runs in the same second
                ts += 1
                path = os.path.join(results_dir, f"{name}_{ts}")
            os.makedirs(path)
        else:
            path = resume_path
        self.path = path
        if keep_rows is not None:
            _cut_csv(self.file("episodes.csv"), keep_rows[0])
            _cut_csv(self.file("learner.csv"), keep_rows[1])
        atomic_write_text(self.file("flags.json"), json.dumps(config, indent=2, sort_keys=True))
        self._episodes_f, self.episodes = self._open_csv("episodes.csv", EPISODE_COLUMNS)
        self._learner_f, self.learner = self._open_csv("learner.csv", LEARNER_COLUMNS)
        self.log = _make_logger(self.file("run.log"), echo)

    def _open_csv(self, name: str, columns: list[str]):
        path = self.file(name)
        fresh = not os.path.exists(path) or os.path.getsize(path) == 0
        if not fresh:
            _extend_header(path, columns)
        f = open(path, "a", newline="")
        writer = csv.DictWriter(f, columns, extrasaction="ignore")
        if fresh:
            writer.writeheader()
        return f, writer

    def file(self, name: str) -> str:
        return os.path.join(self.path, name)

    def write_summary(self, summary: dict) -> None:
        atomic_write_text(self.file("summary.json"), json.dumps(summary, indent=2))

    def flush(self) -> None:
        self._episodes_f.flush()
        self._learner_f.flush()

    def close(self) -> None:
        self._episodes_f.close()
        self._learner_f.close()
        for h in list(self.log.handlers):
            h.close()
            self.log.removeHandler(h)


def _cut_csv(path: str, rows: int) -> None:
    """Keep the header and the first `rows` rows of a CSV file."""
    if not os.path.exists(path):
        return
    with open(path, newline="") as f:
        lines = f.readlines()[: rows + 1]
    atomic_write_text(path, "".join(lines))


def _extend_header(path: str, columns: list[str]) -> None:
    """A resumed run's CSV written before columns were added at the end: give it the
    new header (its old rows simply lack the new fields)."""
    with open(path, newline="") as f:
        header = next(csv.reader(f), [])
        rest = f.read()
    if header != columns and header == columns[: len(header)]:
        atomic_write_text(path, ",".join(columns) + "\r\n" + rest)


def _make_logger(path: str, echo: bool) -> logging.Logger:
    log = logging.getLogger(f"run.{path}")
    log.setLevel(logging.INFO)
    log.propagate = False
    fmt = logging.Formatter("%(asctime)s %(message)s", "%H:%M:%S")
    handlers = [logging.FileHandler(path)] + ([logging.StreamHandler(sys.stdout)] if echo else [])
    for handler in handlers:
        handler.setFormatter(fmt)
        log.addHandler(handler)
    return log
