"""The agent interface: a model, its optimizer and the training step the learner
and the benchmarks all take; the learner knows no algorithm.

`Agent.update(batch, progress)` moves the batch to the device, sets the learning
rate of the schedule and calls the algorithm's `train`, which takes one or more
optimizer steps through `Agent.step` (back-propagate, clip the global gradient
norm, step) and returns statistics. An algorithm is a subclass in a file of its
own: `agents/impala.py` (`--agent=impala`), `agents/ppo.py` (`ppo`, `truly_ppo`).

Batch: dict of tensors `[T+1, B, ...]` (see `workers/slots.py`): obs (uint8 or
float32), action int64 (float32 [.., A] for Box actions), logits float32 [.., P] (the
behaviour distribution's params), value / reward / bootstrap_value
float32, done / truncated bool, core_state float32 (models with state), and from
the mixer `replayed` bool [B]; any other
field (the replays' "features", "version") is left on the CPU, unread.
"""

from __future__ import annotations

import dataclasses
import math

import torch
from torch import nn
from torch.nn.utils import parameters_to_vector

from agents.normalize import update_inputs

# fields the losses read; the rest of a batch stays where it is
LOSS_FIELDS = ("obs", "action", "logits", "value", "reward", "done", "truncated",
               "bootstrap_value", "core_state", "replayed")


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


def build_optimizer(
    params, name: str, lr: float, rmsprop_eps: float, rmsprop_alpha: float = 0.99,
    adam_eps: float = 1e-8,
) -> torch.optim.Optimizer:
    """RMSProp (IMPALA's choice) or Adam."""
    if name == "rmsprop":
        return torch.optim.RMSprop(params, lr=lr, alpha=rmsprop_alpha, eps=rmsprop_eps)
    if name == "adam":
        return torch.optim.Adam(params, lr=lr, eps=adam_eps)
    raise ValueError(f"unknown optimizer {name!r}")


def polynomial_lr(lr: float, lr_end: float, progress: float, power: float = 1.0) -> float:
    """Polynomial decay from `lr` to `lr_end` as progress goes from 0 to 1."""
    progress = min(max(progress, 0.0), 1.0)
    return (lr - lr_end) * (1.0 - progress) ** power + lr_end


class Agent:
    """A model on `device` and its optimizer. Subclasses give `train`: one or more
    optimizer steps on a batch, each through `step`."""

    def __init__(self, model: nn.Module, optim: OptimConfig, device: torch.device):
        self.model = model.to(device)
        self.optim = optim
        self.device = device
        self.optimizer = build_optimizer(self.model.parameters(), optim.optimizer, optim.lr,
                                         optim.rmsprop_eps, optim.rmsprop_alpha, optim.adam_eps)

    def train(self, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        """The algorithm's optimizer steps on a batch on `device`; its statistics."""
        raise NotImplementedError

    def step(self, loss: torch.Tensor) -> float:
        """Back-propagate `loss`, clip the global gradient norm, step the optimizer;
        returns the norm before clipping."""
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        norm = nn.utils.clip_grad_norm_(self.model.parameters(),
                                        self.optim.max_grad_norm or math.inf)
        self.optimizer.step()
        return float(norm)

    def update(self, batch: dict[str, torch.Tensor], progress: float) -> dict[str, float]:
        """Train on `batch` (CPU or device tensors `[T+1, B, ...]`) at `progress` (0 to
        1) of the learning-rate schedule, after folding its observations (rows
        0..T-1) into the model's input statistics, if it normalises inputs.
        Statistics: the algorithm's, plus lr and step_over_lr, the RMS of the
        parameter change of the whole update over lr:
        about 1 per normalised RMSProp/Adam step, far below 1 where eps dominates the
        denominator."""
        o = self.optim
        batch = {k: batch[k].to(self.device, non_blocking=True)
                 for k in LOSS_FIELDS if k in batch}
        lr = polynomial_lr(o.lr, o.lr_end_value, progress, o.lr_decay_power)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        update_inputs(self.model, batch["obs"][:-1])
        before = parameters_to_vector(self.model.parameters()).detach().clone()
        stats = self.train(batch)
        change = parameters_to_vector(self.model.parameters()).detach() - before
        step_over_lr = float(change.pow(2).mean().sqrt()) / lr if lr > 0 else 0.0
        stats.update(lr=lr, step_over_lr=step_over_lr)
        return stats

    def state_dict(self) -> dict:
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
