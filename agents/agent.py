"""The agent contract: networks, named optimizers and target networks, the model
the actors act with, declared statistics, and a gradient pipeline. The learner
knows no algorithm; an algorithm is a subclass in a file of its own, registered in
`agents/registry.py`.

`Agent.update(batch, progress)` moves the batch to the device, sets each
optimizer's learning rate from its own schedule and calls the algorithm's
`train`, which takes one or more optimizer steps through `Agent.step`:

    zero_grad -> backward -> reduce (the group's sum: `group.reduce_gradients`,
    nothing for a lone learner) -> clip the global gradient norm -> apply

(RLlib's compute / postprocess / apply gradients). `train` returns statistics whose
names `stat_names()` declares; learner.csv, TensorBoard and the status line take
their columns from it, and an undeclared one is an error, never silently dropped.

An agent may hold several optimizers (`add_optimizer`, by name: "main" is the
model's) and target networks (`add_target`, frozen copies it refreshes itself).
Data-parallel learners (agents/group.py): each rank's agent holds a `group`; its
losses are its share of the group's loss (means through `group.mean`, batch
normalisations through the group), so summing the ranks' gradients in `step` gives
every rank the gradient of one learner on the group's batch.
`acting_model` is what is published to the actors and the evaluator: the policy
(today the whole actor-critic; for SAC-like agents the actor alone).

Batch: dict of tensors `[T+1, B, ...]` (see `workers/slots.py`): obs (uint8 or
float32), action int64 (float32 [.., A] for Box actions), logits float32 [.., P] (the
behaviour distribution's params), value / reward / bootstrap_value
float32, done / truncated bool, core_state float32 (models with state), final_obs
(off-policy agents: the episode's last observation where truncated), and from
the mixer `replayed` bool [B]; any other
field (the replays' "features", "version") is left on the CPU, unread.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
from collections.abc import Iterable

import torch
from torch import nn
from torch.nn.utils import parameters_to_vector

from agents.group import ALONE, Group
from agents.normalize import RunningMeanStd, input_moments, update_inputs

# fields the losses read; the rest of a batch stays where it is
LOSS_FIELDS = ("obs", "action", "logits", "value", "reward", "done", "truncated",
               "bootstrap_value", "core_state", "final_obs", "replayed")

# what `update` adds to every algorithm's statistics
UPDATE_STATS = ("lr", "step_over_lr")


@dataclasses.dataclass(frozen=True)
class OptimConfig:
    optimizer: str = "rmsprop"  # or "adam"
    lr: float = 6e-4
    lr_end_value: float = 0.0
    lr_decay_power: float = 1.0  # 1: linear decay over the run
    rmsprop_eps: float = 1e-5
    rmsprop_alpha: float = 0.99
    adam_eps: float = 1e-8
    max_grad_norm: float = 0.0  # global gradient-norm clip; 0: off

    @classmethod
    def of(cls, cfg) -> OptimConfig:
        """From a run's flags (`training.config.Config`, or anything with its names)."""
        return cls(optimizer=cfg.optimizer, lr=cfg.lr, lr_end_value=cfg.lr_end_value,
                   lr_decay_power=cfg.lr_decay_power, rmsprop_eps=cfg.rmsprop_eps,
                   rmsprop_alpha=cfg.rmsprop_alpha, adam_eps=cfg.adam_eps,
                   max_grad_norm=cfg.gradient_clip_by_norm_threshold)

    def lr_at(self, progress: float) -> float:
        """The learning rate at `progress` (0 to 1) of the run."""
        return polynomial_lr(self.lr, self.lr_end_value, progress, self.lr_decay_power)


def build_optimizer(
    params, name: str, lr: float, rmsprop_eps: float, rmsprop_alpha: float = 0.99,
    adam_eps: float = 1e-8,
) -> torch.optim.Optimizer:
    """RMSProp (IMPALA's choice) or Adam, which runs its fused kernel: one op a step
    for all the parameters, the same update as torch's loop over them up to float
    rounding (tests/test_optimizers.py), and faster (docs/results.md)."""
    _uncompiled_methods()
    if name == "rmsprop":
        return torch.optim.RMSprop(params, lr=lr, alpha=rmsprop_alpha, eps=rmsprop_eps)
    if name == "adam":
        return torch.optim.Adam(params, lr=lr, eps=adam_eps, fused=True)
    raise ValueError(f"unknown optimizer {name!r}")


# torch.compile's hooks in torch's optimizers import torch._dynamo on first use: 1.5 s of
# CPU in every learner process (a third of a short run's start; docs/design-notes.md).
# No learner here is compiled, so they are taken out: `_uncompiled_methods` and
# `apply_step` (tests/test_optimizers.py: the same steps, and no torch._dynamo).
DYNAMO_DISABLED = ("add_param_group", "zero_grad", "state_dict", "load_state_dict")


