"""The evaluation worker (workers/evaluator.py): whole games by the current weights,
eval.csv and summary.json through the real entry point, a restart after a crash."""

from __future__ import annotations

import csv
import dataclasses
import glob
import json
import logging
import os
import time

import torch
import torch.multiprocessing as mp

from agents.model_spec import ModelSpec, build_model
from tests.conftest import run_main
from tests.pair_runs import run_inline
from training.run_dir import EVAL_COLUMNS
from workers.evaluator import EvalConfig, Evaluator, duty_cap, play, wait_ready
from workers.weights import SharedWeights
from wrappers.envs import EnvOptions, env_info, make_batched_env


def test_a_reused_env_counts_each_evaluation_from_a_fresh_start():
    """Games left unfinished by one evaluation must not add to the next one's returns
    (CartPole's returns are capped at 500: 687 was seen before the fix)."""
    torch.manual_seed(0)
    model = build_model((4,), 2, 8)
    env = make_batched_env("CartPole-v1", 3, EnvOptions(episodic_life=False), seed=1)
    try:
        for k in range(4):
            games = play(model, env, 4, greedy=False, seed=k)
            assert len(games) == 4
            for ret, length in games:
                assert ret == length <= 500  # CartPole: +1 a step
    finally:
        env.close()


def test_a_run_writes_eval_csv_and_its_summary(results):
    proc = run_inline("--env=CartPole-v1", "--serial", "--learner_threads=1",
                      "--environment_max_steps=20000", "--eval_interval=5000",
                      "--eval_episodes=4", f"--results_dir={results}")
    assert proc.returncode == 0, proc.stderr
    (run,) = glob.glob(os.path.join(results, "*"))
    with open(os.path.join(run, "eval.csv"), newline="") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == EVAL_COLUMNS
    # requested at 5k, 10k, 15k and 20k (the last is waited for at the end)
    assert [int(r["env_steps"]) // 5000 for r in rows] == [1, 2, 3, 4]
    assert all(int(r["episodes"]) == 4 and float(r["max"]) <= 500 for r in rows)
    versions = [int(r["weights_version"]) for r in rows]
    assert versions == sorted(versions) and versions[0] > 0
    summary = json.load(open(os.path.join(run, "summary.json")))
    assert summary["eval_last"]["env_steps"] == int(rows[-1]["env_steps"])
    assert summary["eval_best"]["mean"] == max(float(r["mean"]) for r in rows)


def test_an_asynchronous_run_ends_with_an_evaluation_of_its_final_policy(results):
    proc = run_main("--env=CartPole-v1", "--worker_count=1", "--environment_max_steps=12000",
                    "--eval_interval=4000", "--eval_episodes=3", f"--results_dir={results}")
    assert proc.returncode == 0, proc.stderr
    (run,) = glob.glob(os.path.join(results, "*"))
    with open(os.path.join(run, "eval.csv"), newline="") as f:
        rows = list(csv.DictReader(f))
    summary = json.load(open(os.path.join(run, "summary.json")))
    assert rows and int(rows[-1]["weights_version"]) == summary["updates"]
    assert summary["eval_last"]["weights_version"] == summary["updates"]


def cartpole_evaluator(episodes: int, greedy: bool, max_duty: float | None = None):
    """(an Evaluator of CartPole games on 2 envs, not started; its model)."""
    info = env_info("CartPole-v1", EnvOptions())
    cfg = EvalConfig(env_id="CartPole-v1", env_options=EnvOptions(episodic_life=False),
                     episodes=episodes, num_envs=2, greedy=greedy,
                     models=(ModelSpec(info.obs_shape, info.num_actions, 8),), seed=0)
    model = cfg.models[0].build()
    return Evaluator(mp.get_context("spawn"), cfg, model, interval=10,
                     log=logging.getLogger("test_evaluator"), next_at=10,
                     max_duty=max_duty), model


def test_a_dead_evaluator_is_restarted(caplog):
    ev, model = cartpole_evaluator(episodes=2, greedy=True)
    ev.start()
    try:
        ev.process.kill()
        ev.process.join(10)
        with caplog.at_level(logging.WARNING, logger="test_evaluator"):
            assert ev.poll() == []
        assert ev.restarts == 1 and "restarting it" in caplog.text
        ev.maybe_request(model, versions=3, env_steps=12)
        assert ev.next_at == 20
        deadline = time.time() + 120
        got = []
        while not got:
            assert time.time() < deadline, "no evaluation from the restarted evaluator"
            got = ev.poll()
            time.sleep(0.05)
        (res,) = got
        assert (res.env_steps, res.version, len(res.returns)) == (12, 3, 2)
    finally:
        ev.close()


def test_evaluations_take_at_most_max_duty_of_the_wall_time(monkeypatch, caplog):
    ev, model = cartpole_evaluator(episodes=4, greedy=False, max_duty=0.25)
    clock = [1000.0]
    monkeypatch.setattr(time, "time", lambda: clock[0])
    ev.start()
    try:
        assert ev.maybe_request(model, versions=1, env_steps=10)
        got = []
        for _ in range(2400):  # up to about 120 s of real time
            got = ev.poll()
            if got:
                break
            ev.results.poll(0.05)
        assert got, "no evaluation"
        assert ev.not_before == 1000.0  # the clock stood still: it took 0 s, no wait
        ev.busy_since, clock[0] = 1000.0, 1002.0  # pretend: asked at 1000, took 2 s
        ev.results, real = _Ready(got[0]), ev.results
        ev.poll()
        ev.results = real
        assert ev.not_before == 1000.0 + 2.0 / 0.25
        with caplog.at_level(logging.INFO, logger="test_evaluator"):
            assert not ev.maybe_request(model, versions=2, env_steps=25)  # due, but capped
            assert not ev.maybe_request(model, versions=2, env_steps=27)  # told once
            clock[0] = 1008.0
            assert ev.maybe_request(model, versions=2, env_steps=45)
        told = [r.getMessage() for r in caplog.records]
        assert told == ["evaluation due at 20 env steps waits for the duty cap (25% of the "
                        "wall time): 6 s",
                        "evaluation at 45 env steps: 2 due point(s) of --eval_interval=10 "
                        "passed while it waited"], told
        assert ev.next_at == 50
        # the end of the run: the final weights, unless running or already asked for
        assert not ev.request_final(model, versions=3, env_steps=47)  # one is running
        ev.busy_since = None
        assert not ev.request_final(model, versions=2, env_steps=47)  # had them
        assert ev.request_final(model, versions=3, env_steps=47)
    finally:
        ev.close()


def test_the_duty_cap_grows_with_the_cores_left_free():
    assert [duty_cap(2, busy) for busy in (3, 2, 1, 0)] == [0.25, 0.25, 0.5, 0.75]
    assert duty_cap(16, 3) == 1.0  # 13 free cores: no cap


class _Ready:
    """A results pipe holding one finished evaluation."""

    def __init__(self, result):
        self.items = [result]

    def poll(self, timeout=0):
        return bool(self.items)

    def recv(self):
        return self.items.pop()

    def close(self):
        pass


def test_each_policy_is_evaluated_in_turn_at_a_due_point():
    """Two policies: a due point asks for policy 0, then, once it is done, policy 1
    (not due again), each result naming its policy and its own env steps."""
    ev, model = cartpole_evaluator(episodes=2, greedy=True)
    other = ev.cfg.models[0].build()
    ev.cfg = dataclasses.replace(ev.cfg, models=ev.cfg.models * 2)
    ev.weights.append(SharedWeights(other))
    ev.start()
    try:
        got = []
        for _ in range(2):
            assert ev.maybe_request([model, other], [4, 7], env_steps=10, policy_steps=[6, 5])
            got += wait_ready(ev, 120)
        assert not ev.maybe_request([model, other], [4, 7], env_steps=12, policy_steps=[6, 6])
        assert [(r.policy_id, r.version, r.env_steps) for r in got] == [(0, 4, 6), (1, 7, 5)]
        assert ev.next_at == 20
    finally:
        ev.close()
