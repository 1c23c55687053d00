"""What an actor sends the learner on its `messages` pipe: one NamedTuple per kind.

The actor (workers/actor.py) sends a `RolloutDone` after each rollout and, if it
fails, one `ActorError` before it exits; the pool (workers/pool.py) dispatches on
the message's class. Both are pickled by reference, so the two sides must import
this same module. The slot data itself never travels on the pipe: it is in the
SlotPool's shared buffers, and a message only names the slots.
"""

from __future__ import annotations

from typing import NamedTuple


class RolloutDone(NamedTuple):
    """One finished rollout of an actor's E = `envs_per_worker` envs.

    Attributes:
        indices: E slot indices into the SlotPool (ints in [0, num_slots)), one per
            env, in env order; rows 0..T of each of these slots (every field,
            `[T+1, ...]` per slot) were written before the message was sent.
        episodes: (return float, length int) of every episode that ended during this
            rollout, over all E envs: the undiscounted sum of rewards and the number
            of env steps (agent decisions).
        seconds: {"env": s, "inference": s, "wait": s}, float seconds the actor spent
            since its previous message stepping envs, in forward passes and waiting
            for slots.
        policy_id: the policy that acted (`ActorConfig.policy_id`).
    """

    indices: tuple[int, ...]
    episodes: list[tuple[float, int]]
    seconds: dict[str, float]
    policy_id: int = 0


class ActorError(NamedTuple):
    """An exception ended the actor; it sends nothing after this.

    Attributes:
        traceback: the formatted traceback (str, `traceback.format_exc()`).
    """

    traceback: str
