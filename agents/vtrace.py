"""V-trace off-policy actor-critic targets (Espeholt et al., 2018, IMPALA).

Pure torch, no flags, time-major. The contract is DeepMind's
`scalable_agent/vtrace.py` (and TorchBeast's port of it):

    from_importance_weights(log_rhos, discounts, rewards, values,
                            bootstrap_value, clip_rho_threshold=1.0,
                            clip_pg_rho_threshold=1.0, clip_c_threshold=1.0)
    from_logits(behaviour_policy_logits, target_policy_logits, actions, ...)

All outputs are computed without gradient: they are targets.

Notation (T steps, B trajectories, A actions):
    rho_s = min(rho_bar, pi(a_s|x_s) / mu(a_s|x_s))
    c_s   = min(c_bar,   pi(a_s|x_s) / mu(a_s|x_s))
    delta_s = rho_s (r_s + gamma_s V(x_{s+1}) - V(x_s))
    v_s - V(x_s) = delta_s + gamma_s c_s (v_{s+1} - V(x_{s+1}))
    pg_advantage_s = rho_pg_s (r_s + gamma_s v_{s+1} - V(x_s))
with V(x_T) = v_T = bootstrap_value.
"""

from __future__ import annotations

import collections

import torch

from agents.distributions import Categorical

VTraceReturns = collections.namedtuple("VTraceReturns", ["vs", "pg_advantages"])

VTraceFromLogitsReturns = collections.namedtuple(
    "VTraceFromLogitsReturns",
    [
        "vs",
        "pg_advantages",
        "log_rhos",
        "behaviour_action_log_probs",
        "target_action_log_probs",
    ],
)


def action_log_probs(policy_logits: torch.Tensor, actions: torch.Tensor,
                     distribution: type = Categorical) -> torch.Tensor:
    """log pi(a|x) for the taken actions.

    Args:
        policy_logits: float32 [T, B, P], the params of `distribution` (a class of
            agents/distributions.py; P = A unnormalised log-probabilities by default).
        actions: int64 [T, B] (float32 [T, B, A] for a Gaussian).
    Returns:
        float32 [T, B].
    """
    return distribution(policy_logits).log_prob(actions)


def _clip(x: torch.Tensor, threshold: float | None) -> torch.Tensor:
    return x if threshold is None else torch.clamp(x, max=threshold)


@torch.no_grad()
def from_importance_weights(
    log_rhos: torch.Tensor,
    discounts: torch.Tensor,
    rewards: torch.Tensor,
    values: torch.Tensor,
    bootstrap_value: torch.Tensor,
    clip_rho_threshold: float | None = 1.0,
    clip_pg_rho_threshold: float | None = 1.0,
    clip_c_threshold: float | None = 1.0,
    mask: torch.Tensor | None = None,
) -> VTraceReturns:
    """V-trace targets from log importance weights.

    Args:
        log_rhos: float32 [T, B], log(pi(a_s|x_s) / mu(a_s|x_s)).
        discounts: float32 [T, B], gamma_s; 0 where the episode ended at s.
        rewards: float32 [T, B], r_s received after a_s.
        values: float32 [T, B], V(x_s) under the target policy's critic.
        bootstrap_value: float32 [B], V(x_T).
        clip_rho_threshold: rho_bar, or None for no clipping.
        clip_pg_rho_threshold: clip of rho in the policy-gradient advantage, or None.
        clip_c_threshold: c_bar, or None for no clipping.
        mask: optional [T, B], 0 where a step is dropped (too off-policy): its rho and
            c become 0, so v_s = V(x_s) there and the trace stops at it.
    Returns:
        VTraceReturns with vs [T, B] and pg_advantages [T, B], float32, no grad.
    """
    log_rhos = log_rhos.detach()
    values = values.detach()
    bootstrap_value = bootstrap_value.detach()
    rhos = torch.exp(log_rhos)
    clipped_rhos = _clip(rhos, clip_rho_threshold)
    cs = _clip(rhos, clip_c_threshold)
    if mask is not None:
        clipped_rhos = clipped_rhos * mask
        cs = cs * mask

    values_t_plus_1 = torch.cat([values[1:], bootstrap_value.unsqueeze(0)], dim=0)
    deltas = clipped_rhos * (rewards + discounts * values_t_plus_1 - values)

    acc = torch.zeros_like(bootstrap_value)
    vs_minus_v = torch.empty_like(values)
    for t in range(values.shape[0] - 1, -1, -1):
        acc = deltas[t] + discounts[t] * cs[t] * acc
        vs_minus_v[t] = acc
    vs = vs_minus_v + values

    vs_t_plus_1 = torch.cat([vs[1:], bootstrap_value.unsqueeze(0)], dim=0)
    clipped_pg_rhos = _clip(rhos, clip_pg_rho_threshold)
    pg_advantages = clipped_pg_rhos * (rewards + discounts * vs_t_plus_1 - values)
    return VTraceReturns(vs=vs, pg_advantages=pg_advantages)


def from_logits(
    behaviour_policy_logits: torch.Tensor,
    target_policy_logits: torch.Tensor,
    actions: torch.Tensor,
    discounts: torch.Tensor,
    rewards: torch.Tensor,
    values: torch.Tensor,
    bootstrap_value: torch.Tensor,
    clip_rho_threshold: float | None = 1.0,
    clip_pg_rho_threshold: float | None = 1.0,
    clip_c_threshold: float | None = 1.0,
    mask: torch.Tensor | None = None,
    distribution: type = Categorical,
) -> VTraceFromLogitsReturns:
    """V-trace targets from behaviour (mu) and target (pi) logits.

    Args:
        behaviour_policy_logits: float32 [T, B, P], mu's params stored by the actor.
        target_policy_logits: float32 [T, B, P], pi's params from the learner.
        actions: int64 [T, B] (float32 [T, B, A] for a Gaussian), taken by mu.
        discounts, rewards, values, bootstrap_value, clip_*, mask: as in
            `from_importance_weights`.
        distribution: the class of agents/distributions.py the params are of.
    Returns:
        VTraceFromLogitsReturns: vs, pg_advantages, log_rhos (all [T, B]) and the
        behaviour and target log-probabilities of the taken actions ([T, B]).
        `target_action_log_probs` keeps its gradient; the rest carry none.
    """
    target_action_log_probs = action_log_probs(target_policy_logits, actions, distribution)
    behaviour_action_log_probs = action_log_probs(behaviour_policy_logits, actions,
                                                  distribution)
    log_rhos = (target_action_log_probs - behaviour_action_log_probs).detach()
    vtrace_returns = from_importance_weights(
        log_rhos=log_rhos,
        discounts=discounts,
        rewards=rewards,
        values=values,
        bootstrap_value=bootstrap_value,
        clip_rho_threshold=clip_rho_threshold,
        clip_pg_rho_threshold=clip_pg_rho_threshold,
        clip_c_threshold=clip_c_threshold,
        mask=mask,
    )
    return VTraceFromLogitsReturns(
        log_rhos=log_rhos,
        behaviour_action_log_probs=behaviour_action_log_probs,
        target_action_log_probs=target_action_log_probs,
        **vtrace_returns._asdict(),
    )
