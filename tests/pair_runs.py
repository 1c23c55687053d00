"""Playing tests/pairs.py's covering runs and refusals through main.py's entry
(`main.run`, in the test's process: no interpreter start per step), and what each
feature leaves behind as proof that the run exercised it (`EVIDENCE`)."""

from __future__ import annotations

import contextlib
import csv
import faulthandler
import glob
import io
import json
import math
import os
import signal
import subprocess
import sys

import torch

import main
from agents.registry import AGENTS
from option_flags import command_line_values, default_values
from tests.pairs import FEATURES, OFF_POLICY, Run, run_features
from training.checkpoint import acting_weights, load_checkpoint

# a few updates a step: one actor of two envs (two where a feature needs them), rollouts
# of 8 steps, no evaluation worker, no status line but the last
BUDGET = {"eval_interval": 0, "learner_threads": 1, "worker_count": 1, "envs_per_worker": 2,
          "r_f_steps": 8, "hidden_size": 32, "status_interval": 600.0}
# env steps a step: a serial run's are the same every time; the actors of a run of
# processes may run ahead of its learner, so it has more (7 updates of each policy or
# more in each of 12 runs on 2 busy cores, where 128 gave one or two)
STEPS = 128
ASYNC_STEPS = 512
# batches of 4 (rollouts; transitions for the off-policy agents); one epoch of two
# minibatches for the ppo loop; off-policy updates from env step 64 on, one per 4
BY_AGENT = {a: {"batch_size": 4,
                **({"ppo_epochs": 1, "ppo_minibatches": 2} if "ppo_epochs" in e.flags else {}),
                **({"hidden_size": 16, "learning_starts": 64, "replay_ratio": 0.25}
                   if a in OFF_POLICY else {})} for a, e in AGENTS.items()}
# test mode in the test's process: one worker, which plays --render's games (3 at most)
# inline; more workers would spawn a pool of processes for the rest
PLAY_BUDGET = {"worker_count": 1}
DEADLINE_S = 240  # the slowest run took 30 s on 2 busy cores


def invoke(**flags) -> tuple[int, str]:
    """main.py's entry with `flags` given on the command line: (exit status, stderr)."""
    status, _, err = _entry(default_values(**flags), set(flags), [])
    return status, err


