"""The config's derived values and the run plan: computed once, and equal to what the
run then allocates."""

from __future__ import annotations

import dataclasses

from option_flags import default_values
from replay.config import ReplaySpec
from training.config import config_fields, make_config
from training.factory import build_learner
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
    assert not {"replay_specs", "env_kind", "n_envs", "store_features"} & set(saved)
    derived = [f.name for f in dataclasses.fields(cfg) if f.metadata.get("derived")]
    assert derived == ["env_kind", "replay_specs", "n_envs", "store_features"]


def test_plan_sizes_are_what_the_run_allocates(tmp_path):
    cfg = config(replay_parameters=MIX, hidden_size=16)
    plan = make_plan(cfg)
    assert plan.num_slots == 2 * 6 + 2 * cfg.batch_size
    assert plan.spec["features"][0] == (cfg.r_f_steps + 1, 16)  # the custom entry reads them
    assert plan.pixel_stack is None and plan.info.obs_shape == (4,)
    run = RunDir(str(tmp_path), cfg.env, cfg.to_dict(), echo=False)
    learner = build_learner(cfg, plan, run)
    try:
        assert learner.slots.buffers["obs"].shape[1] == plan.num_slots
        assert [r.stored_bytes() for r in learner.mixer.replays] == list(plan.replay_bytes)
        assert plan.replay_bytes[0] == 0 and min(plan.replay_bytes[1:]) > 0
    finally:
        learner.close()
        run.close()
