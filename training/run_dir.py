"""The run directory `results/<env>_<unix_ts>/` and everything written into it.

    flags.json      the full Config of the run
    episodes.csv    env_steps,frames,episode_return,episode_length,wall_time
    learner.csv     updates,env_steps,frames,fps,policy_loss,value_loss,entropy,lr,...
    summary.json    counters and returns, rewritten as the run goes
    run.log         the log (status lines included)
    checkpoint.pt   the newest complete checkpoint
CSV files are flushed at every status line, summary.json is replaced atomically.
"""

from __future__ import annotations

import csv
import json
import logging
import os
import sys
import time

EPISODE_COLUMNS = ["env_steps", "frames", "episode_return", "episode_length", "wall_time"]
LEARNER_COLUMNS = ["updates", "env_steps", "frames", "fps", "policy_loss", "value_loss",
                   "entropy", "lr", "mean_rho", "grad_norm"]


def atomic_write_text(path: str, text: str) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class RunDir:
    """Creates the run directory and owns its files."""

    def __init__(self, results_dir: str, env_id: str, config: dict, echo: bool = True):
        name = env_id.split(":")[-1].replace("/", "-")
        ts = int(time.time())
        path = os.path.join(results_dir, f"{name}_{ts}")
        while os.path.exists(path):  # two runs in the same second
            ts += 1
            path = os.path.join(results_dir, f"{name}_{ts}")
        os.makedirs(path)
        self.path = path
        atomic_write_text(self.file("flags.json"), json.dumps(config, indent=2, sort_keys=True))
        self._episodes_f = open(self.file("episodes.csv"), "w", newline="")
        self.episodes = csv.writer(self._episodes_f)
        self.episodes.writerow(EPISODE_COLUMNS)
        self._learner_f = open(self.file("learner.csv"), "w", newline="")
        self.learner = csv.DictWriter(self._learner_f, LEARNER_COLUMNS, extrasaction="ignore")
        self.learner.writeheader()
        self.log = _make_logger(self.file("run.log"), echo)

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
