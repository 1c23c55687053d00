"""What the off-policy actor-critics for Box actions (SAC: agents/sac.py; TD3 and
DDPG: agents/td3.py) share: their networks, the transitions they learn from, and
the agent's skeleton.

Networks (CleanRL's `sac_continuous_action.py` / `td3_continuous_action.py`):
  * `PolicyMLP`, the actor the actors and the evaluator act with (`acting_model`):
    obs float32 [N, D] -> two `hidden_size` ReLU layers -> the distribution's params
    (agents/distributions.py: "tanh_gaussian" 2A outputs, "deterministic" A outputs
    next to the buffer `log_noise` [A]); buffers `action_scale`, `action_bias` [A]
    from the env's bounds. It keeps the model interface of agents/networks.py (the
    value it returns is zeros: the critics are the agent's).
  * `QEnsemble`, n critics Q_k(s, a) fused into one batched MLP (weights [n, in,
    out], one `baddbmm` per layer): SAC's and TD3's twins cost one pass, not two.
  * `ActorQ`, the agent's model: `actor`, `critic` and, for SAC, `log_alpha`.

Transitions: a batch of rollouts [T+1, B] (the replays' unit, workers/slots.py)
gives one transition per column, at a row t drawn uniformly from 0..T-1, so a batch
of B rollouts drawn uniformly from a replay is B transitions drawn uniformly from
it. Its n-step return stops at the episode's end or the rollout's last row:
    R = sum_{k=1..m} gamma^(k-1) r_{t+k},  bootstrap gamma^m Q(s_{t+m}, .)
with m <= n; a termination within gives no bootstrap (discount 0), a truncation
bootstraps from the episode's final observation (the slots' "final_obs").
"""

from __future__ import annotations

import dataclasses
import functools
import math

import torch
from torch import nn

from agents.agent import Agent, OptimConfig
from agents.distributions import DISTRIBUTIONS
from agents.networks import ActorCritic


class PolicyMLP(ActorCritic):
    """The actor (module docstring), built from an agents.model_spec.ModelSpec whose
    action_kind is "tanh_gaussian" or "deterministic"."""

    def __init__(self, spec):
        super().__init__()
        self._normalizers(spec.obs_shape, False, False)
        n_in, h, a = int(math.prod(spec.obs_shape)), spec.hidden_size, spec.num_actions
        self.hidden_size = self.feature_size = h
        self.core = None
        self.kind = DISTRIBUTIONS[spec.action_kind]
        self.torso = nn.Sequential(nn.Flatten(), nn.Linear(n_in, h), nn.ReLU(),
                                   nn.Linear(h, h), nn.ReLU())
        deterministic = spec.action_kind == "deterministic"
        self.policy = nn.Linear(h, a if deterministic else 2 * a)
        self.register_buffer("log_noise", torch.zeros(a) if deterministic else None)
        low = torch.tensor(spec.action_low, dtype=torch.float32)
        high = torch.tensor(spec.action_high, dtype=torch.float32)
        self.register_buffer("action_scale", (high - low) / 2)
        self.register_buffer("action_bias", (high + low) / 2)

    @property
    def distribution(self):
        """The distribution class bound to this env's bounds: `distribution(params)`."""
        return functools.partial(self.kind, scale=self.action_scale, bias=self.action_bias)

    def _policy_params(self, h: torch.Tensor) -> torch.Tensor:
        """The params [N, P] from the torso's output h [N, H]."""
        out = self.policy(h)
        return out if self.log_noise is None else \
            torch.cat([out, self.log_noise.expand_as(out)], -1)

    def params(self, x: torch.Tensor) -> torch.Tensor:
        """obs float32 [N, D] -> the distribution's params [N, P]."""
        return self._policy_params(self.torso(x))

    def forward_with_hidden(self, obs, state, done, prepared=False):
        """The model interface: (params [T, B, P], zeros [T, B], hidden [T, B, H],
        state); obs [T, B, D]."""
        t, b = obs.shape[:2]
        h = self.torso(obs.reshape(t * b, *obs.shape[2:]).float())
        out = self._policy_params(h)
        return (out.view(t, b, out.shape[-1]), torch.zeros(t, b, device=h.device),
                h.view(t, b, h.shape[-1]), state)


