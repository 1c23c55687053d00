"""The config's derived values and the run plan: computed once, and equal to what the
run then allocates."""

from __future__ import annotations

import csv
import dataclasses
import glob
import os

from option_flags import default_values
from replay.config import ReplaySpec
from tests.conftest import run_main
from training.config import config_fields, make_config
from training.factory import build_driver
from training.plan import make_plan
from training.run_dir import RunDir

MIX = ('[{"type": "queue", "sample_ratio": 0.5}, {"type": "standard", "capacity": 40, '
       '"sample_ratio": 0.25}, {"type": "custom", "capacity": 30, "sample_ratio": 0.25, '
       '"features": "hidden"}]')


def config(**overrides):
    cfg, errors = make_config(default_values(env="CartPole-v1", worker_count=2,
                                             envs_per_worker=3, **overrides))
    assert not errors, errors
    return cfg


def test_config_derives_typed_replays_once_and_saves_only_flags():
    cfg = config(replay_parameters=MIX)
    assert all(isinstance(r, ReplaySpec) for r in cfg.replay_specs)
    assert [r.type for r in cfg.replay_specs] == ["queue", "standard", "custom"]
    assert (cfg.env_kind, cfg.n_envs, cfg.store_features) == ("vector", 6, True)
    assert not config().store_features  # the queue reads no hidden features
    saved = cfg.to_dict()
    assert list(saved) == config_fields()
    assert not {"replay_specs", "env_kind", "n_envs", "store_features", "off_policy"} \
        & set(saved)
    derived = [f.name for f in dataclasses.fields(cfg) if f.metadata.get("derived")]
    assert derived == ["env_kind", "replay_specs", "n_envs", "store_features", "off_policy"]


def test_plan_sizes_are_what_the_run_allocates(tmp_path):
    cfg = config(replay_parameters=MIX, hidden_size=16)
    plan = make_plan(cfg)
    assert plan.num_slots == 2 * 6 + 2 * cfg.batch_size
    # --queued_batches: the envs' slots and that many batches more
    assert make_plan(config(queued_batches=2)).num_slots == 6 + 2 * cfg.batch_size
    assert plan.spec["features"][0] == (cfg.r_f_steps + 1, 16)  # the custom entry reads them
    assert plan.pixel_stack is None and plan.info.obs_shape == (4,)
    run = RunDir(str(tmp_path), cfg.env, cfg.to_dict(), echo=False)
    learner = build_driver(cfg, plan, run)
    try:
        assert learner.slots.buffers["obs"].shape[1] == plan.num_slots
        replays = learner.learners[0].mixer.replays
        assert [r.stored_bytes() for r in replays] == list(plan.replay_bytes)
        assert plan.replay_bytes[0] == 0 and min(plan.replay_bytes[1:]) > 0
    finally:
        learner.close()
        run.close()


def test_queued_batches_bound_the_policy_lag_of_a_learner_slower_than_the_envs(results):
    # 10 epochs a batch: the learner is far slower than 4 CartPole envs, so the actors
    # fill every free slot. With 4 + 1 x 2 slots a rollout waits for at most (4 + 2) / 2
    # updates, plus the actor's weights' own (one or two): 5 at most (a run here: 4).
    # With 2 x (4 + 2) = 12 slots (the flag left out) the same run reached 7.
    done = run_main("--env=CartPole-v1", "--agent=ppo", "--worker_count=1",
                    "--envs_per_worker=4", "--batch_size=2", "--r_f_steps=8",
                    "--ppo_epochs=10", "--ppo_minibatches=2", "--queued_batches=1",
                    "--environment_max_steps=800", "--eval_interval=0",
                    f"--results_dir={results}", timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    (run,) = glob.glob(os.path.join(results, "CartPole-v1_*"))
    rows = list(csv.DictReader(open(os.path.join(run, "learner.csv"))))
    assert len(rows) > 20
    assert max(float(r["policy_lag_max"]) for r in rows) <= 5
