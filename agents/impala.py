"""IMPALA (`--agent=impala`): V-trace targets, the three losses, one optimizer step
per batch (`ImpalaAgent`).

A batch is a dict of time-major tensors with T+1 rows (see `workers/slots.py`):
row t holds the observation x_t, the behaviour policy's action, logits and value
at x_t, and the reward / termination / truncation of the transition that arrived
at x_t. Row 0 repeats the last row of the previous rollout, so the T transitions
of a rollout are rows 0..T-1 -> 1..T and V(x_T) bootstraps.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import nn

from agents import vtrace
from agents.agent import UPDATE_STATS, Agent, OptimConfig
from agents.group import ALONE, Group
from agents.networks import unroll_start
from agents.normalize import update_returns, value_scale


@dataclasses.dataclass(frozen=True)
class LossConfig:
    gamma: float = 0.99
    policy_gradient_loss_weight: float = 1.0
    value_loss_weight: float = 0.5
    entropy_loss_weight: float = 0.01
    rho_const: float | None = 1.0  # rho_bar, clips the V-trace targets
    pg_rho_const: float | None = 1.0  # clips rho in the policy-gradient advantage
    c_const: float | None = 1.0  # c_bar, clips the trace
    clip_rewards: bool = True
    reward_clipping_method: str = "abs_one_sign"
    # CLEAR (Rolnick et al., 2019): behaviour cloning on replayed rollouts only
    clear_policy_cloning_weight: float = 0.0  # KL(behaviour || current)
    clear_value_cloning_weight: float = 0.0  # (V(x) - V_behaviour(x))^2
    # LASER-style trust region: drop steps with KL(behaviour || current) above it; 0: off
    kl_div_threshold: float = 0.0
    # divide the V-trace policy-gradient advantages of a batch by their std, so the
    # entropy weight means the same whatever the scale of the rewards; their mean is
    # not subtracted (`scale_advantages`)
    normalize_advantages: bool = False


# what `impala_loss` returns, always (masked_fraction and the CLEAR terms when on)
IMPALA_STATS = ("policy_loss", "value_loss", "entropy", "mean_rho", "kl", "adv_mean",
                "adv_std", "vs_mean", "value_mean", "explained_variance")


def clip_rewards(rewards: torch.Tensor, method: str) -> torch.Tensor:
    """Reward clipping of float32 [T, B] rewards.

    abs_one_sign: sign(r); abs_one_clamp: clamp to [-1, 1]; soft_asymmetric:
    5 tanh(r / 5), negative rewards scaled by 0.3 (IMPALA's scalable_agent).
    """
    if method == "abs_one_sign":
        return torch.sign(rewards)
    if method == "abs_one_clamp":
        return torch.clamp(rewards, -1.0, 1.0)
    if method == "soft_asymmetric":
        squeezed = torch.tanh(rewards / 5.0)
        return torch.where(rewards < 0, 0.3 * squeezed, squeezed) * 5.0
    raise ValueError(f"unknown reward_clipping_method {method!r}")


def explained_variance(predicted: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """1 - Var(target - predicted) / Var(target) over all elements, a 0-d tensor on
    their device (NaN if the target is constant)."""
    var = target.var()
    return torch.where(var == 0, torch.nan, 1.0 - (target - predicted).var() / var)


def scale_advantages(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-8,
                     group: Group = ALONE) -> torch.Tensor:
    """x float32 [T, B] divided by its std over the steps where weight [T, B] (0 or 1)
    is 1, over the steps of every rank of `group` (unchanged if that std is below
    eps); steps of weight 0 are scaled too but not counted.

    Only scaled, not shifted to mean 0 as PPO implementations do. The advantage
    rho_s * (r_s + gamma v_{s+1} - V(x_s)) multiplies grad log pi(a_s|x_s) for actions
    a_s drawn from the behaviour policy mu; subtracting a constant m from it adds
    -m E_mu[grad log pi], which is 0 only if mu = pi. Under a policy lag it pushes pi
    away from mu, along the learner's last steps: with the batch means of 0.1-0.36 std
    that CartPole's advantages had, impala with a lag of one update ended below 475 in
    7 of 10 seeds that all held 500 with no lag, and in none with the advantages only
    scaled (README: Runs that stay solved). PPO's ratio multiplies its whole
    advantage, so its shift is harmless there (E_mu[ratio grad log pi] = 0).
    """
    n = group.sum(weight.sum()).clamp(min=1.0)
    mean = group.sum((x * weight).sum()) / n
    std = (group.sum(((x - mean).pow(2) * weight).sum()) / (n - 1).clamp(min=1.0)).sqrt()
    return x / torch.where(std < eps, torch.ones_like(std), std)


def transition_targets(
    batch: dict[str, torch.Tensor], cfg: LossConfig
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rewards and discounts of the T transitions x_t -> x_{t+1} of a batch.

    A termination cuts the bootstrap (discount 0). A truncation ends the
    trajectory in the slot too (the next row is a reset observation) but not the
    task: its reward gains gamma * V_mu(final obs), the actor's estimate of the
    return that the time limit cut off.

    Args:
        batch: reward float32, done bool, truncated bool, bootstrap_value float32,
            each [T+1, B].
    Returns:
        rewards float32 [T, B] (clipped if cfg.clip_rewards), discounts float32 [T, B].
    """
    rewards = batch["reward"][1:]
    if cfg.clip_rewards:
        rewards = clip_rewards(rewards, cfg.reward_clipping_method)
    truncated = batch["truncated"][1:]
    rewards = rewards + cfg.gamma * truncated.float() * batch["bootstrap_value"][1:]
    discounts = (~(batch["done"][1:] | truncated)).float() * cfg.gamma
    return rewards, discounts


def impala_loss(
    model: nn.Module, batch: dict[str, torch.Tensor], cfg: LossConfig, group: Group = ALONE
) -> tuple[torch.Tensor, dict[str, float]]:
    """The IMPALA loss of one batch.

    Args:
        model: an `agents.networks.ActorCritic`, unrolled over the batch's T+1 rows.
        batch: obs [T+1, B, ...]; action int64 [T+1, B] (float32 [T+1, B, A] for
            continuous actions); reward float32, done bool, truncated bool,
            bootstrap_value float32, value float32: [T+1, B]; logits float32
            [T+1, B, P] (the behaviour distribution's params).
        cfg: loss weights, discount and clipping.
        group: the data-parallel learners whose batches make the group's batch
            (agents/group.py); the loss is this rank's share of the group's.
    Returns:
        (scalar loss with gradient, dict of float statistics of this rank's part).

    With return normalisation (`model.return_norm`) the value error is divided by
    the running std of the returns (the loss of the normalised prediction), and the
    batch's V-trace targets are then folded into those statistics.
    """
    logits, values, _ = model(batch["obs"], *unroll_start(model, batch))

    rewards, discounts = transition_targets(batch, cfg)
    behaviour_logits = batch["logits"][:-1]
    dist = model.distribution
    target = dist(logits[:-1])
    kl = dist(behaviour_logits).kl(target)  # KL(behaviour || current), [T, B]
    mask = None
    if cfg.kl_div_threshold > 0:
        mask = (kl.detach() <= cfg.kl_div_threshold).float()
    vt = vtrace.from_logits(
        behaviour_policy_logits=behaviour_logits,
        target_policy_logits=logits[:-1],
        actions=batch["action"][:-1],
        discounts=discounts,
        rewards=rewards,
        values=values[:-1],
        bootstrap_value=values[-1],
        clip_rho_threshold=cfg.rho_const,
        clip_pg_rho_threshold=cfg.pg_rho_const,
        clip_c_threshold=cfg.c_const,
        mask=mask,
        distribution=dist,
    )
    weight = torch.ones_like(kl) if mask is None else mask
    denom = group.sum(weight.sum()).clamp(min=1.0)
    advantages = vt.pg_advantages
    if cfg.normalize_advantages:
        advantages = scale_advantages(advantages, weight, group=group)
    pg_loss = -(vt.target_action_log_probs * advantages * weight).sum() / denom
    scale = value_scale(model)
    value_loss = 0.5 * (((vt.vs - values[:-1]) / scale).pow(2) * weight).sum() / denom
    entropy = (target.entropy() * weight).sum() / denom
    loss = (
        cfg.policy_gradient_loss_weight * pg_loss
        + cfg.value_loss_weight * value_loss
        - cfg.entropy_loss_weight * entropy
    )
    stats = {
        "policy_loss": pg_loss.item(),
        "value_loss": value_loss.item(),
        "entropy": entropy.item(),
        "mean_rho": vt.log_rhos.exp().mean().item(),
        "kl": kl.mean().item(),
        "adv_mean": vt.pg_advantages.mean().item(),
        "adv_std": vt.pg_advantages.std().item(),
        "vs_mean": vt.vs.mean().item(),
        "value_mean": values[:-1].mean().item(),
        # 1 - Var(v_s - V(x_s)) / Var(v_s): 1 for a perfect critic, 0 for a constant,
        # on rollouts not trained on yet (each is taken into a step once)
        "explained_variance": explained_variance(values[:-1].detach(), vt.vs),
    }
    update_returns(model, vt.vs, group)
    if mask is not None:
        stats["masked_fraction"] = 1.0 - mask.mean().item()
    replayed = batch.get("replayed")
    clear = cfg.clear_policy_cloning_weight > 0 or cfg.clear_value_cloning_weight > 0
    if clear and replayed is not None and group.sum(replayed.sum()) > 0:
        cols = replayed.to(kl.device)
        policy_cloning = group.mean(kl[:, cols])
        value_cloning = group.mean(
            ((values[:-1, cols] - batch["value"][:-1, cols]) / scale).pow(2))
        loss = loss + cfg.clear_policy_cloning_weight * policy_cloning \
            + cfg.clear_value_cloning_weight * value_cloning
        stats.update(policy_cloning=policy_cloning.item(), value_cloning=value_cloning.item())
    return loss, stats


class ImpalaAgent(Agent):
    """V-trace actor-critic (Espeholt et al., 2018): one optimizer step per batch on
    `impala_loss`."""

    def __init__(self, model: nn.Module, loss: LossConfig, optim: OptimConfig,
                 device: torch.device):
        super().__init__(model, optim, device)
        self.loss_cfg = loss

    @classmethod
    def from_config(cls, model: nn.Module, cfg, device: torch.device) -> ImpalaAgent:
        """From a run's flags (`training.config.Config`)."""
        return cls(model, LossConfig(**{f.name: getattr(cfg, f.name)
                                        for f in dataclasses.fields(LossConfig)}),
                   OptimConfig.of(cfg), device)

    def stat_names(self) -> tuple[str, ...]:
        c = self.loss_cfg
        return (*IMPALA_STATS, "grad_norm", *UPDATE_STATS,
                *(("masked_fraction",) if c.kl_div_threshold > 0 else ()),
                *(("policy_cloning", "value_cloning") if c.clear_policy_cloning_weight > 0
                  or c.clear_value_cloning_weight > 0 else ()))

    def train(self, batch):
        loss, stats = impala_loss(self.model, batch, self.loss_cfg, self.group)
        stats["grad_norm"] = self.step(loss)
        return stats