def _uncompiled_methods() -> None:
    """Give `Optimizer`'s methods that torch wraps in `torch._disable_dynamo` the cache
    that wrapper fills on its first call (the function that excludes the method from
    compilation, which needs torch._dynamo): the method itself."""
    for name in DYNAMO_DISABLED:
        method = inspect.unwrap(getattr(torch.optim.Optimizer, name))
        if getattr(method, "__dynamo_disable", None) is None:
            setattr(method, "__dynamo_disable", method)


def apply_step(optimizer: torch.optim.Optimizer) -> None:
    """`optimizer.step()` without its wrappers: the graph breaks for torch.compile
    around it (each imports torch._dynamo) and the step hooks, which nothing here
    registers. Under no_grad, as the wrapper runs a non-differentiable optimizer."""
    with torch.no_grad():
        inspect.unwrap(type(optimizer).step)(optimizer)


# how an optimizer computes its step, not what it has learned: a checkpoint's say
# (Adam's per-parameter loop before the fused kernel) gives way to the optimizer's own
KERNEL_SETTINGS = ("fused", "foreach")


def own_kernel(optimizer: torch.optim.Optimizer, saved: dict) -> dict:
    """Optimizer state `saved` with `optimizer`'s kernel settings in place of its
    own, for `optimizer.load_state_dict` (which would otherwise take the saved ones,
    and moves Adam's step counts where a fused kernel needs them)."""
    groups = [{**group, **{k: own[k] for k in KERNEL_SETTINGS if k in own}}
              for group, own in zip(saved["param_groups"], optimizer.param_groups,
                                    strict=False)]  # a count that differs: torch says so
    groups += saved["param_groups"][len(groups):]
    return {**saved, "param_groups": groups}


def polynomial_lr(lr: float, lr_end: float, progress: float, power: float = 1.0) -> float:
    """Polynomial decay from `lr` to `lr_end` as progress goes from 0 to 1."""
    progress = min(max(progress, 0.0), 1.0)
    return (lr - lr_end) * (1.0 - progress) ** power + lr_end


def host_stats(stats: dict[str, torch.Tensor | float]) -> dict[str, float]:
    """`stats` as Python floats, its 0-d tensors read back from the device in one copy.
    An update's statistics stay on the device until then: each `.item()` would make the
    host wait for the device, and a GPU then idles while the host queues the next
    minibatch's kernels (ppo's 16 minibatch steps of Pong's defaults read 7 figures
    each)."""
    keys = [k for k, v in stats.items() if isinstance(v, torch.Tensor)]
    values = torch.stack([stats[k].detach().float() for k in keys]).tolist() if keys else []
    read = dict(zip(keys, values, strict=True))
    return {k: read[k] if k in read else float(v) for k, v in stats.items()}


