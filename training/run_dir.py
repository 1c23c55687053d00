"""The run directory `results/<env>_<unix_ts>/` and everything written into it.

    flags.json      the full Config of the run
    episodes.csv    env_steps,frames,episode_return,episode_length,wall_time
    learner.csv     updates,env_steps,frames,fps,policy_loss,value_loss,entropy,lr,...
                    (LEARNER_COLUMNS, then the agent's statistics not among them:
                    `open_learner`)
    events.out.tfevents.*   TensorBoard scalars (training/metrics.py)
    summary.json    counters and returns, rewritten as the run goes
    run.log         the log (status lines included)
    checkpoint.pt   the newest complete checkpoint
With several policies (`--num_policies`) each policy has a folder `policy_<k>/` of its
own with its flags.json (its flags), episodes.csv, learner.csv, eval.csv, summary.json
and TensorBoard events; the run's top level keeps flags.json (policy 0's), run.log,
the checkpoints (every policy's part in one file), summary.json (every policy's
figures side by side), the run-wide TensorBoard figures and pbt.csv (`--with_pbt`).
CSV files and the TensorBoard events are flushed at every status line, and flushed
and fsynced before every checkpoint, so a run killed at any moment has on disk at
least the rows its newest checkpoint counts; summary.json is replaced atomically
(training/files.py). A resumed run cuts what was written after its checkpoint: the
CSV rows beyond the checkpoint's counts, and the TensorBoard events of steps beyond
its env steps or written after it was saved; its own events go to a new events file.
"""

from __future__ import annotations

import csv
import glob
import json
import logging
import os
import struct
import sys
import time

from training.files import atomic_write, atomic_write_text, fsync_path

EVAL_COLUMNS = ["env_steps", "frames", "weights_version", "mean", "std", "min", "max",
                "episodes", "wall_time"]
EPISODE_COLUMNS = ["env_steps", "frames", "episode_return", "episode_length", "wall_time"]
# learner.csv's first columns, whatever the agent (files written before an agent
# declared its statistics have them); an agent's statistics not among them follow
LEARNER_COLUMNS = ["updates", "env_steps", "frames", "fps", "policy_loss", "value_loss",
                   "entropy", "lr", "mean_rho", "grad_norm",
                   # pipeline figures, added at the end (older files lack them)
                   "policy_lag_mean", "policy_lag_max", "batch_wait_s", "update_s", "free_slots",
                   # learning diagnostics (issue 8): KL(behaviour || learner), V-trace
                   # advantages and targets, the critic's explained variance, the RMS
                   # parameter step over the lr
                   "kl", "adv_mean", "adv_std", "vs_mean", "value_mean", "explained_variance",
                   "step_over_lr",
                   # ppo agents: the fraction of steps where the clip (ppo) or the
                   # rollback (truly_ppo) is active; empty for impala
                   "clip_fraction"]


