"""PPO (`--agent=ppo`) and Truly PPO (`--agent=truly_ppo`) on the actors' rollouts.

APPO-style (Sample Factory's asynchronous PPO): the actors keep acting while the
learner takes `epochs` x `minibatches` steps on each batch `[T+1, B, ...]`.

1. Once per batch, without gradients, the current model gives V(x_t) for rows
   0..T (`values="learner"`), or GAE reads the V_mu(x_t) the actors stored with
   each step (`values="actor"`: no pass; the behaviour weights', one update or so
   old, as CleanRL's and RLlib's rollout values are). Rewards and discounts are
   IMPALA's (`transition_targets`: clipped if asked, a truncation adds gamma x the
   actor's V(final obs), a termination cuts the bootstrap).
2. Advantages and value targets, [T, B]:
   - "gae": GAE(lambda) (Schulman et al., 2016) from those values,
       delta_t = r_t + d_t V(x_{t+1}) - V(x_t),  A_t = delta_t + d_t lambda A_{t+1},
       target R_t = A_t + V(x_t), with d_t = gamma x (not done and not truncated);
   - "vtrace": V-trace (`agents/vtrace.py`) against the stored behaviour logits,
       A_t = rho_t (r_t + d_t v_{t+1} - V(x_t)), target v_t; for off-policy data
       (replays other than the queue).
3. Each epoch shuffles the B rollouts into `minibatches` groups (whole rollouts,
   so rows stay in time order; `shuffle="rollouts"`, Sample Factory's way), or
   the T x B steps (`shuffle="steps"`, CleanRL's and SB3's way, feed-forward
   models only), and takes one optimizer step per group on
       L = -mean(objective) + value_loss_weight x 0.5 mean((V - R)^2)
           - entropy_loss_weight x mean(entropy),
   advantages normalised per minibatch (mean 0, std 1). The probability ratio
   r = pi(a|x) / mu(a|x) is against the behaviour logits the actors stored.
   - ppo: objective = min(r A, clip(r, 1 - clip, 1 + clip) A) (Schulman et al.,
     2017).
   - truly_ppo (Wang, He and Tan, 2019, TR-PPO-RB): objective = r A - alpha KL
     where KL(mu || pi) >= delta and r A > A, else r A; KL over the whole action
     distribution against the stored behaviour logits. This is the authors'
     `kl_klrollback_constant_withratio` (wangyuhuix/TrulyPPO,
     baselines/ppo2_AdaClip/ppo2.py: slope_likelihood 1, slope_rollback -alpha),
     with their Atari settings (run.py: klrange 0.0008, slope_rollback -20,
     cliprange 0.1 for the value clip, on pixels) as our flags' defaults.
   With `value_clip` > 0 the value loss is max((V - R)^2, (V_clipped - R)^2), V
   clipped to within value_clip of the values of step 1 (as PPO2 does).
   With return normalisation (`model.return_norm`, Sample Factory's
   `normalize_returns`) the targets R of step 2 are folded into the running
   statistics first, and V, R and the clip are in units of their std: the loss of
   the normalised value prediction.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import nn

from agents import vtrace
from agents.agent import UPDATE_STATS, Agent, OptimConfig
from agents.group import Group
from agents.impala import explained_variance, transition_targets
from agents.networks import unroll_start
from agents.normalize import update_returns, value_scale


@dataclasses.dataclass(frozen=True)
class PPOConfig:
    gamma: float = 0.99
    gae_lambda: float = 0.95
    advantage: str = "gae"  # or "vtrace"
    clip: float = 0.1  # ppo's ratio clip
    value_clip: float = 0.0  # 0: no value clipping
    epochs: int = 4
    minibatches: int = 4
    shuffle: str = "rollouts"  # or "steps": minibatches of steps from every rollout
    values: str = "learner"  # or "actor": GAE from the stored behaviour values
    value_loss_weight: float = 0.5
    entropy_loss_weight: float = 0.01
    clip_rewards: bool = True
    reward_clipping_method: str = "abs_one_sign"
    rho_const: float = 1.0  # V-trace advantages only
    c_const: float = 1.0
    truly: bool = False  # truly_ppo's rollback objective instead of the clip
    kl_delta: float = 0.0008  # truly_ppo: the trust region's KL bound
    kl_alpha: float = 20.0  # truly_ppo: the rollback's slope


def ppo_config(cfg) -> PPOConfig:
    """The PPOConfig of a run's flags (`training.config.Config`)."""
    return PPOConfig(
        gamma=cfg.gamma, gae_lambda=cfg.gae_lambda, advantage=cfg.ppo_advantage,
        clip=cfg.ppo_clip, value_clip=cfg.ppo_value_clip, epochs=cfg.ppo_epochs,
        minibatches=cfg.ppo_minibatches, shuffle=cfg.ppo_shuffle, values=cfg.gae_values,
        value_loss_weight=cfg.value_loss_weight,
        entropy_loss_weight=cfg.entropy_loss_weight, clip_rewards=cfg.clip_rewards,
        reward_clipping_method=cfg.reward_clipping_method, rho_const=cfg.rho_const,
        c_const=cfg.c_const, truly=cfg.agent == "truly_ppo", kl_delta=cfg.truly_ppo_delta,
        kl_alpha=cfg.truly_ppo_alpha)


