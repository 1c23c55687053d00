"""sac, td3 and ddpg through main.py: the rate limiter holding --replay_ratio from
both sides, a checkpoint-and-resume round trip with the replay, test mode, elite and
attentive replays, and what they refuse (Pendulum learnt: test_off_policy_learning)."""

from __future__ import annotations

import csv
import glob
import os
import types

import pytest

from option_flags import default_values
from tests.conftest import run_main
from tests.pair_runs import run_inline
from training.config import make_config
from training.pacer import ReplayRatioPacer

SMALL = ("--hidden_size=32", "--batch_size=32", "--status_interval=30", "--eval_interval=0",
         "--learner_threads=1")


def run_dir(results: str) -> str:
    (path,) = glob.glob(os.path.join(results, "*"))
    return path


def learner_rows(path: str) -> list[dict]:
    with open(os.path.join(path, "learner.csv")) as f:
        return list(csv.DictReader(f))


@pytest.mark.parametrize("ratio", [0.5, 2.0])
def test_the_pacer_holds_the_ratio_with_a_slow_learner_and_with_slow_actors(ratio):
    """A simulation of the driver's loop: the learner trains at most once a round
    (slow) or the actors step once every 50 rounds (slow)."""
    for slow in ("learner", "actors"):
        counters = types.SimpleNamespace(env_steps=0)
        learner = types.SimpleNamespace(updates=0, ready=lambda: True,
                                        mixer=types.SimpleNamespace(ready=lambda: True))
        pacer = ReplayRatioPacer(counters, ratio, learning_starts=100, slack=32)
        for i in range(40_000):
            if pacer.may_act([learner]) and (slow == "learner" or i % 50 == 0):
                counters.env_steps += 16
            for _ in range(1 if slow == "learner" else 100):
                if pacer.due(learner):
                    learner.updates += 1
            assert learner.updates <= max(0, ratio * (counters.env_steps - 100))  # never ahead
        per_update = (counters.env_steps - 100) / learner.updates
        assert per_update == pytest.approx(1 / ratio, rel=0.05), slow


def test_a_resume_that_refills_its_replay_owes_no_updates():
    """A resume without --checkpoint_replay: counters far on (45,000 updates at 50,000
    env steps, the ratio's), the replay empty until 2,048 env steps came. The actors
    are not held while it refills (held, they could never fill it, and the run would
    hang), and the refill's env steps owe nothing: afterwards the learner makes an
    update per env step from the checkpoint's updates, never a burst of the 2,048."""
    counters = types.SimpleNamespace(env_steps=50_000)
    filled = {"steps": 0}
    ready = lambda: filled["steps"] >= 2048  # noqa: E731
    learner = types.SimpleNamespace(updates=45_000, ready=ready,
                                    mixer=types.SimpleNamespace(ready=ready))
    pacer = ReplayRatioPacer(counters, 1.0, learning_starts=5000, slack=32)
    most_in_a_round = 0
    for _ in range(400):
        if pacer.may_act([learner]):
            counters.env_steps += 16
            filled["steps"] += 16
        made = 0
        while pacer.due(learner):
            learner.updates += 1
            made += 1
        most_in_a_round = max(most_in_a_round, made)
    assert filled["steps"] >= 2048 + 3000  # never held for long
    assert most_in_a_round <= 16  # a round's env steps, no burst
    assert learner.updates - 45_000 == pytest.approx(filled["steps"] - 2048, abs=32)