class RunDir:
    """Creates the run directory and owns its files."""

    def __init__(self, results_dir: str, env_id: str, config: dict, echo: bool = True,
                 resume_path: str | None = None,
                 keep_rows: tuple[int, int, int] | None = None,
                 keep_events: tuple[int, float | None] | None = None,
                 files: bool = True, log: logging.Logger | None = None):
        """A new directory under `results_dir`, or, with `resume_path`, the directory of
        the run being resumed: its CSVs and log are appended to, after cutting them to
        `keep_rows` = (episodes, updates, evaluations), what the checkpoint had counted
        (rows written after the checkpoint, by a run that was killed, would be counted
        twice; learner.csv keeps its rows of updates up to the count);
        its TensorBoard events are cut to `keep_events` = (env steps, unix time of the
        save or None), see `cut_events`. Without `files` it has no episodes.csv and
        eval.csv (the top level of a run of several policies); with `log` it writes to
        that logger (a policy's folder: the run's log)."""
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
            cut_csv(self.file("episodes.csv"), keep_rows[0])
            cut_csv(self.file("learner.csv"), keep_rows[1], column="updates")
            cut_csv(self.file("eval.csv"), keep_rows[2])
        if keep_events is not None:
            for events in glob.glob(self.file("events.out.tfevents.*")):
                cut_events(events, *keep_events)
        atomic_write_text(self.file("flags.json"), json.dumps(config, indent=2, sort_keys=True))
        self._episodes_f = self.episodes = self._eval_f = self.eval = None
        if files:
            self._episodes_f, self.episodes = self._open_csv("episodes.csv", EPISODE_COLUMNS)
            self._eval_f, self.eval = self._open_csv("eval.csv", EVAL_COLUMNS)
        self._learner_f = self.learner = None  # `open_learner`
        self._owns_log = log is None
        self.log = _make_logger(self.file("run.log"), echo) if log is None else log

    def child(self, name: str, config: dict, keep_rows: tuple[int, int, int] | None = None,
              keep_events: tuple[int, float | None] | None = None) -> RunDir:
        """The folder `name` of this run (a policy's), with its own files, writing to
        this run's log; `keep_rows` and `keep_events` as for a resumed run."""
        path = self.file(name)
        os.makedirs(path, exist_ok=True)
        return RunDir("", "", config, resume_path=path, keep_rows=keep_rows,
                      keep_events=keep_events, log=self.log)

    def open_learner(self, stat_names: tuple[str, ...]) -> None:
        """Open learner.csv for rows of the agent's statistics `stat_names` (its
        `stat_names()`) and the learner's columns; a row with a field the header lacks
        is an error (csv's ValueError), never silently dropped."""
        columns = LEARNER_COLUMNS + [s for s in stat_names if s not in LEARNER_COLUMNS]
        self._learner_f, self.learner = self._open_csv("learner.csv", columns)

    def _files(self) -> list:
        return [f for f in (self._episodes_f, self._learner_f, self._eval_f) if f is not None]

    def _open_csv(self, name: str, columns: list[str]):
        path = self.file(name)
        fresh = not os.path.exists(path) or os.path.getsize(path) == 0
        if not fresh:
            _extend_header(path, columns)
        f = open(path, "a", newline="")
        writer = csv.DictWriter(f, columns)
        if fresh:
            writer.writeheader()
        return f, writer

    def file(self, name: str) -> str:
        return os.path.join(self.path, name)

    def write_summary(self, summary: dict) -> None:
        atomic_write_text(self.file("summary.json"), json.dumps(summary, indent=2))

    def flush(self, sync: bool = False) -> None:
        """Flush the CSVs; with `sync`, fsync them, the log and the TensorBoard events
        too (flush those first: `training.report.Report.flush`)."""
        for f in self._files():
            f.flush()
        if sync:
            for f in self._files():
                os.fsync(f.fileno())
            log = [self.file("run.log")] if self._owns_log else []
            for path in [*log, *glob.glob(self.file("events.out.tfevents.*"))]:
                fsync_path(path)

    def close(self) -> None:
        for f in self._files():
            f.close()
        for h in list(self.log.handlers) if self._owns_log else []:
            h.close()
            self.log.removeHandler(h)


def cut_csv(path: str, rows: int, column: str | None = None) -> None:
    """Keep the header and the first `rows` rows of a CSV file; with `column`, the
    rows before the first whose integer `column` exceeds `rows` or that is torn (no
    line end: a kill mid-write)."""
    if not os.path.exists(path):
        return
    with open(path, newline="") as f:
        lines = f.readlines()
    keep = rows + 1
    if column is not None and lines:
        at = next(csv.reader(lines[:1])).index(column)
        keep = 1
        while keep < len(lines) and lines[keep].endswith("\n") and \
                int(next(csv.reader([lines[keep]]))[at]) <= rows:
            keep += 1
    atomic_write_text(path, "".join(lines[:keep]))


def _records(data: bytes):
    """(offset, end) of each whole TFRecord in `data`: uint64 length, uint32 crc,
    the payload, uint32 crc (a torn record at the end, from a kill, is left out)."""
    pos = 0
    while pos + 12 <= len(data):
        (length,) = struct.unpack("<Q", data[pos:pos + 8])
        end = pos + 12 + length + 4
        if end > len(data):
            return
        yield pos, end
        pos = end


def cut_events(path: str, max_step: int, max_wall: float | None) -> int:
    """Rewrite the TensorBoard events file `path` without the events of a step above
    `max_step` or written after `max_wall` (unix time; None: no bound), and without a
    torn last record; returns how many events were dropped. The file's first event
    (its version) is always kept."""
    from tensorboard.compat.proto.event_pb2 import Event

    with open(path, "rb") as f:
        data = f.read()
    kept, dropped = [], 0
    for k, (start, end) in enumerate(_records(data)):
        event = Event.FromString(data[start + 12:end - 4])
        if k and (event.step > max_step or (max_wall is not None and event.wall_time > max_wall)):
            dropped += 1
        else:
            kept.append(data[start:end])
    whole = sum(len(r) for r in kept)
    if dropped or whole != len(data):
        atomic_write(path, lambda f: f.write(b"".join(kept)))
    return dropped


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