# what `PPOAgent.train` returns
PPO_STATS = ("policy_loss", "value_loss", "entropy", "kl", "clip_fraction", "mean_rho",
             "grad_norm", "adv_mean", "adv_std", "vs_mean", "value_mean", "explained_variance")


def gae(rewards: torch.Tensor, discounts: torch.Tensor, values: torch.Tensor,
        bootstrap: torch.Tensor, lam: float) -> torch.Tensor:
    """GAE(lambda) advantages float32 [T, B] from rewards, discounts (gamma x
    continuation), values V(x_t) [T, B] and bootstrap V(x_T) [B]."""
    next_values = torch.cat([values[1:], bootstrap.unsqueeze(0)])
    deltas = rewards + discounts * next_values - values
    adv = torch.zeros_like(values)
    acc = torch.zeros_like(bootstrap)
    for t in range(values.shape[0] - 1, -1, -1):
        acc = deltas[t] + discounts[t] * lam * acc
        adv[t] = acc
    return adv


def as_steps(batch: dict[str, torch.Tensor], *per_step: torch.Tensor
             ) -> tuple[dict[str, torch.Tensor], ...]:
    """Rollouts `batch` [T+1, B, ...] and tensors [T, B] as T x B rollouts of one
    step: `batch` [1, T*B, ...] and each tensor [1, T*B], step (t, b) at column
    t*B + b (`epochs` gives a minibatch of it the second row a rollout has, a
    repeat of row 0 the losses do not read). For a feed-forward model, whose output
    at a step depends on that step's observation alone."""
    t = per_step[0].shape[0]
    steps = {k: v[:t].reshape(1, -1, *v.shape[2:]) for k, v in batch.items() if k != "replayed"}
    return (steps, *(x.reshape(1, -1) for x in per_step))


def group_columns(cols: torch.Tensor, width: int, group: Group) -> torch.Tensor:
    """This rank's columns among `cols` int64 [c], column indices into the group's
    batch, as indices into its own batch. The group's batch is the one learner's:
    the ranks' `width` rollouts side by side (rank r's are rollouts r x width ..),
    in one row of columns, or in T rows after `as_steps` (step (t, j) at column
    t x (size x width) + j; its own at t x width + j - rank x width)."""
    wide = group.size * width
    t, j = cols // wide, cols % wide
    mine = j // width == group.rank
    return t[mine] * width + j[mine] % width


