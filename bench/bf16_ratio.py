"""How far bf16 moves PPO's first ratio, as JSON: a saved policy's log-probabilities in
the learner's precision against the actors'.

    python -m bench.bf16_ratio --checkpoint=results/<run> [--steps=256] [--envs=4]
                               [--minibatch=256]

The policy plays `--steps` steps of `--envs` envs of the run's env (training env
options; actions sampled in float32, as the actors do), then the log-probabilities of
the actions taken are computed four ways: in batches of `--envs` (an actor's forward
pass) and of `--minibatch` (a learner's), each in float32 and under bf16 autocast
(`--precision=bf16`). Before any update ppo's ratio pi/mu compares the learner's pass
with the actors'; for each pair the JSON gives the mean and largest |log pi - log mu|
and the share of steps whose ratio lies outside [1 - clip, 1 + clip] (`--clip`,
Atari's 0.1). On a CPU without native bf16 PyTorch emulates it (slowly).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from agents.networks import step_model  # noqa: E402
from training.checkpoint import load_checkpoint  # noqa: E402
from training.config import env_options  # noqa: E402
from training.evaluate import acting_model  # noqa: E402
from wrappers.envs import make_batched_env  # noqa: E402


def play(model, env_id: str, options, envs: int, steps: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(observations [steps x envs, *obs_shape], the sampled actions [steps x envs])."""
    env = make_batched_env(env_id, envs, options, seed=0)
    g = torch.Generator().manual_seed(0)
    obs, rows, actions = torch.as_tensor(env.reset()), [], []
    try:
        with torch.inference_mode():
            for _ in range(steps):
                action = model.distribution(step_model(model, obs)[0]).sample(g)
                rows.append(obs.clone())
                actions.append(action)
                obs = torch.as_tensor(env.step(action.numpy()).obs)
    finally:
        env.close()
    return torch.cat(rows), torch.cat(actions)


def log_probs(model, obs: torch.Tensor, actions: torch.Tensor, batch: int, bf16: bool
              ) -> torch.Tensor:
    """The float32 log-probabilities [N] of `actions` under `model`, in forward passes
    of `batch` rows, under bf16 autocast if `bf16`."""
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        params = torch.cat([step_model(model, obs[i:i + batch])[0].float()
                            for i in range(0, len(obs), batch)])
    return model.distribution(params).log_prob(actions)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--checkpoint", required=True, help="a run directory or checkpoint.pt")
    p.add_argument("--steps", type=int, default=256)
    p.add_argument("--envs", type=int, default=4)
    p.add_argument("--minibatch", type=int, default=256)
    p.add_argument("--clip", type=float, default=0.1)
    args = p.parse_args(argv)
    ckpt = load_checkpoint(args.checkpoint)
    model = acting_model(ckpt)
    cfg = ckpt["config"]
    obs, actions = play(model, cfg["env"], env_options(cfg, training=True), args.envs,
                        args.steps)
    lp = {(b, bf16): log_probs(model, obs, actions, b, bf16)
          for b in (args.envs, args.minibatch) for bf16 in (False, True)}
    pairs = {"learner fp32, actors fp32": ((args.minibatch, False), (args.envs, False)),
             "learner bf16, actors fp32": ((args.minibatch, True), (args.envs, False)),
             "learner bf16, actors bf16": ((args.minibatch, True), (args.envs, True))}
    out = {"checkpoint": args.checkpoint, "steps": len(obs), "cpu":
           torch.backends.cpu.get_cpu_capability()}
    for name, (learner, actors) in pairs.items():
        d = lp[learner] - lp[actors]
        out[name] = {"mean_abs_log_ratio": float(d.abs().mean()),
                     "max_abs_log_ratio": float(d.abs().max()),
                     "outside_clip": float(((d.exp() - 1).abs() > args.clip).float().mean())}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
