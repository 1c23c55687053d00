"""Weight broadcast from the learner to the actors through shared memory.

The learner copies its parameters into one flat float32 tensor in shared memory
and bumps a version counter; an actor that sees a newer version copies them back
into its CPU model. No pickling, one lock held only for the copy.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.utils import parameters_to_vector, vector_to_parameters


class SharedWeights:
    def __init__(self, model: nn.Module, ctx):
        self.flat = parameters_to_vector(model.parameters()).detach().cpu().clone().share_memory_()
        self.version = torch.zeros(1, dtype=torch.int64).share_memory_()
        self.lock = ctx.Lock()

    def publish(self, model: nn.Module, version: int) -> None:
        vec = parameters_to_vector(model.parameters()).detach()
        with self.lock:
            self.flat.copy_(vec)
            self.version[0] = version

    def pull(self, model: nn.Module, have_version: int) -> int:
        """Load the published weights into `model` if newer; the version now held."""
        if int(self.version[0]) <= have_version:
            return have_version
        with self.lock:
            with torch.no_grad():
                vector_to_parameters(self.flat, model.parameters())
            return int(self.version[0])
