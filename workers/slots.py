"""A fixed pool of rollout slots in shared memory.

Everything is allocated once, at start-up, from one spec dict. Each buffer is
time-major with the slot as the batch dimension, `[T+1, num_slots, ...]`, so a
batch is one `index_select` along dim 1. Only slot indices travel between
processes (see `workers/pool.py`): the learner grants free slots to an actor,
the actor writes T+1 rows into each and sends the indices back; the learner side
returns a slot to the free list (`release`) once it has copied what it keeps. A
slot is written only by the actor it was granted to, so no slot changes while
the learner holds it.

Row convention (the same for every field): row t describes observation x_t.
    obs             [T+1, S, *obs_shape] uint8 (pixels) / float32   x_t
    action          [T+1, S] int64     a_t ~ mu(.|x_t), taken at x_t (Discrete);
                    [T+1, S, A] float32 for a Box: as sampled, before the env's clip
    logits          [T+1, S, P] float32 behaviour distribution's params at x_t
                                       (agents/distributions.py: P = A logits, or
                                       A means then A log-stds)
    value           [T+1, S] float32   behaviour critic V_mu(x_t)
    reward          [T+1, S] float32   unclipped reward of the transition into x_t
    done            [T+1, S] bool      that transition terminated: x_t starts a new
                                       trajectory (a reset obs, or the obs after a
                                       lost life with episodic_life)
    truncated       [T+1, S] bool      that transition was cut by a time limit
    bootstrap_value [T+1, S] float32   V_mu(final obs) where truncated, else 0
    version         [T+1, S] int64     policy version that chose a_t
    features        [T+1, S, H] float16 behaviour policy's last hidden layer at x_t
                                       (`forward_with_hidden`); only with
                                       `feature_size=H > 0`, for replays whose
                                       features are "hidden"; float16 halves its
                                       memory (2H bytes per step)
    core_state      [T+1, S, k, ...] float32 the model state that read x_t (zeroed
                                       where x_t starts a trajectory; packed by
                                       `agents.networks.pack_state`); only for a
                                       model with state (--use_lstm: k = 2, (h, c))
    final_obs       [T+1, S, *obs_shape] the last observation of the episode that the
                                       transition into x_t truncated (valid where
                                       truncated; elsewhere x_t); only with
                                       `final_obs` (off-policy agents bootstrap from it)
Row 0 repeats row T of the same env's previous rollout.
"""

from __future__ import annotations

import collections
import math

import torch

from agents.distributions import DISTRIBUTIONS

_DTYPES = {"uint8": torch.uint8, "float32": torch.float32}


def rollout_spec(
    unroll_length: int, obs_shape: tuple[int, ...], obs_dtype: str, num_actions: int,
    feature_size: int = 0, state_shape: tuple[int, ...] = (), action_kind: str = "discrete",
    final_obs: bool = False,
) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
    """Per-slot shape (time-major, T+1 rows) and dtype of every field, for
    `num_actions` actions of `action_kind` (`agents.distributions.DISTRIBUTIONS`); with
    `feature_size` H > 0 also "features" ((T+1, H), float16); with a model state
    (`state_shape`, `agents.model_spec.ModelSpec.state_shape`) also "core_state"
    ((T+1, *state_shape), float32); with `final_obs` also "final_obs" (obs' shape and
    dtype)."""
    t1 = unroll_length + 1
    dist = DISTRIBUTIONS[action_kind]
    spec = {
        "obs": ((t1, *obs_shape), _DTYPES[obs_dtype]),
        "action": ((t1, *dist.action_shape(num_actions)), dist.action_dtype),
        "logits": ((t1, dist.param_size(num_actions)), torch.float32),
        "value": ((t1,), torch.float32),
        "reward": ((t1,), torch.float32),
        "done": ((t1,), torch.bool),
        "truncated": ((t1,), torch.bool),
        "bootstrap_value": ((t1,), torch.float32),
        "version": ((t1,), torch.int64),
    }
    if feature_size > 0:
        spec["features"] = ((t1, feature_size), torch.float16)
    if state_shape:
        spec["core_state"] = ((t1, *state_shape), torch.float32)
    if final_obs:
        spec["final_obs"] = spec["obs"]
    return spec


def spec_bytes(spec) -> int:
    """Bytes of one slot of `spec`."""
    return sum(math.prod(shape) * torch.empty(0, dtype=dtype).element_size()
               for shape, dtype in spec.values())


class SlotPool:
    """Shared buffers `[T+1, num_slots, ...]` and the learner's free list.

    `buffers` pickle to spawned children as shared-memory handles; the free list
    lives in the learner process only (thread-safe deque).
    """

    def __init__(self, spec, num_slots: int):
        self.num_slots = num_slots
        self.buffers = {
            name: torch.zeros((shape[0], num_slots, *shape[1:]), dtype=dtype).share_memory_()
            for name, (shape, dtype) in spec.items()
        }
        self.free: collections.deque[int] = collections.deque(range(num_slots))

    def gather(self, indices: torch.Tensor) -> dict[str, torch.Tensor]:
        """Copy of the rollouts in `indices` (int64 [B]) as a batch `[T+1, B, ...]`."""
        return {name: buf.index_select(1, indices) for name, buf in self.buffers.items()}

    def release(self, indices) -> None:
        """Slots the learner side no longer needs: free for actors again."""
        self.free.extend(int(i) for i in indices)

    def take(self, n: int) -> list[int]:
        """Up to `n` free slots."""
        return [self.free.popleft() for _ in range(min(n, len(self.free)))]
