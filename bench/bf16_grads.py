"""How much of ppo's policy gradient survives bf16 in the shared torso, as JSON: the
gradients of one minibatch's losses under bf16 autocast against float32, layer by
layer, with the policy's and the value's parts apart.

    python -m bench.bf16_grads --checkpoint=results/<run>   # a saved policy
    python -m bench.bf16_grads --env=PongNoFrameskip-v4     # a fresh one (at init)
                               [--steps=128] [--envs=8] [--minibatch=256]

The policy plays `--steps` steps of `--envs` envs (actions sampled; a fresh model's
input and return statistics are fitted to that play first), then the first
`--minibatch` steps give ppo's three losses at ratio 1, where the clipped surrogate's
gradient is the policy gradient's: the policy's -mean(log pi(a) A) (A: GAE(0.95) from
the model's values, standardised), the value's value_loss_weight x 0.5 mean((V -
R)^2) in normalised return units, and the entropy bonus's. For each parameter the
JSON gives |policy grad| / |value grad| in float32; the cosine between bf16's and
float32's gradient of the policy loss alone ("policy_cos") and of the whole loss
("total_cos"); and |total bf16 - total fp32| / |policy fp32| ("error_over_policy"):
above 1, bf16's rounding of the whole gradient is larger than the policy's part of
it. On a CPU without native bf16 PyTorch emulates it (slowly).

Scope: feed-forward actor-critics with discrete actions whose heads share a torso (a
saved ppo or impala run without --use_lstm; a fresh model: an Atari id, the Nature CNN
with both normalisations). gamma, lambda and the loss weights are a saved run's own.
Rewards are taken raw and a truncated episode as ended (no bootstrap), as fits Pong.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from agents.model_spec import ModelSpec  # noqa: E402
from agents.networks import step_model  # noqa: E402
from agents.normalize import value_scale  # noqa: E402
from agents.ppo import gae  # noqa: E402
from agents.registry import off_policy  # noqa: E402
from training.checkpoint import load_checkpoint  # noqa: E402
from training.config import env_options  # noqa: E402
from training.evaluate import acting_model  # noqa: E402
from wrappers.atari import looks_atari  # noqa: E402
from wrappers.batched import EnvOptions  # noqa: E402
from wrappers.envs import env_info, make_batched_env  # noqa: E402


def play(model, env_id: str, options, envs: int, steps: int) -> dict[str, torch.Tensor]:
    """{"obs" uint8 [T, B, ...], "action" [T, B], "reward" [T, B], "done" bool [T, B],
    "last_obs" [B, ...]} of `steps` steps of `envs` envs, actions sampled in float32."""
    env = make_batched_env(env_id, envs, options, seed=0)
    g = torch.Generator().manual_seed(0)
    obs, out = torch.as_tensor(env.reset()), {k: [] for k in ("obs", "action", "reward", "done")}
    try:
        with torch.inference_mode():
            for _ in range(steps):
                action = model.distribution(step_model(model, obs)[0]).sample(g)
                result = env.step(action.numpy())
                out["obs"].append(obs.clone())
                out["action"].append(action)
                out["reward"].append(torch.as_tensor(result.reward, dtype=torch.float32))
                out["done"].append(torch.as_tensor(result.terminated | result.truncated))
                obs = torch.as_tensor(result.obs)
    finally:
        env.close()
    return {**{k: torch.stack(v) for k, v in out.items()}, "last_obs": obs}


def fit_statistics(model, data: dict[str, torch.Tensor], gamma: float) -> None:
    """A fresh model's input and return statistics from the played steps."""
    t, b = data["action"].shape
    with torch.no_grad():
        if model.obs_norm is not None:
            obs = data["obs"].reshape(t * b, *data["obs"].shape[2:])
            model.obs_norm.update(model.scale_input(obs))
        if model.return_norm is not None:
            ret, g = torch.zeros(t, b), torch.zeros(b)
            for i in reversed(range(t)):
                g = data["reward"][i] + gamma * g * (~data["done"][i])
                ret[i] = g
            model.return_norm.update(ret.flatten())


def targets(model, data: dict[str, torch.Tensor], gamma: float, lam: float
            ) -> tuple[torch.Tensor, torch.Tensor]:
    """(advantages [T, B], value targets [T, B]) by GAE from the model's float32 values."""
    t, b = data["action"].shape
    with torch.no_grad():
        obs = torch.cat([data["obs"], data["last_obs"][None]])
        values = model(obs, model.initial_state(b), torch.zeros(t + 1, b, dtype=torch.bool))[1]
    discounts = gamma * (~data["done"]).float()
    adv = gae(data["reward"], discounts, values[:-1], values[-1], lam)
    return adv, adv + values[:-1]