class QEnsemble(nn.Module):
    """n critics Q_k(s, a), each two `hidden` ReLU layers and a linear output, as one
    batched MLP. Each member starts as `nn.Linear`'s default initialisation would
    (CleanRL's critics)."""

    def __init__(self, n: int, obs_dim: int, action_dim: int, hidden: int):
        super().__init__()
        self.n = n
        dims = (obs_dim + action_dim, hidden, hidden, 1)
        self.weights = nn.ParameterList()
        self.biases = nn.ParameterList()
        for fan_in, fan_out in zip(dims[:-1], dims[1:], strict=True):
            layers = [nn.Linear(fan_in, fan_out) for _ in range(n)]
            self.weights.append(nn.Parameter(torch.stack([m.weight.T for m in layers])))
            self.biases.append(nn.Parameter(torch.stack([m.bias for m in layers])[:, None]))

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """obs float32 [N, D], action float32 [N, A] -> Q float32 [n, N]."""
        x = torch.cat([obs.flatten(1), action], -1).expand(self.n, -1, -1)
        last = len(self.weights) - 1
        for i, (w, b) in enumerate(zip(self.weights, self.biases, strict=True)):
            x = torch.baddbmm(b, x, w)
            if i < last:
                x = torch.relu(x)
        return x.squeeze(-1)


class ActorQ(nn.Module):
    """The agent's model: `actor` (PolicyMLP), `critic` (QEnsemble of `critics`) and,
    with `temperature`, SAC's `log_alpha` (float32 [1], log of the entropy weight)."""

    def __init__(self, spec, critics: int, temperature: bool = False):
        super().__init__()
        self.actor = PolicyMLP(spec)
        self.critic = QEnsemble(critics, int(math.prod(spec.obs_shape)), spec.num_actions,
                                spec.hidden_size)
        self.log_alpha = nn.Parameter(torch.zeros(1)) if temperature else None


def sac_model(spec) -> ActorQ:
    return ActorQ(spec, critics=2, temperature=True)


def twin_model(spec) -> ActorQ:
    return ActorQ(spec, critics=2)


def single_model(spec) -> ActorQ:
    return ActorQ(spec, critics=1)


def transitions(batch: dict[str, torch.Tensor], rows: torch.Tensor, n_step: int,
                gamma: float) -> dict[str, torch.Tensor]:
    """The transition of each column b of rollouts `batch` [T+1, B, ...] that starts at
    row rows[b] (int64 [B], in 0..T-1), with its n-step return (module docstring):
    obs [B, *obs_shape] and action [B, A] at that row, reward float32 [B] (the
    discounted sum), next_obs [B, *obs_shape] (the observation bootstrapped from) and
    discount float32 [B] (gamma^m, 0 after a termination)."""
    last = batch["reward"].shape[0] - 1
    cols = torch.arange(rows.shape[0], device=rows.device)
    ret = torch.zeros(rows.shape[0], device=rows.device)
    alive = torch.ones_like(rows, dtype=torch.bool)  # the return goes on past row t+k-1
    end = rows + 1  # the row bootstrapped from
    steps = torch.ones_like(rows)
    terminated = torch.zeros_like(alive)
    truncated = torch.zeros_like(alive)
    for k in range(1, n_step + 1):
        row = (rows + k).clamp(max=last)
        take = alive & (rows + k <= last)
        ret = ret + torch.where(take, gamma ** (k - 1) * batch["reward"][row, cols], 0.0)
        end = torch.where(take, row, end)
        steps = torch.where(take, k, steps)
        done, cut = batch["done"][row, cols], batch["truncated"][row, cols]
        terminated = terminated | (take & done)
        truncated = truncated | (take & cut & ~done)
        alive = take & ~done & ~cut
    next_obs = batch["obs"][end, cols]
    if truncated.any():
        final = batch["final_obs"][end, cols]
        next_obs = torch.where(truncated.view(-1, *(1,) * (next_obs.dim() - 1)), final, next_obs)
    discount = torch.where(terminated, 0.0, gamma ** steps.float())
    return {"obs": batch["obs"][rows, cols], "action": batch["action"][rows, cols],
            "reward": ret, "next_obs": next_obs, "discount": discount}


