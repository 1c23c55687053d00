"""bench/bf16_ratio.py: a policy's float32 log-probabilities do not depend on the forward
pass's batch, bf16's differ from them by its rounding alone, and the played steps are
the ones scored."""

from __future__ import annotations

import dataclasses

import torch

from bench.bf16_ratio import log_probs, play
from option_flags import default_values
from training.config import make_config
from training.evaluate import acting_model
from wrappers.envs import env_info

ENV_ID = "MinAtar/Breakout-v1"


def fresh_model(env_id: str = ENV_ID):
    """(config, env info, model): `env_id`'s defaults and a fresh model built after
    torch.manual_seed(0) (tests/test_bench_bf16_grads.py uses it too)."""
    cfg, errors = make_config(default_values(env=env_id))
    assert not errors
    info = env_info(env_id, cfg.env_options())
    torch.manual_seed(0)
    return cfg, info, cfg.model_spec(info).build()


def _model_and_config():
    cfg, info, model = fresh_model()
    ckpt = {"env_info": dataclasses.asdict(info), "config": cfg.to_dict(),
            "policies": [{"agent": {"model": model.state_dict()}}]}
    return acting_model(ckpt), cfg


def test_log_probs_of_played_steps_by_batch_and_precision():
    model, cfg = _model_and_config()
    obs, actions = play(model, ENV_ID, cfg.env_options(), envs=4, steps=16)
    assert obs.shape[0] == actions.shape[0] == 64
    by_actor = log_probs(model, obs, actions, 4, bf16=False)
    by_learner = log_probs(model, obs, actions, 64, bf16=False)
    torch.testing.assert_close(by_learner, by_actor, atol=1e-5, rtol=1e-5)
    assert (by_actor <= 0).all() and by_actor.dtype == torch.float32
    bf16 = log_probs(model, obs, actions, 64, bf16=True)
    gap = (bf16 - by_actor).abs()
    assert bf16.dtype == torch.float32 and 0 < gap.max() < 0.05
