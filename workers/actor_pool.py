"""The actor-pool contract the driver (training/driver.py) sees, whatever runs the
actors: local processes (workers/pool.py), the serial mode (workers/serial_pool.py)
or Ray actors (workers/ray_pool.py).

    pool.start()             start the actors
    pool.grant()             hand out free rollout slots (where slots are granted ahead)
    pool.poll(timeout)       the rollouts finished within `timeout` s: FinishedRollout
    pool.check()             replace dead actors (ActorFailure past --max_actor_restarts)
    pool.close(timeout)      stop and join; the rollouts finished meanwhile
    pool.take_actor_seconds(), pool.stats(), pool.pids(), pool.restarts: reporting

`ActorPoolBase` holds what every pool keeps the same way: the deaths counted
(`restarts`) and the actors' time split, summed until it is taken.
"""

from __future__ import annotations

from typing import NamedTuple


class ActorFailure(RuntimeError):
    """More actor deaths than --max_actor_restarts: the run stops."""


class FinishedRollout(NamedTuple):
    """A rollout an actor finished, as the pool hands it to the driver.

    Attributes:
        indices: slot indices into the SlotPool (ints, one per env of the actor);
            rows 0..T of each (every field, `[T+1, ...]` per slot) are written, and
            the slots now belong to the receiver, who must release them.
        episodes: (return float, length int) of each episode that ended during it.
        policy_id: the policy that acted it, whose learner it goes to (0: the one
            policy of today's runs).
    """

    indices: tuple[int, ...]
    episodes: list[tuple[float, int]]
    policy_id: int = 0


SEED_SPACE = 2**31 - 2**20
"""Actor seeds lie in [0, SEED_SPACE): ALE takes a seed below 2**31 (and MinAtar's
NumPy one below 2**32), and an actor's envs take seed + k, k < 2**20."""


def actor_seed(seed: int, actor_id: int, incarnation: int, resumes: int) -> int:
    """The seed of an actor's envs and action sampling: different for every actor, each
    of its restarts (incarnation) and each resume of the run, so no random stream is
    replayed (distinct while actor_id < 99, incarnation < 999 and resumes < 20; its
    envs take seed + k), and inside `SEED_SPACE` however often the run is resumed."""
    return (seed + 10_007 * actor_id + 1_000_003 * incarnation
            + 1_000_000_007 * resumes) % SEED_SPACE


def per_policy(x) -> list:
    """A per-policy argument (an `ActorConfig`, weights, a model, a version) as a list:
    one policy's as a list of one."""
    return list(x) if isinstance(x, (list, tuple)) else [x]


class ActorPoolBase:
    """The contract (see the module docstring) and the bookkeeping every pool shares."""

    def __init__(self, log):
        self.log = log
        self.restarts = 0  # actor deaths survived so far
        self._actor_seconds: dict[str, float] = {}  # summed since take_actor_seconds()

    def start(self) -> None:
        raise NotImplementedError

    def grant(self) -> None:
        """Nothing to hand out ahead (a pool that grants slots overrides it)."""

    def poll(self, timeout: float) -> list[FinishedRollout]:
        raise NotImplementedError

    def check(self) -> None:
        """No actors to watch (a pool of processes overrides it)."""

    def close(self, timeout: float = 10.0) -> list[FinishedRollout]:
        raise NotImplementedError

    def count_seconds(self, seconds: dict[str, float]) -> None:
        """Add an actor's time split ({"env": s, "inference": s, "wait": s})."""
        for k, v in seconds.items():
            self._actor_seconds[k] = self._actor_seconds.get(k, 0.0) + v

    def take_actor_seconds(self) -> dict[str, float]:
        """Seconds the actors spent per category since the previous call, summed over
        actors."""
        out, self._actor_seconds = self._actor_seconds, {}
        return out

    def stats(self) -> dict[str, float]:
        """Backend scalars for TensorBoard (none unless the pool has some)."""
        return {}

    def pids(self) -> list[int | None]:
        """The actor processes' pids, by actor id (none where the actors have no
        process of their own on this machine)."""
        return []