def run_inline(*argv: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """tests.conftest.run_main's `main.py ARGV` without an interpreter's start (about 3 s
    of CPU for torch's import): parsed as main.py parses it, run in this process,
    its stdout and stderr captured. For `--serial` runs, which start no process; one
    that outlives `timeout` ends the test's process (`deadline`)."""
    values, explicit, problems = command_line_values(list(argv))
    with deadline(timeout):
        status, out, err = _entry(values, explicit, problems)
    return subprocess.CompletedProcess(argv, status, out, err)


def _entry(values: dict, explicit: set[str], problems: list[str]) -> tuple[int, str, str]:
    """main.run(values, explicit, problems) in this process: (exit status, stdout,
    stderr). What a
    run sets for its whole process (the signal handlers, torch's threads and random
    stream) is put back afterwards, for the tests that follow in this one."""
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    threads, rng = torch.get_num_threads(), torch.get_rng_state()
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            status = main.run(values, explicit, problems)
    finally:
        for s, handler in handlers.items():
            signal.signal(s, handler)
        torch.set_num_threads(threads)
        torch.set_rng_state(rng)
    return status, out.getvalue(), err.getvalue()


@contextlib.contextmanager
def deadline(seconds: float):
    """A run of processes that hangs ends the test's process after `seconds`, with every
    thread's traceback on stderr (pytest-xdist reports the test as failed and starts
    another worker): a broken join fails instead of stopping the suite."""
    faulthandler.dump_traceback_later(seconds, exit=True, file=sys.__stderr__)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


def _run_dir(results: str) -> str:
    (path,) = glob.glob(os.path.join(results, "*"))
    return path


class Played:
    """What a covering run left: its run directory, its log, the checkpoints after
    training (`first`) and after every step (`last`), test mode's directory."""

    def __init__(self, path: str, first: dict, test_dir: str | None):
        self.path = path
        self.first = first
        self.last = load_checkpoint(path)
        self.test_dir = test_dir
        with open(os.path.join(path, "run.log")) as f:
            self.log = f.read()

    def file(self, name: str) -> str:
        return os.path.join(self.path, name)


def play(run: Run, tmp: str) -> Played:
    """Train, resume and test `run` (the steps it has) in `tmp`, checking each step's
    result: it exits 0 and updates every policy; a resume continues the counters; test
    mode plays its games for a finite mean return."""
    results = os.path.join(tmp, "results")
    budget = STEPS if run.flags.get("serial") else ASYNC_STEPS
    train = {**BUDGET, **BY_AGENT[run.agent], **run.step_flags()[0],
             "environment_max_steps": budget, "results_dir": results}
    status, err = invoke(**train)
    assert status == 0, err[-3000:]
    path = _run_dir(results)
    first = load_checkpoint(path)
    _check_updates(first, 0)
    if run.resume is not None:
        steps = first["counters"]["env_steps"]
        status, err = invoke(op_mode="train_w_load", load_model_url=path,
                             environment_max_steps=steps + budget, **run.resume)
        assert status == 0, err[-3000:]
        resumed = load_checkpoint(path)
        assert resumed["counters"]["resumes"] == 1
        assert resumed["counters"]["env_steps"] >= steps + budget
        _check_updates(resumed, first["counters"]["updates"])
    test_dir = None
    if run.test is not None:
        status, err = invoke(op_mode="test", load_model_url=path,
                             results_dir=os.path.join(tmp, "test"), **PLAY_BUDGET, **run.test)
        assert status == 0, err[-3000:]
        test_dir = _run_dir(os.path.join(tmp, "test"))
        with open(os.path.join(test_dir, "test_summary.json")) as f:
            summary = json.load(f)
        assert summary["episodes"] == run.test["test_episode_count"], summary
        assert math.isfinite(summary["mean"]), summary
    return Played(path, first, test_dir)


def _check_updates(checkpoint: dict, before: int) -> None:
    """Every policy of `checkpoint` updated, the run more than `before` times."""
    assert checkpoint["counters"]["updates"] > before, checkpoint["counters"]
    for part in checkpoint["policies"]:
        assert part["updates"] > 0


def _stored_rollouts(state) -> bool:
    """Whether a replay's saved state (or anything holding one) has stored rollouts."""
    if isinstance(state, dict):
        if "buffers" in state and state["buffers"]:
            return True
        return any(_stored_rollouts(v) for v in state.values())
    if isinstance(state, list):
        return any(_stored_rollouts(v) for v in state)
    return False


def _pbt_rows(played: Played) -> list[dict]:
    if not os.path.exists(played.file("pbt.csv")):
        return []
    with open(played.file("pbt.csv")) as f:
        return list(csv.DictReader(f))


def _shapes(played: Played) -> set[str]:
    """The "A actors x E envs" of each start in the log."""
    return {line.split(": ", 2)[-1].split(",")[1] for line in played.log.splitlines()
            if " run directory " in line and "rank " not in line}


# feature -> whether the run shows it (where the run writes nothing of its own about a
# feature, the flags its checkpoint was saved with)
EVIDENCE = {
    "lstm": lambda p: any(".lstm." in k for k in acting_weights(p.last)),
    "box": lambda p: p.last["env_info"]["action_kind"] == "box",
    "discrete": lambda p: p.last["env_info"]["action_kind"] == "discrete",
    "pixels": lambda p: len(p.last["env_info"]["obs_shape"]) == 3,
    "vector": lambda p: len(p.last["env_info"]["obs_shape"]) == 1,
    "serial": lambda p: p.last["config"]["serial"],
    "ray": lambda p: "ray actor 0: " in p.log,
    "caching": lambda p: p.last["config"]["caching"],
    "learners": lambda p: "the largest parameter difference between the 2 learners is 0"
    in p.log,
    "policies": lambda p: len(p.last["policies"]) == 2,
    "share": lambda p: "shared replay: " in p.log,
    "weight_sync": lambda p: p.last.get("observer_WeightSyncObserver", {}).get("syncs", 0) > 0,
    "pbt": lambda p: any(r["event"] == "initial" for r in _pbt_rows(p)),
    "resume": lambda p: p.last["counters"]["resumes"] == 1,
    "checkpoint_replay": lambda p: _stored_rollouts(p.first["policies"])
    or _stored_rollouts(p.first.get("shared_replay")),
    "resume_n": lambda p: len(_shapes(p)) == 2,
    "resume_replay": lambda p: "resume: replay " in p.log
    and p.last["config"]["replay_parameters"] != p.first["config"]["replay_parameters"],
    "bf16": lambda p: "precision bf16 (" in p.log,
    "standard": lambda p: "(standard, uniform" in p.log or "standard, uniform: " in p.log,
    "elite": lambda p: "elite_sampling" in p.log,
    "attentive": lambda p: "attentive_sampling" in p.log,
    "test": lambda p: p.test_dir is not None,
    "render": lambda p: p.test_dir is not None and any(
        os.path.getsize(v) > 0 for v in glob.glob(os.path.join(p.test_dir, "test_video.*"))),
}
assert set(EVIDENCE) == {f.name for f in FEATURES}


def check_covering_run(run: Run, tmp: str) -> None:
    """Play `run` and check that it exercised every feature tests/pairs.py says it
    does."""
    played = play(run, tmp)
    missing = sorted(f for f in run_features(run) if not EVIDENCE[f](played))
    assert not missing, f"{run.name}: no sign of {missing} in {played.path}"
