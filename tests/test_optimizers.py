"""The optimizers (agents/agent.py `build_optimizer`): Adam runs torch's fused
kernel, and its steps are Adam's (Kingma & Ba, 2015, with torch's eps outside the
square root) against a NumPy reference in float64; a checkpoint written by the
per-parameter loop (every run before the fused kernel) resumes on the fused one,
where the loop would have gone; an agent loaded from another's state (pbt's
exploit) shares none of its optimizer's tensors; and the learner's step without
torch.compile's hooks (`apply_step`) is `optimizer.step()`, in a process that never
imports torch._dynamo."""

from __future__ import annotations

import copy
import subprocess
import sys

import numpy as np
import pytest
import torch

from agents.agent import apply_step, build_optimizer
from option_flags import default_values
from tests.conftest import ROOT
from tests.test_registry import _batch
from training.config import make_config
from training.factory import make_agent
from wrappers.envs import env_info


def numpy_adam(params: list[np.ndarray], grads: list[list[np.ndarray]], lr: float,
               eps: float, betas=(0.9, 0.999)) -> list[np.ndarray]:
    """`params` after one Adam step per entry of `grads` (each a gradient per param)."""
    b1, b2 = betas
    m = [np.zeros_like(p) for p in params]
    v = [np.zeros_like(p) for p in params]
    params = [p.copy() for p in params]
    for t, step_grads in enumerate(grads, start=1):
        for i, g in enumerate(step_grads):
            m[i] = b1 * m[i] + (1 - b1) * g
            v[i] = b2 * v[i] + (1 - b2) * g * g
            denom = np.sqrt(v[i]) / np.sqrt(1 - b2 ** t) + eps
            params[i] -= lr / (1 - b1 ** t) * m[i] / denom
    return params


def test_adam_is_fused_and_steps_as_a_numpy_adam():
    g = torch.Generator().manual_seed(0)
    shapes = [(64, 3), (64,), (1, 64), (1,)]
    params = [torch.nn.Parameter(torch.randn(s, generator=g)) for s in shapes]
    start = [p.detach().double().numpy().copy() for p in params]
    opt = build_optimizer(params, "adam", lr=1e-2, rmsprop_eps=0.01, adam_eps=1e-5)
    assert opt.param_groups[0]["fused"] is True
    grads = [[torch.randn(s, generator=g) * 10 ** (k % 3 - 1) for s in shapes]
             for k in range(30)]
    for step_grads in grads:
        for p, grad in zip(params, step_grads, strict=True):
            p.grad = grad.clone()
        opt.step()
    want = numpy_adam(start, [[x.double().numpy() for x in s] for s in grads], 1e-2, 1e-5)
    for p, w in zip(params, want, strict=True):
        np.testing.assert_allclose(p.detach().double().numpy(), w, rtol=1e-5, atol=1e-6)
    moved = max(float(np.abs(w - s).max()) for w, s in zip(want, start, strict=True))
    assert moved > 0.1  # 30 steps of lr 1e-2: the comparison is not of untouched params