@torch.no_grad()
def polyak(target: nn.Module, source: nn.Module, tau: float) -> None:
    """target <- tau * source + (1 - tau) * target, parameter by parameter."""
    t, s = list(target.parameters()), list(source.parameters())
    torch._foreach_lerp_(t, s, tau)


class OffPolicyAgent(Agent):
    """An ActorQ model with optimizers "main" (the actor's, --lr) and "critic"
    (--q_lr); a target copy of the critic; the transitions of each batch. Subclasses
    give `learn(tr)` on the transitions of a batch (`transitions`' dict on the
    device). `gradient_steps` counts `train` calls (the policy delay's clock) and is
    saved with the generator that draws the rows and the noise."""

    STATUS = (("q", "critic_loss", ".3f"), ("pi", "actor_loss", "+.3f"),
              ("Q", "q_mean", ".1f"))
    RANDOM_STATE = ("generator",)

    def __init__(self, model: ActorQ, optim: OptimConfig, q_optim: OptimConfig,
                 device: torch.device, gamma: float, n_step: int, tau: float,
                 policy_frequency: int, seed: int):
        super().__init__(model, optim, device, main_params=model.actor.parameters())
        self.add_optimizer("critic", model.critic.parameters(), q_optim)
        self.target_critic = self.add_target("critic", model.critic)
        self.gamma, self.n_step, self.tau = gamma, n_step, tau
        self.policy_frequency = policy_frequency
        self.generator = torch.Generator(device=device).manual_seed(seed)
        self.gradient_steps = 0

    @classmethod
    def from_config(cls, model, cfg, device):
        """The agent of a run's flags: the settings every off-policy agent reads, and
        its own (`own_settings`)."""
        optim, q_optim = cls.optim_configs(cfg)
        return cls(model, optim, q_optim, device, gamma=cfg.gamma, n_step=cfg.n_step,
                   tau=cfg.tau, seed=cfg.seed, **cls.own_settings(cfg))

    @staticmethod
    def own_settings(cfg) -> dict:
        """The subclass's own constructor arguments from the flags."""
        raise NotImplementedError

    @staticmethod
    def optim_configs(cfg) -> tuple[OptimConfig, OptimConfig]:
        """The actor's and the critic's optimizer settings: the critic's lr is --q_lr,
        its schedule the actor's shape (constant, or decaying in the same ratio)."""
        actor = OptimConfig.of(cfg)
        end = cfg.q_lr * actor.lr_end_value / actor.lr if actor.lr > 0 else 0.0
        return actor, dataclasses.replace(actor, lr=cfg.q_lr, lr_end_value=end)

    @property
    def acting_model(self) -> nn.Module:
        return self.model.actor

    @property
    def actor(self) -> PolicyMLP:
        return self.model.actor

    def critic_loss(self, tr: dict[str, torch.Tensor], target: torch.Tensor
                    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(sum over the critics of the mean squared error to `target` [B], Q [n, B])."""
        q = self.model.critic(tr["obs"], tr["action"])
        return (q - target).pow(2).mean(1).sum(), q

    def actor_q(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """The critics' Q [n, B] of actions that carry the actor's gradient, with no
        gradient into the critics' parameters (the actor's step leaves them alone)."""
        critic = self.model.critic
        critic.requires_grad_(False)
        try:
            return critic(obs, action)
        finally:
            critic.requires_grad_(True)

    def train(self, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        t = batch["reward"].shape[0] - 1
        rows = torch.randint(0, t, (batch["reward"].shape[1],), generator=self.generator,
                             device=self.device)
        tr = transitions(batch, rows, self.n_step, self.gamma)
        stats = self.learn(tr)
        self.gradient_steps += 1
        return stats

    def learn(self, tr: dict[str, torch.Tensor]) -> dict[str, float]:
        raise NotImplementedError

    def state_dict(self) -> dict:
        return {**super().state_dict(), "gradient_steps": self.gradient_steps,
                "generator": self.generator.get_state()}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.gradient_steps = state["gradient_steps"]
        try:
            self.generator.set_state(state["generator"])
        except RuntimeError:  # saved by a generator of another device kind: this one's
            self.generator.manual_seed(self.gradient_steps)  # stream, seeded by the count
