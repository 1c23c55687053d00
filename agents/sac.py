"""Soft Actor-Critic (Haarnoja et al., 2018; the automatic temperature of the
second paper), as CleanRL's `sac_continuous_action.py` computes it.

On the transitions of a batch (agents/off_policy.py), B of them:
    a' ~ pi(.|s'),  y = R + discount * (min_k Q'_k(s', a') - alpha log pi(a'|s'))
    critic loss = sum_k mean_B (Q_k(s, a) - y)^2                 (twin critics)
every `policy_frequency`-th batch, that many actor and temperature steps (the
delay of TD3, made up in number, as CleanRL does):
    a~ ~ pi(.|s) (reparameterised),  actor loss = mean_B (alpha log pi(a~|s) - min_k Q_k(s, a~))
    temperature loss = mean_B -log(alpha) (log pi(a~|s) + target entropy)
with the actor step's a~ for the temperature (softlearning's; CleanRL draws a fresh
one after the actor's step, one more actor pass), target entropy -|A| and
alpha = exp(log_alpha) (`--autotune`; else the fixed `--alpha`). The target critics
follow by Polyak averaging with `--tau` every `--target_network_frequency` batches.
pi is the tanh-squashed Gaussian of agents/distributions.py (`TanhGaussian`).
"""

from __future__ import annotations

import dataclasses
import math

import torch

from agents.off_policy import ActorQ, OffPolicyAgent, polyak


class SACAgent(OffPolicyAgent):
    def __init__(self, model: ActorQ, optim, q_optim, device, gamma: float, n_step: int,
                 tau: float, policy_frequency: int, target_frequency: int, autotune: bool,
                 alpha: float, seed: int):
        super().__init__(model, optim, q_optim, device, gamma, n_step, tau, policy_frequency,
                         seed)
        self.target_frequency = target_frequency
        self.autotune = autotune
        self.alpha = alpha
        self.target_entropy = -float(model.actor.action_scale.numel())
        with torch.no_grad():
            model.log_alpha.fill_(0.0 if autotune else math.log(alpha))
        model.log_alpha.requires_grad_(autotune)
        if autotune:  # CleanRL's: Adam at the critics' lr
            self.add_optimizer("alpha", [model.log_alpha], dataclasses.replace(
                q_optim, optimizer="adam", max_grad_norm=0.0))
        # the last actor step's actor loss, entropy, alpha loss, gradient norm (a batch
        # without an actor step reports them again: means over batches stay finite)
        self._last_actor = (0.0, 0.0, 0.0, 0.0)

    @staticmethod
    def own_settings(cfg) -> dict:
        return {"policy_frequency": cfg.policy_frequency,
                "target_frequency": cfg.target_network_frequency,
                "autotune": cfg.autotune, "alpha": cfg.alpha}

    def load_state_dict(self, state: dict) -> None:
        """The checkpoint's state; a fixed `--alpha` is this run's (a resume may change
        it)."""
        super().load_state_dict(state)
        if not self.autotune:
            with torch.no_grad():
                self.model.log_alpha.fill_(math.log(self.alpha))

    def stat_names(self) -> tuple[str, ...]:
        return ("critic_loss", "actor_loss", "alpha_loss", "alpha", "entropy", "q_mean",
                "target_mean", "critic_grad_norm", "actor_grad_norm", "lr", "step_over_lr")

    def _policy(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(a~ [B, A], log pi(a~|s) [B]), reparameterised."""
        return self.actor.distribution(self.actor.params(obs)).rsample(self.generator)

    def learn(self, tr: dict[str, torch.Tensor]) -> dict[str, float]:
        alpha = self.model.log_alpha.detach().exp()
        with torch.no_grad():
            next_action, next_logp = self._policy(tr["next_obs"])
            next_q = self.target_critic(tr["next_obs"], next_action).min(0).values
            target = tr["reward"] + tr["discount"] * (next_q - alpha * next_logp)
        critic_loss, q = self.critic_loss(tr, target)
        critic_norm = self.step(critic_loss, "critic")
        if self.gradient_steps % self.policy_frequency == 0:
            for _ in range(self.policy_frequency):
                action, logp = self._policy(tr["obs"])
                actor_loss = (alpha * logp - self.actor_q(tr["obs"], action).min(0).values).mean()
                actor_norm = self.step(actor_loss, "main")
                alpha_loss = torch.zeros(())
                if self.autotune:
                    alpha_loss = (-self.model.log_alpha.exp()
                                  * (logp.detach() + self.target_entropy)).mean()
                    self.step(alpha_loss, "alpha")
                    alpha = self.model.log_alpha.detach().exp()
                self._last_actor = (actor_loss.item(), -logp.mean().item(), alpha_loss.item(),
                                    actor_norm)
        if self.gradient_steps % self.target_frequency == 0:
            polyak(self.target_critic, self.model.critic, self.tau)
        actor_loss, entropy, alpha_loss, actor_norm = self._last_actor
        return {"critic_loss": critic_loss.item(), "actor_loss": actor_loss,
                "alpha_loss": alpha_loss, "alpha": alpha.item(), "entropy": entropy,
                "q_mean": q.mean().item(), "target_mean": target.mean().item(),
                "critic_grad_norm": critic_norm, "actor_grad_norm": actor_norm}