def test_a_checkpoint_of_the_per_parameter_loop_resumes_on_the_fused_kernel():
    cfg, _ = make_config(default_values(env="CartPole-v1", agent="impala"))
    info = env_info(cfg.env, cfg.env_options())
    batches = [_batch(cfg.r_f_steps, 4, 4, 2, seed=k) for k in range(4)]
    torch.manual_seed(0)
    old = make_agent(cfg, info)
    assert cfg.optimizer == "adam"
    params = old.optimizers["main"].param_groups[0]["params"]
    loop = torch.optim.Adam(params, lr=cfg.lr, eps=cfg.adam_eps,
                            fused=False)  # what every run before the fused kernel had
    old.optimizers["main"] = loop
    for batch in batches[:2]:
        old.update(copy.deepcopy(batch), progress=0.0)
    saved = old.state_dict()
    assert saved["optimizers"]["main"]["param_groups"][0]["fused"] is False
    new = make_agent(cfg, info)
    new.load_state_dict(saved)
    group = new.optimizers["main"].param_groups[0]
    assert group["fused"] is True and group["lr"] == loop.param_groups[0]["lr"]
    assert all(torch.equal(a, b) for a, b in zip(new.model.parameters(),
                                                  old.model.parameters(), strict=True))
    for batch in batches[2:]:  # the loop and the kernel go on from the same moments
        old.update(copy.deepcopy(batch), progress=0.0)
        new.update(copy.deepcopy(batch), progress=0.0)
    for a, b in zip(new.model.parameters(), old.model.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    state = new.optimizers["main"].state
    assert all(s["step"].item() == 4 for s in state.values())


def test_an_agent_loaded_from_another_shares_no_optimizer_state_with_it():
    # pbt's exploit loads one policy's agent from another's in the same process; the
    # two then step apart. torch's loader would keep the source's moment tensors (and
    # Adam's step counts) in the copy, and each agent's steps would move the other's.
    cfg, _ = make_config(default_values(env="CartPole-v1", agent="ppo"))
    info = env_info(cfg.env, cfg.env_options())
    batches = [_batch(cfg.r_f_steps, 4, 4, 2, seed=k) for k in range(3)]
    source, copy_ = make_agent(cfg, info), make_agent(cfg, info)
    source.update(copy.deepcopy(batches[0]), progress=0.0)
    copy_.load_state_dict(source.state_dict())
    before = copy.deepcopy(source.optimizers["main"].state_dict())
    copy_.update(copy.deepcopy(batches[1]), progress=0.0)
    after = source.optimizers["main"].state_dict()
    for k, state in before["state"].items():
        for name, value in state.items():
            assert torch.equal(after["state"][k][name], value), (k, name)
    assert copy_.optimizers["main"].state_dict()["state"][0]["step"].item() == \
        before["state"][0]["step"].item() + cfg.ppo_epochs * cfg.ppo_minibatches


@pytest.mark.parametrize("name", ["adam", "rmsprop"])
def test_apply_step_steps_as_the_optimizers_own_step(name):
    g = torch.Generator().manual_seed(1)
    start = [torch.randn(s, generator=g) for s in ((8, 3), (8,))]
    params = {k: [torch.nn.Parameter(x.clone()) for x in start] for k in ("own", "apply")}
    opts = {k: build_optimizer(p, name, lr=1e-2, rmsprop_eps=1e-5) for k, p in params.items()}
    for _ in range(5):
        grads = [torch.randn_like(x) for x in start]
        for k, opt in opts.items():
            opt.zero_grad(set_to_none=True)
            for p, grad in zip(params[k], grads, strict=True):
                p.grad = grad.clone()
        opts["own"].step()
        apply_step(opts["apply"])
    for a, b, x in zip(params["own"], params["apply"], start, strict=True):
        assert torch.equal(a, b) and not torch.equal(a, x)
    own, applied = (opts[k].state_dict()["state"] for k in ("own", "apply"))
    assert all(torch.equal(own[i][n], applied[i][n]) for i in own for n in own[i])


LEARNER = """
import copy, sys
from option_flags import default_values
from tests.test_registry import _batch
from training.config import make_config
from training.factory import make_agent
from wrappers.envs import env_info
cfg, _ = make_config(default_values(env="CartPole-v1", agent="AGENT"))
agent = make_agent(cfg, env_info(cfg.env, cfg.env_options()))
agent.update(_batch(cfg.r_f_steps, 4, 4, 2, seed=0), progress=0.0)
agent.load_state_dict(copy.deepcopy(agent.state_dict()))
print(sorted(m for m in sys.modules if m.startswith("torch._dynamo")))
"""


@pytest.mark.parametrize("agent", ["ppo", "impala"])
def test_a_learner_never_imports_torch_dynamo(agent):
    # its import is 1.5 s of CPU; a torch whose optimizers reach it another way fails here
    out = subprocess.run([sys.executable, "-c", LEARNER.replace("AGENT", agent)], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", out.stdout
