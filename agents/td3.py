"""TD3 (Fujimoto et al., 2018) and DDPG (Lillicrap et al., 2016), as CleanRL's
`td3_continuous_action.py` computes them.

On the transitions of a batch (agents/off_policy.py), B of them, with mu the
deterministic actor (`NoisyDeterministic.mode`: bias + scale tanh(x)) and primes
the target networks:
    a' = clip(mu'(s') + clip(N(0, sigma~^2), -c, c) * scale, low, high)   (smoothing)
    y = R + discount * min_k Q'_k(s', a')
    critic loss = sum_k mean_B (Q_k(s, a) - y)^2
and every `--policy_frequency`-th batch (the delay) one actor step,
    actor loss = -mean_B Q_1(s, mu(s)),
then the target actor and critics follow by Polyak averaging with `--tau`.
sigma~ = `--policy_noise`, c = `--noise_clip`, both fractions of the half-width.

DDPG is this class with the three parts of TD3 switched off: one critic (its model
is `single_model`), no target smoothing (sigma~ = 0) and no delay (every batch, as
the paper has it; CleanRL's ddpg_continuous_action.py delays its actor by 2).
The actors explore with Gaussian noise of std `--exploration_noise` x the half-width
(`NoisyDeterministic.sample`), a buffer of the actor that travels with its weights.
"""

from __future__ import annotations

import math

import torch

from agents.off_policy import ActorQ, OffPolicyAgent, polyak


class TD3Agent(OffPolicyAgent):
    def __init__(self, model: ActorQ, optim, q_optim, device, gamma: float, n_step: int,
                 tau: float, policy_frequency: int, policy_noise: float, noise_clip: float,
                 exploration_noise: float, seed: int):
        super().__init__(model, optim, q_optim, device, gamma, n_step, tau, policy_frequency,
                         seed)
        self.policy_noise, self.noise_clip = policy_noise, noise_clip
        self.exploration_noise = exploration_noise
        self._set_noise()
        self.target_actor = self.add_target("actor", model.actor)
        self._last_actor = (0.0, 0.0)  # the last actor step's loss and gradient norm

    @staticmethod
    def own_settings(cfg) -> dict:
        return {"policy_frequency": cfg.policy_frequency, "policy_noise": cfg.policy_noise,
                "noise_clip": cfg.noise_clip, "exploration_noise": cfg.exploration_noise}

    def _set_noise(self) -> None:
        """The actors' exploration noise, a buffer of the actor (published with it;
        log std -30 for none)."""
        with torch.no_grad():
            self.model.actor.log_noise.fill_(math.log(self.exploration_noise)
                                             if self.exploration_noise > 0 else -30.0)

    def load_state_dict(self, state: dict) -> None:
        """The checkpoint's state; `--exploration_noise` is this run's."""
        super().load_state_dict(state)
        self._set_noise()

    def stat_names(self) -> tuple[str, ...]:
        return ("critic_loss", "actor_loss", "q_mean", "target_mean", "critic_grad_norm",
                "actor_grad_norm", "lr", "step_over_lr")

    def _target_action(self, next_obs: torch.Tensor) -> torch.Tensor:
        """a' [B, A]: the target actor's action, smoothed by clipped noise."""
        actor = self.target_actor
        mu = actor.distribution(actor.params(next_obs)).mode()
        if self.policy_noise <= 0:
            return mu
        noise = torch.randn(mu.shape, generator=self.generator, device=mu.device)
        noise = (noise * self.policy_noise).clamp(-self.noise_clip, self.noise_clip)
        scale, bias = actor.action_scale, actor.action_bias
        return torch.minimum(torch.maximum(mu + noise * scale, bias - scale), bias + scale)

    def learn(self, tr: dict[str, torch.Tensor]) -> dict[str, float]:
        with torch.no_grad():
            next_q = self.target_critic(tr["next_obs"], self._target_action(tr["next_obs"]))
            target = tr["reward"] + tr["discount"] * next_q.min(0).values
        critic_loss, q = self.critic_loss(tr, target)
        critic_norm = self.step(critic_loss, "critic")
        if self.gradient_steps % self.policy_frequency == 0:
            mu = self.actor.distribution(self.actor.params(tr["obs"])).mode()
            actor_loss = -self.actor_q(tr["obs"], mu)[0].mean()
            actor_norm = self.step(actor_loss, "main")
            self._last_actor = (actor_loss.item(), actor_norm)
            polyak(self.target_actor, self.model.actor, self.tau)
            polyak(self.target_critic, self.model.critic, self.tau)
        actor_loss, actor_norm = self._last_actor
        return {"critic_loss": critic_loss.item(), "actor_loss": actor_loss,
                "q_mean": q.mean().item(), "target_mean": target.mean().item(),
                "critic_grad_norm": critic_norm, "actor_grad_norm": actor_norm}


class DDPGAgent(TD3Agent):
    """TD3 without its three parts (module docstring): a `single_model`, no smoothing,
    no delay."""

    @staticmethod
    def own_settings(cfg) -> dict:
        return {"policy_frequency": 1, "policy_noise": 0.0, "noise_clip": 0.0,
                "exploration_noise": cfg.exploration_noise}