def gradients(model, obs, action, adv, returns, part: str, bf16: bool, value_weight: float,
              entropy_weight: float) -> dict[str, torch.Tensor]:
    """The float32 gradients of loss `part` ("policy", "value" or "total") of one
    minibatch ([T, b] steps), the forward pass under bf16 autocast if `bf16`."""
    model.zero_grad(set_to_none=True)
    t, b = action.shape
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        logits, values, _ = model(obs, model.initial_state(b), torch.zeros(t, b, dtype=torch.bool))
    dist = model.distribution(logits)
    a = (adv - adv.mean()) / (adv.std() + 1e-8)
    scale = value_scale(model)
    losses = {"policy": -(dist.log_prob(action) * a).mean(),
              "value": value_weight * 0.5 * ((values - returns) / scale).pow(2).mean(),
              "entropy": -entropy_weight * dist.entropy().mean()}
    losses["total"] = sum(losses.values())
    losses[part].backward()
    return {n: p.grad.detach().clone() for n, p in model.named_parameters()
            if p.grad is not None}


def compare(model, obs, action, adv, returns, value_weight: float, entropy_weight: float
            ) -> dict[str, dict[str, float]]:
    """Per parameter the policy/value ratio and bf16's agreement (module docstring)."""
    g = {(part, bf16): gradients(model, obs, action, adv, returns, part, bf16, value_weight,
                                 entropy_weight)
         for part in ("policy", "value", "total") for bf16 in (False, True)}

    def cos(x, y):
        return float(x.flatten() @ y.flatten() / (x.norm() * y.norm() + 1e-30))

    out = {}
    for name, policy in g[("policy", False)].items():
        value = g[("value", False)].get(name)
        if value is None:  # a head the value loss does not reach
            continue
        total, total16 = g[("total", False)][name], g[("total", True)][name]
        out[name] = {"policy_over_value": float(policy.norm() / (value.norm() + 1e-30)),
                     "policy_cos": cos(g[("policy", True)][name], policy),
                     "total_cos": cos(total16, total),
                     "error_over_policy": float((total16 - total).norm() / (policy.norm() + 1e-30))}
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--checkpoint", default="", help="a run directory or checkpoint.pt")
    p.add_argument("--env", default="PongNoFrameskip-v4", help="a fresh model's env")
    p.add_argument("--steps", type=int, default=128)
    p.add_argument("--envs", type=int, default=8)
    p.add_argument("--minibatch", type=int, default=256)
    p.add_argument("--gamma", type=float, default=0.99)
    p.add_argument("--gae_lambda", type=float, default=0.95)
    p.add_argument("--value_loss_weight", type=float, default=0.5)
    p.add_argument("--entropy_loss_weight", type=float, default=0.01)
    args = p.parse_args(argv)
    torch.manual_seed(0)
    if args.checkpoint:
        ckpt = load_checkpoint(args.checkpoint)
        cfg = ckpt["config"]
        if cfg.get("use_lstm") or off_policy(cfg["agent"]):
            print("bench.bf16_grads: --checkpoint: a feed-forward actor-critic's run only (no "
                  "--use_lstm, no sac/td3/ddpg)", file=sys.stderr)
            return 2
        model, env_id = acting_model(ckpt), cfg["env"]
        options = env_options(cfg, training=True)
        for name in ("gamma", "gae_lambda", "value_loss_weight", "entropy_loss_weight"):
            setattr(args, name, cfg.get(name, getattr(args, name)))
    else:
        if not looks_atari(args.env):
            print(f"bench.bf16_grads: --env: an Atari id for a fresh model (e.g. "
                  f"PongNoFrameskip-v4), got {args.env!r}", file=sys.stderr)
            return 2
        env_id, options = args.env, EnvOptions()
        info = env_info(env_id, options)
        model = ModelSpec(info.obs_shape, info.num_actions, hidden_size=512,
                          normalize_input=True, normalize_returns=True).build()
    data = play(model, env_id, options, args.envs, args.steps)
    if not args.checkpoint:
        fit_statistics(model, data, args.gamma)
    adv, returns = targets(model, data, args.gamma, args.gae_lambda)
    t = max(1, min(args.steps, args.minibatch // args.envs))
    layers = compare(model, data["obs"][:t], data["action"][:t], adv[:t], returns[:t],
                     args.value_loss_weight, args.entropy_loss_weight)
    print(json.dumps({"checkpoint": args.checkpoint or None, "env": env_id,
                      "steps": t * args.envs, "cpu": torch.backends.cpu.get_cpu_capability(),
                      "layers": layers}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
