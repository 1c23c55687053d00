"""IMPACT (`--agent=impact`): PPO's clipped surrogate against a target network, with
V-trace's corrections against the behaviour policy (Luo et al., "IMPACT: Importance
Weighted Asynchronous Architectures with Clipped Target Networks", ICLR 2020).

Three policies meet in a batch `[T+1, B, ...]`: mu, the behaviour policy the actors
(or a replay's older weights) acted with, whose params the batch stores as "logits";
pi_target, a frozen copy of the model, refreshed every `target_update` learner
updates (batches); and pi, the model being trained. Per batch:

1. pi_target's params for rows 0..T, and the current model's V(x_t), no gradients.
2. V-trace (`agents/vtrace.py`) with importance weights pi_target / mu:
       rho_t = min(rho_bar, pi_target(a_t|x_t) / mu(a_t|x_t)),
       A_t = rho_t (r_t + d_t v_{t+1} - V(x_t)),   value target v_t.
3. `epochs` x `minibatches` optimizer steps (agents/ppo.py's loop) on
       L = -mean(min(r A, clip(r, 1 - clip, 1 + clip) A)) + value_loss_weight x
           0.5 mean((V - v)^2) - entropy_loss_weight x mean(entropy),
   with r = pi(a_t|x_t) / pi_target(a_t|x_t) and A normalised per minibatch. Since
   rho_t carries pi_target / mu, r A is the paper's (pi / mu) A' (with rho clipped at
   rho_bar, as RLlib's APPO clips it), and its clipped term is clip(pi / pi_target)
   (pi_target / mu) A'.

So replayed rollouts, whose mu is far from pi, are still clipped around a recent
policy and keep their gradient, where ppo's ratio pi / mu leaves its clip range and
drops them. The paper's circular buffer (each batch sampled K times) is our
replays: `--replays=standard` trains on each fresh rollout twice on average.
"""

from __future__ import annotations

import torch
from torch import nn

from agents.agent import OptimConfig
from agents.networks import unroll_start
from agents.normalize import update_returns
from agents.ppo import PPOAgent, PPOConfig, ppo_config


class ImpactAgent(PPOAgent):
    """PPO's loop on ratios against a target network (see the module docstring).
    `cfg.advantage` must be "vtrace"."""

    def __init__(self, model: nn.Module, cfg: PPOConfig, optim: OptimConfig,
                 device: torch.device, seed: int = 0, target_update: int = 1):
        if cfg.advantage != "vtrace":
            raise ValueError("IMPACT's advantages are V-trace's: PPOConfig.advantage must be "
                             f"'vtrace', got {cfg.advantage!r}")
        super().__init__(model, cfg, optim, device, seed)
        self.target_update = target_update
        self.target = self.add_target("impact", self.model)
        self.updates = 0  # learner updates so far; the target is refreshed before some

    @classmethod
    def from_config(cls, model: nn.Module, cfg, device: torch.device) -> ImpactAgent:
        return cls(model, ppo_config(cfg), OptimConfig.of(cfg), device, seed=cfg.seed,
                   target_update=cfg.impact_target_update)

    def stat_names(self) -> tuple[str, ...]:
        return (*super().stat_names(), "kl_target_behaviour")

    def state_dict(self) -> dict:
        return {**super().state_dict(), "impact_updates": self.updates}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.updates = state["impact_updates"]

    @torch.no_grad()
    def target_logits(self, batch: dict[str, torch.Tensor]) -> torch.Tensor | None:
        """pi_target's distribution params float32 [T+1, B, P], refreshing the
        target from the model first every `target_update` updates; None right after
        a refresh, when pi_target is the model (whose params `targets` computes)."""
        refresh = self.updates % self.target_update == 0
        self.updates += 1
        if refresh:
            self.target.load_state_dict(self.model.state_dict())
            return None
        logits, _, _ = self.target(batch["obs"], *unroll_start(self.target, batch))
        return logits

    def train(self, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        batch = self.with_input(batch)  # the target network reads the raw "obs"
        adv, returns, old_values, target_logits = self.targets(
            batch, policy_logits=self.target_logits(batch))
        update_returns(self.model, returns, self.group)
        stats = self.epochs({**batch, "logits": target_logits}, adv, returns, old_values)
        mu = self.model.distribution(batch["logits"][:-1])
        stats["kl_target_behaviour"] = mu.kl(
            self.model.distribution(target_logits[:-1])).mean().item()
        return stats
