"""The off-policy learner's step alone, as JSON: ms per `Agent.update` of sac (or
`--agent`) on a synthetic HalfCheetah-shaped batch (17 observations, 6 actions, 256
transitions), with the twin critics fused into one batched module (`QEnsemble`, what
training uses) and as two separate MLPs, interleaved, the median of `--repeats`.

    python -m bench.off_policy_update [--agent=sac] [--device=cpu] [--threads=2]
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import time

import torch
from torch import nn

from agents.off_policy import QEnsemble
from option_flags import default_values
from training.config import make_config
from training.factory import make_agent
from wrappers.envs import EnvInfo

# HalfCheetah-v5's shapes (no MuJoCo needed to time the learner)
HALF_CHEETAH = EnvInfo((17,), "float32", 6, "mujoco", 1, 0, "box", (-1.0,) * 6, (1.0,) * 6)


class SeparateCritics(nn.Module):
    """`QEnsemble`'s interface over n separate MLPs (the unfused baseline)."""

    def __init__(self, fused: QEnsemble):
        super().__init__()
        self.n = fused.n
        dims = [w.shape[1] for w in fused.weights] + [1]
        self.nets = nn.ModuleList(nn.Sequential(
            nn.Linear(dims[0], dims[1]), nn.ReLU(), nn.Linear(dims[1], dims[2]), nn.ReLU(),
            nn.Linear(dims[2], 1)) for _ in range(self.n))

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        x = torch.cat([obs.flatten(1), action], -1)
        return torch.stack([net(x).squeeze(-1) for net in self.nets])


def agent_for(name: str, device: str, separate: bool):
    cfg, errors = make_config({**default_values(), "env": "Pendulum-v1", "agent": name,
                               "device": device})
    assert not errors, errors
    agent = make_agent(cfg, HALF_CHEETAH)
    if separate:  # rebuild what refers to the critic
        critic = SeparateCritics(agent.model.critic).to(agent.device)
        agent.model.critic = critic
        agent.target_critic = agent.target_networks["critic"] = \
            copy.deepcopy(critic).requires_grad_(False)
        schedule = agent.schedules["critic"]
        agent.add_optimizer("critic", critic.parameters(), schedule)
    return agent


def batch(device: str, t: int = 8, b: int = 256) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    out = {"obs": torch.randn(t + 1, b, 17, generator=g),
           "action": torch.rand(t + 1, b, 6, generator=g) * 2 - 1,
           "reward": torch.randn(t + 1, b, generator=g),
           "done": torch.zeros(t + 1, b, dtype=torch.bool),
           "truncated": torch.zeros(t + 1, b, dtype=torch.bool)}
    out["final_obs"] = out["obs"]
    return {k: v.to(device) for k, v in out.items()}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--agent", default="sac")
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--updates", type=int, default=200)
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    data = batch(args.device)
    agents = {"fused": agent_for(args.agent, args.device, False),
              "separate": agent_for(args.agent, args.device, True)}
    times: dict[str, list[float]] = {k: [] for k in agents}
    for _ in range(args.repeats):
        for name, agent in agents.items():
            for _ in range(20):
                agent.update(data, 0.0)
            if args.device.startswith("cuda"):
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(args.updates):
                agent.update(data, 0.0)
            if args.device.startswith("cuda"):
                torch.cuda.synchronize()
            times[name].append(1e3 * (time.perf_counter() - t0) / args.updates)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(json.dumps({"agent": args.agent, "device": args.device, "threads": args.threads,
                      "ms_per_update": med, "all": times,
                      "separate_over_fused": med["separate"] / med["fused"]}))


if __name__ == "__main__":
    main()