def policy_objective(log_ratio: torch.Tensor, adv: torch.Tensor, kl: torch.Tensor,
                     cfg: PPOConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """Per step: (the objective to maximise, whether the clip or the rollback is
    active there, float 0/1). All inputs and outputs share one shape."""
    ratio = log_ratio.exp()
    surrogate = ratio * adv
    if cfg.truly:
        rollback = (kl >= cfg.kl_delta) & (surrogate > adv)
        return torch.where(rollback, surrogate - cfg.kl_alpha * kl, surrogate), \
            rollback.float()
    clipped = ratio.clamp(1.0 - cfg.clip, 1.0 + cfg.clip) * adv
    return torch.minimum(surrogate, clipped), (clipped < surrogate).float()


class PPOAgent(Agent):
    """`epochs` x `minibatches` optimizer steps per batch (see the module docstring)."""

    RANDOM_STATE = ("ppo_generator",)

    def __init__(self, model: nn.Module, cfg: PPOConfig, optim: OptimConfig,
                 device: torch.device, seed: int = 0):
        super().__init__(model, optim, device)
        self.cfg = cfg
        self.generator = torch.Generator().manual_seed(seed)

    @classmethod
    def from_config(cls, model: nn.Module, cfg, device: torch.device) -> PPOAgent:
        """From a run's flags (`training.config.Config`): ppo, or truly_ppo's rollback."""
        return cls(model, ppo_config(cfg), OptimConfig.of(cfg), device, seed=cfg.seed)

    def stat_names(self) -> tuple[str, ...]:
        return PPO_STATS + UPDATE_STATS

    def state_dict(self) -> dict:
        return {**super().state_dict(), "ppo_generator": self.generator.get_state()}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        if "ppo_generator" in state:  # checkpoints from before it was saved lack it
            self.generator.set_state(state["ppo_generator"])

    @torch.no_grad()
    def targets(self, batch: dict[str, torch.Tensor], policy_logits: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """(advantages [T, B], value targets [T, B], V(x_t) [T, B], pi's params
        [T+1, B, P]) of a batch, by the current model, without gradients. pi (whose
        ratio to mu V-trace weighs by) is the current policy, or `policy_logits`
        [T+1, B, P] if given. GAE with `values="actor"` reads the batch's stored
        "value" [T+1, B] instead and runs no model: pi's params are then the
        behaviour's unless given (GAE reads none)."""
        cfg = self.cfg
        if cfg.advantage == "gae" and cfg.values == "actor":
            logits, values = batch["logits"], batch["value"]
        else:
            logits, values, _ = self.unroll(batch, *unroll_start(self.model, batch))
        if policy_logits is not None:
            logits = policy_logits
        rewards, discounts = transition_targets(batch, cfg)
        if cfg.advantage == "vtrace":
            vt = vtrace.from_logits(
                behaviour_policy_logits=batch["logits"][:-1], target_policy_logits=logits[:-1],
                actions=batch["action"][:-1], discounts=discounts, rewards=rewards,
                values=values[:-1], bootstrap_value=values[-1],
                clip_rho_threshold=cfg.rho_const, clip_pg_rho_threshold=cfg.rho_const,
                clip_c_threshold=cfg.c_const, distribution=self.model.distribution)
            return vt.pg_advantages, vt.vs, values[:-1], logits
        adv = gae(rewards, discounts, values[:-1], values[-1], cfg.gae_lambda)
        return adv, adv + values[:-1], values[:-1], logits

    def minibatch_loss(self, batch: dict[str, torch.Tensor], adv: torch.Tensor,
                       returns: torch.Tensor, old_values: torch.Tensor
                       ) -> tuple[torch.Tensor, dict[str, float]]:
        """The loss of rollouts `batch` ([T+1, b, ...]) with their advantages,
        targets and step-1 values ([T, b])."""
        cfg = self.cfg
        state, done = unroll_start(self.model, batch)
        logits, values, _ = self.unroll(batch, state, done, rows=-1)
        dist = self.model.distribution
        policy, behaviour = dist(logits), dist(batch["logits"][:-1])
        action = batch["action"][:-1]
        log_ratio = policy.log_prob(action) - behaviour.log_prob(action)
        kl = behaviour.kl(policy)  # KL(mu || pi), [T, b]
        group = self.group  # means and the advantages' moments over the group's minibatch
        adv = group.standardize(adv)
        objective, active = policy_objective(log_ratio, adv, kl, cfg)
        pg_loss = -group.mean(objective)
        scale = value_scale(self.model)
        values, returns, old_values = values / scale, returns / scale, old_values / scale
        value_err = (values - returns).pow(2)
        if cfg.value_clip > 0:
            clipped = old_values + (values - old_values).clamp(-cfg.value_clip, cfg.value_clip)
            value_err = torch.maximum(value_err, (clipped - returns).pow(2))
        value_loss = 0.5 * group.mean(value_err)
        entropy = policy.entropy()
        loss = pg_loss + cfg.value_loss_weight * value_loss \
            - cfg.entropy_loss_weight * group.mean(entropy)
        # the statistics are this rank's part's (the same as the loss's terms alone)
        # (0-d tensors on the device: `agents.agent.host_stats` reads them back once)
        return loss, {"policy_loss": -objective.detach().mean(),
                      "value_loss": 0.5 * value_err.detach().mean(),
                      "entropy": entropy.detach().mean(), "kl": kl.detach().mean(),
                      "clip_fraction": active.mean(),
                      "mean_rho": log_ratio.detach().exp().mean()}

    def with_input(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """`batch` with "input": its observations prepared for the model once for the
        whole update (`ActorCritic.prepare`: scaled and normalised), which `targets`
        and every minibatch of every epoch read instead of the raw "obs" (a model
        without `prepare` reads "obs")."""
        prepare = getattr(self.model, "prepare", None)
        return batch if prepare is None else {**batch, "input": prepare(batch["obs"])}

    def unroll(self, batch: dict[str, torch.Tensor], state, done: torch.Tensor,
               rows: int | None = None):
        """The model's (params, values, state) over the batch's rows [:rows]: its
        prepared "input" if it has one, else its "obs"."""
        if "input" in batch:
            return self.model(batch["input"][:rows], state, done[:rows], prepared=True)
        return self.model(batch["obs"][:rows], state, done[:rows])

    def train(self, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        batch = self.with_input(batch)
        adv, returns, old_values, _ = self.targets(batch)
        update_returns(self.model, returns, self.group)
        return self.epochs(batch, adv, returns, old_values)

    def epochs(self, batch: dict[str, torch.Tensor], adv: torch.Tensor, returns: torch.Tensor,
               old_values: torch.Tensor) -> dict[str, torch.Tensor]:
        """`epochs` passes of `minibatches` optimizer steps over the B rollouts of
        `batch`, whose "logits" are the ratio's denominator; the mean statistics.
        Data-parallel ranks (`self.group`) shuffle the group's columns with one
        permutation (their generators agree), each taking its own part of every
        minibatch (`group_columns`), so the group steps as one learner on the
        columns of all its ranks would; a rank's part may be empty."""
        cfg = self.cfg
        rows = adv.shape[0] if cfg.shuffle == "steps" else 1
        if cfg.shuffle == "steps":
            batch, adv, returns, old_values = as_steps(batch, adv, returns, old_values)
        b = adv.shape[1]
        total = b * self.group.size
        n = min(cfg.minibatches, total)
        totals: dict[str, torch.Tensor] = {}  # sums on the device, read back by `update`
        steps = 0
        for _ in range(cfg.epochs):
            order = torch.randperm(total, generator=self.generator)
            for cols in order.chunk(n):
                if self.group.size > 1:
                    cols = group_columns(cols, b // rows, self.group)
                cols = cols.to(adv.device)
                part = {k: v[:, cols] for k, v in batch.items()
                        if k != "replayed" and not (k == "obs" and "input" in batch)}
                if cfg.shuffle == "steps":  # row 1 (T+1 = 2): a view of row 0, not a copy
                    part = {k: v.expand(2, *v.shape[1:]) for k, v in part.items()}
                loss, stats = self.minibatch_loss(part, adv[:, cols], returns[:, cols],
                                                  old_values[:, cols])
                grad_norm = self.step(loss)
                if len(cols) == 0:  # no statistics of an empty part
                    continue
                stats["grad_norm"] = grad_norm
                for k, v in stats.items():
                    totals[k] = totals[k] + v if k in totals else v
                steps += 1
        out = {k: v / steps for k, v in totals.items()}
        out.update(adv_mean=adv.mean(), adv_std=adv.std(), vs_mean=returns.mean(),
                   value_mean=old_values.mean(),
                   explained_variance=explained_variance(old_values, returns))
        return out