def test_the_rate_limiter_in_a_run_of_actor_processes(results):
    """Fast actors (Pendulum) and a learner at replay ratio 0.5: the actors wait,
    the env steps per update stay within 5% of 2, the learner is never ahead."""
    out = run_main("--env=Pendulum-v1", "--agent=sac", "--worker_count=2",
                   f"--results_dir={results}", "--environment_max_steps=2000",
                   "--learning_starts=500", "--replay_ratio=0.5", *SMALL, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    rows = learner_rows(run_dir(results))
    for row in rows:
        assert int(row["updates"]) <= 0.5 * (int(row["env_steps"]) - 500)
    # a row per 100 updates (their auto --learner_csv_interval), the last at the end
    updates = [int(r["updates"]) for r in rows]
    assert updates[:-1] == list(range(100, 100 * len(rows), 100)) and updates[-1] > updates[-2]
    last = rows[-1]
    assert (int(last["env_steps"]) - 500) / int(last["updates"]) == pytest.approx(2, rel=0.05)
    assert sum(float(r["actor_wait_s"]) for r in rows) > 0


def test_slow_actors_make_the_learner_wait(results):
    out = run_main("--env=tests.counting_env:SlowBox-v0", "--agent=td3", "--worker_count=1",
                   f"--results_dir={results}", "--environment_max_steps=500",
                   "--learning_starts=200", "--replay_ratio=2", "--r_f_steps=4", *SMALL,
                   timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    rows = learner_rows(run_dir(results))
    for row in rows:
        assert int(row["updates"]) <= 2 * (int(row["env_steps"]) - 200)
    assert sum(float(r["learner_wait_s"]) for r in rows) > 0


def test_checkpoint_with_the_replay_resume_and_test_mode(results):
    common = ("--env=Pendulum-v1", "--agent=ddpg", "--serial", f"--results_dir={results}",
              "--learning_starts=300", "--checkpoint_replay", *SMALL)
    first = run_inline(*common, "--environment_max_steps=800", timeout=300)
    assert first.returncode == 0, first.stderr[-2000:]
    path = run_dir(results)
    updates = int(learner_rows(path)[-1]["updates"])
    resumed = run_inline(*common, "--op_mode=train_w_load", f"--load_model_url={path}",
                         "--environment_max_steps=1200", timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    log = open(os.path.join(path, "run.log")).read()
    assert "continues saved entry 0, with its rollouts" in log
    assert "precision fp32 (the off-policy agents train in float32)" in log
    rows = learner_rows(path)
    assert int(rows[-1]["updates"]) > updates
    # the replay came back whole: no refill, so the learner trained from the first
    # new env steps on (ratio 1: the updates follow the env steps at once)
    assert int(rows[-1]["updates"]) == pytest.approx(int(rows[-1]["env_steps"]) - 300, abs=20)
    played = run_main("--op_mode=test", f"--load_model_url={path}", "--test_episode_count=2",
                      "--test_policy=greedy", timeout=300)
    assert played.returncode == 0, played.stderr[-2000:]


def test_a_resume_without_the_replay_goes_on_at_the_ratio(results):
    """A resume without --checkpoint_replay refills 32 x 8 env steps, then trains at
    the ratio (1) from the checkpoint's updates: no burst of the refill's 256."""
    common = ("--env=Pendulum-v1", "--agent=ddpg", "--serial", f"--results_dir={results}",
              "--learning_starts=300", *SMALL)
    first = run_inline(*common, "--environment_max_steps=600", timeout=300)
    assert first.returncode == 0, first.stderr[-2000:]
    path = run_dir(results)
    before = learner_rows(path)[-1]
    resumed = run_inline(*common, "--op_mode=train_w_load", f"--load_model_url={path}",
                         "--environment_max_steps=1000", timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "it refills" in open(os.path.join(path, "run.log")).read()
    after = learner_rows(path)[-1]
    steps = int(after["env_steps"]) - int(before["env_steps"])
    updates = int(after["updates"]) - int(before["updates"])
    assert updates == pytest.approx(steps - 32 * 8, abs=20), (steps, updates)


def test_off_policy_agents_refuse_a_queue_and_their_missing_parts():
    values = {**default_values(), "env": "Pendulum-v1", "agent": "sac",
              "replay_parameters": '[{"type": "queue", "capacity": 1, "sample_ratio": 1}]',
              "use_lstm": True}
    _, errors = make_config(values, given={"replay_parameters", "use_lstm"})
    assert any("entry 0: a 'queue'" in e and "'standard'" in e for e in errors), errors
    assert any(e.startswith("--use_lstm: sac has no recurrent version") for e in errors)


def test_sac_refuses_n_step_returns_td3_takes_them():
    """sac's n-step target would lack the intermediate states' -alpha log pi terms."""
    for agent, refused in (("sac", True), ("td3", False), ("ddpg", False)):
        values = {**default_values(), "env": "Pendulum-v1", "agent": agent, "n_step": 3}
        _, errors = make_config(values, given={"agent", "n_step"})
        assert any(e.startswith("--n_step: sac's n-step target") and "--agent=sac" in e
                   for e in errors) == refused, (agent, errors)


def test_off_policy_agents_refuse_discrete_actions(results):
    out = run_inline("--env=CartPole-v1", "--agent=td3", f"--results_dir={results}", timeout=120)
    assert out.returncode == 2
    assert "td3 acts in box action spaces and CartPole-v1 has discrete actions" in out.stderr
    assert not os.path.exists(results)


def test_elite_and_attentive_replays_feed_sac(results):
    """custom entries on the actor's params (kl_div of the squashed Gaussians) and on
    its hidden layer (attentive sampling)."""
    mix = ('[{"type": "custom", "capacity": 400, "sample_ratio": 0.5, "dist_function": '
           '"kl_div"}, {"type": "custom", "capacity": 400, "sample_ratio": 0.5, '
           '"sample_strategy": "attentive_sampling", "features": "hidden"}]')
    out = run_inline("--env=Pendulum-v1", "--agent=sac", "--serial", f"--results_dir={results}",
                     "--environment_max_steps=560", "--learning_starts=300",
                     f"--replay_parameters={mix}", *SMALL, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    rows = learner_rows(run_dir(results))
    assert int(rows[-1]["updates"]) >= 240
    assert all(float(r["critic_loss"]) == float(r["critic_loss"]) for r in rows)  # no NaN