def _params(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    return [p for group in optimizer.param_groups for p in group["params"]]


class Agent:
    """A model on `device`, its named optimizers ("main": the model's, with `optim`)
    and target networks. Subclasses give `train` (one or more optimizer steps on a
    batch, each through `step`) and `stat_names` (the statistics `train` returns)."""

    # the status line's losses: (label, statistic, format)
    STATUS: tuple[tuple[str, str, str], ...] = (
        ("pg", "policy_loss", "+.3f"), ("v", "value_loss", ".3f"), ("ent", "entropy", ".3f"))
    # the keys of `state_dict` that hold random streams (minibatch orders, sampled rows,
    # noise): a copy of another agent's state keeps its own (training/pbt.py's exploit)
    RANDOM_STATE: tuple[str, ...] = ()

    def __init__(self, model: nn.Module, optim: OptimConfig, device: torch.device,
                 main_params: Iterable[torch.Tensor] | None = None):
        """The "main" optimizer takes `main_params` (default: all of `model`'s)."""
        self.model = model.to(device)
        self.device = device
        self.optimizers: dict[str, torch.optim.Optimizer] = {}
        self.schedules: dict[str, OptimConfig] = {}
        self.target_networks: dict[str, nn.Module] = {}
        self.group: Group = ALONE  # the learners this one trains with (a lone one by default)
        self._observed: RunningMeanStd | None = None  # a rank's inputs since the last update
        # --precision (agents/precision.py): the dtype `train` runs under autocast in
        # (None: float32), and the sentence saying why
        self.autocast: torch.dtype | None = None
        self.precision_reason = "precision fp32"
        self.add_optimizer("main", self.model.parameters() if main_params is None
                           else main_params, optim)

    # --- declarations ----------------------------------------------------------------
    def add_optimizer(self, name: str, params: Iterable[torch.Tensor], optim: OptimConfig
                      ) -> torch.optim.Optimizer:
        """An optimizer of `params` with its own learning-rate schedule and clip."""
        self.optimizers[name] = build_optimizer(params, optim.optimizer, optim.lr,
                                                optim.rmsprop_eps, optim.rmsprop_alpha,
                                                optim.adam_eps)
        self.schedules[name] = optim
        return self.optimizers[name]

    def add_target(self, name: str, source: nn.Module) -> nn.Module:
        """A frozen copy of `source`, saved and restored with the agent."""
        self.target_networks[name] = copy.deepcopy(source).requires_grad_(False)
        return self.target_networks[name]

    @property
    def acting_model(self) -> nn.Module:
        """What the actors and the evaluator act with (published as weights)."""
        return self.model

    def stat_names(self) -> tuple[str, ...]:
        """The names of the statistics `update` returns (`train`'s and UPDATE_STATS)."""
        raise NotImplementedError

    # --- training ----------------------------------------------------------------------
    def train(self, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        """The algorithm's optimizer steps on a batch on `device`; its statistics."""
        raise NotImplementedError

    def step(self, loss: torch.Tensor, name: str = "main") -> torch.Tensor:
        """The gradient pipeline of optimizer `name`: back-propagate `loss`, reduce the
        gradients over the group (`group.reduce_gradients`), clip their global norm,
        apply; returns the norm before clipping, a float32 0-d tensor on the device
        (read back with the update's other statistics: `host_stats`)."""
        optimizer = self.optimizers[name]
        params = _params(optimizer)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.group.reduce_gradients(params)
        clip = self.schedules[name].max_grad_norm
        norm = nn.utils.clip_grad_norm_(params, clip) if clip > 0 else \
            nn.utils.get_total_norm([p.grad for p in params if p.grad is not None])
        apply_step(optimizer)
        return norm.detach()

    @property
    def normalizes_inputs(self) -> bool:
        """Whether the model keeps input statistics (`observe` folds into them)."""
        return getattr(self.model, "obs_norm", None) is not None

    def observe(self, obs: torch.Tensor) -> None:
        """Fold fresh observations [T, n, *obs_shape] (uint8 or float32, any device:
        rows 0..T-1 of rollouts as they arrive, each once, never a replayed one) into
        the model's input statistics, if it normalises inputs. A rank of a group
        keeps their moments until the next update merges every rank's."""
        obs = obs.to(self.device, non_blocking=True)
        if self.group.size == 1:
            update_inputs(self.model, obs)
            return
        if self._observed is None:
            self._observed = RunningMeanStd(tuple(self.model.obs_norm.mean.shape)).to(self.device)
        self._observed.merge(input_moments(self.model, obs))

    def _merge_observed(self) -> None:
        """Fold every rank's observations since the last update into the input
        statistics, in rank order (a collective: every rank calls it)."""
        norm = self.model.obs_norm
        mine = self._observed.moments() if self._observed is not None else \
            (0, torch.zeros_like(norm.mean), torch.zeros_like(norm.var))
        for moments in self.group.gather_moments(mine):
            norm.merge(moments)
        self._observed = None

    def update(self, batch: dict[str, torch.Tensor], progress: float) -> dict[str, float]:
        """Train on `batch` (CPU or device tensors `[T+1, B, ...]`) at `progress` (0 to
        1) of the learning-rate schedules. Statistics: the algorithm's, plus lr (the
        main optimizer's) and step_over_lr, the RMS change of the main optimizer's
        parameters (the model's; an off-policy agent's actor's) in the whole update,
        over lr: about 1 per normalised RMSProp/Adam step, far below 1 where eps
        dominates the denominator. `train` runs under autocast in `self.autocast` if
        set (--precision=bf16)."""
        batch = {k: batch[k].to(self.device, non_blocking=True)
                 for k in LOSS_FIELDS if k in batch}
        if self.group.size > 1 and self.normalizes_inputs:
            self._merge_observed()
        for name, optimizer in self.optimizers.items():
            for group in optimizer.param_groups:
                group["lr"] = self.schedules[name].lr_at(progress)
        lr = self.schedules["main"].lr_at(progress)
        main = _params(self.optimizers["main"])
        before = parameters_to_vector(main).detach().clone()
        with torch.autocast(self.device.type, dtype=self.autocast or torch.bfloat16,
                            enabled=self.autocast is not None):
            stats = self.train(batch)
        change = parameters_to_vector(main).detach() - before
        stats = host_stats({**stats, "step_rms": change.pow(2).mean().sqrt()})
        step_rms = stats.pop("step_rms")
        stats.update(lr=lr, step_over_lr=step_rms / lr if lr > 0 else 0.0)
        return stats

    # --- checkpoints -------------------------------------------------------------------
    def state_dict(self) -> dict:
        """{"model", "optimizers": {name: state}, "targets": {name: state}}."""
        return {"model": self.model.state_dict(),
                "optimizers": {k: o.state_dict() for k, o in self.optimizers.items()},
                "targets": {k: t.state_dict() for k, t in self.target_networks.items()}}

    def load_state_dict(self, state: dict) -> None:
        """`state_dict`'s; a checkpoint of format 1 (one "optimizer") is converted
        by `training.checkpoint.upgrade` before it gets here."""
        self.model.load_state_dict(state["model"])
        for name, optimizer in self.optimizers.items():
            # a copy: torch's loader keeps the given moment tensors where their dtype
            # and device fit, so another agent's state (pbt's exploit) would be shared
            saved = copy.deepcopy(state["optimizers"][name])
            optimizer.load_state_dict(own_kernel(optimizer, saved))
        for name, target in self.target_networks.items():
            target.load_state_dict(state["targets"][name])
