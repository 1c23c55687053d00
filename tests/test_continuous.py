"""Continuous (Box) actions through the data path: the env gets the clipped action,
the slots keep the sampled one, and the Gaussian model's params and shapes."""

from __future__ import annotations

import numpy as np
import torch

from agents.distributions import DiagGaussian
from agents.model_spec import ModelSpec
from tests.actor_harness import actors
from wrappers.envs import EnvOptions, env_info, family_of, make_batched_env

ECHO = "tests.counting_env:EchoBox-v0"


def test_a_box_env_is_continuous_and_its_info_says_so():
    info = env_info(ECHO, EnvOptions())
    assert (info.kind, info.action_kind, info.num_actions) == ("continuous", "box", 2)
    assert family_of("Pendulum-v1").name == "continuous"
    assert family_of("CartPole-v1").name == "vector"


def test_the_env_receives_clipped_actions_and_the_caller_keeps_its_own():
    env = make_batched_env(ECHO, 2, EnvOptions(), seed=0)
    env.reset()
    actions = np.array([[3.0, -0.5], [-7.0, 0.25]], dtype=np.float32)
    step = env.step(actions)
    np.testing.assert_array_equal(step.obs, [[1.0, -0.5], [-1.0, 0.25]])
    np.testing.assert_array_equal(actions, [[3.0, -0.5], [-7.0, 0.25]])
    env.close()


def test_actors_store_the_unclipped_samples_that_the_env_saw_clipped():
    with actors(env_id=ECHO, workers=1, envs=3, unroll=6) as h:
        done = h.rollouts()[0]
        batch = h.slots.gather(torch.tensor(done.indices))
    action, obs, logits = batch["action"], batch["obs"], batch["logits"]
    assert action.dtype == torch.float32 and action.shape == (7, len(done.indices), 2)
    assert logits.shape == (7, len(done.indices), 4)
    assert (action.abs() > 1).any(), "no sample outside the bounds: the test proves nothing"
    # row t+1's observation is what the env received for row t's action, unless the
    # transition into row t+1 ended the episode (then it is a reset's zeros)
    ended = batch["done"][1:] | batch["truncated"][1:]
    seen = obs[1:][~ended]
    np.testing.assert_array_equal(seen.numpy(), action[:-1][~ended].clamp(-1, 1).numpy())
    # the stored params are the behaviour policy's: the sampled actions are scored by them
    assert torch.isfinite(DiagGaussian(logits).log_prob(action)).all()


def test_a_gaussian_model_emits_means_and_a_shared_log_std():
    model = ModelSpec((3,), 2, 16, action_kind="box").build()
    assert model.distribution is DiagGaussian
    with torch.no_grad():
        model.log_std.copy_(torch.tensor([0.1, -0.3]))
    params, value, _ = model(torch.randn(5, 4, 3), (), torch.zeros(5, 4, dtype=torch.bool))
    assert params.shape == (5, 4, 4) and value.shape == (5, 4)
    torch.testing.assert_close(params[..., 2:], torch.tensor([0.1, -0.3]).expand(5, 4, 2))


def test_mlp_activation_and_log_std_init_reach_the_learners_model():
    from option_flags import default_values
    from training.config import make_config
    from training.factory import make_agent
    from training.session import architecture_problem

    def agent(**flags):
        cfg, errors = make_config(default_values(env=ECHO, **flags))
        assert not errors, errors
        return cfg, make_agent(cfg, env_info(ECHO, cfg.env_options()))

    def kinds(torso):
        return {type(m).__name__ for m in torso} & {"Tanh", "ReLU"}

    plain_cfg, plain = agent()
    assert kinds(plain.model.policy_torso) == {"Tanh"} and (plain.model.log_std == 0).all()
    cfg, tuned = agent(mlp_activation="relu", log_std_init=-2.0)
    assert kinds(tuned.model.policy_torso) == kinds(tuned.model.value_torso) == {"ReLU"}
    torch.testing.assert_close(tuned.model.log_std.detach(), torch.full((2,), -2.0))
    # the activation is the architecture's: a resume must keep it; the first log-std is not
    def policies(model) -> list[dict]:  # a checkpoint's (format 2)
        return [{"agent": {"model": model.state_dict()}}]

    ckpt = {"env_info": {"obs_shape": [2], "num_actions": 2, "action_kind": "box"},
            "config": cfg.to_dict(), "policies": policies(tuned.model)}
    assert architecture_problem(agent(mlp_activation="relu")[0], ckpt) is None
    assert "--mlp_activation=relu" in architecture_problem(plain_cfg, ckpt)
    shared_cfg = agent(mlp_activation="relu", mlp_shared_torso=True)[0]
    assert "--mlp_shared_torso" in architecture_problem(shared_cfg, ckpt)
    assert architecture_problem(agent(mlp_activation="relu", log_std_init=0.5)[0], ckpt) is None
    # a checkpoint saved before these flags existed resumes with what it had
    old = {k: v for k, v in plain_cfg.to_dict().items()
           if k not in ("mlp_activation", "log_std_init", "mlp_shared_torso", "queued_batches",
                        "scale_rewards")}
    ckpt = {**ckpt, "config": old, "policies": policies(plain.model)}
    assert architecture_problem(plain_cfg, ckpt) is None
