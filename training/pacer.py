"""The pacer: when a policy learner trains (between receiving rollouts and updating),
and when the actors may have new slots.

`BatchReadyPacer` is the rule of the on-policy agents: train whenever the learner's
replays can give a batch (TorchBeast's and Sample Factory's); the actors are never
held. `ReplayRatioPacer` is the off-policy agents' rate limiter (Reverb's
SampleToInsertRatio): a fixed number of updates per env step.
"""

from __future__ import annotations

import time

from training.policy_learner import PolicyLearner


class Pacer:
    def due(self, learner: PolicyLearner) -> bool:
        """Whether `learner` trains now (it then takes a batch and updates)."""
        raise NotImplementedError

    def idle(self, learner: PolicyLearner) -> bool:
        """Whether `learner` has nothing to do until more rollouts arrive (the driver
        then waits for them a little)."""
        return not learner.ready()

    def may_act(self, learners: list[PolicyLearner]) -> bool:
        """Whether the actors may be granted slots for more rollouts now."""
        return True

    def stat_names(self) -> tuple[str, ...]:
        """The figures `take_stats` adds to each learner.csv row."""
        return ()

    def take_stats(self, learner: PolicyLearner | None = None) -> dict[str, float]:
        """The figures since `learner`'s previous update (`stat_names`)."""
        return {}


class BatchReadyPacer(Pacer):
    """Train whenever a batch is ready."""

    def due(self, learner: PolicyLearner) -> bool:
        return learner.ready()


class ReplayRatioPacer(Pacer):
    """`ratio` updates per env step after `learning_starts` env steps (one policy).

    The learner trains while its updates < `allowed` and a batch is ready, so it never
    trains on an insert beyond the ratio. Env steps taken while the replays cannot give
    a batch are not owed: the allowance counts from the last time they could not (as
    CleanRL's and Stable-Baselines3's loops, which make one update per step from the
    first one they can make, never a burst of the missed ones). So a resume without
    `--checkpoint_replay`, whose replays refill for --batch_size x --r_f_steps env steps,
    goes on at the ratio from its checkpoint's updates. The actors get no new slots
    while the env steps exceed those the updates stand for by `slack` or more (a round
    of rollouts of every actor: what they hold once granted), so they cannot outrun a
    slow learner by more than that, unless the replays cannot give a batch yet.
    `take_stats` says for how long, since the previous update, the actors were held
    ("actor_wait_s") and the learner waited for env steps with a batch at hand
    ("learner_wait_s"); a learner.csv row has their means."""

    def __init__(self, counters, ratio: float, learning_starts: int, slack: int):
        self.counters = counters  # training.metrics.Counters: the run's env steps
        self.ratio = ratio
        self.learning_starts = learning_starts
        self.slack = slack
        # (env steps, updates) the allowance counts from: learning_starts at first, and
        # again each time the replays can give a batch after they could not
        self._base = (learning_starts, 0)
        self._refilling = False
        self._waits = {"actor_wait_s": 0.0, "learner_wait_s": 0.0}
        self._since: dict[str, float | None] = dict.fromkeys(self._waits)

    def _waiting(self, side: str, waiting: bool) -> None:
        now = time.perf_counter()
        since = self._since[side]
        if since is not None:
            self._waits[side] += now - since
        self._since[side] = now if waiting else None

    def allowed(self, learner: PolicyLearner) -> float:
        """The updates `learner` may have made by now (see the class docstring)."""
        steps = self.counters.env_steps
        if not learner.mixer.ready():
            self._refilling = True
        elif self._refilling:
            self._base = (max(steps, self.learning_starts), learner.updates)
            self._refilling = False
        start, updates = self._base
        return updates + self.ratio * (steps - start)

    def due(self, learner: PolicyLearner) -> bool:
        if learner.updates >= self.allowed(learner):
            self._waiting("learner_wait_s", learner.ready())
            return False
        self._waiting("learner_wait_s", False)
        return learner.ready()

    def idle(self, learner: PolicyLearner) -> bool:
        return learner.updates >= self.allowed(learner) or not learner.ready()

    def may_act(self, learners: list[PolicyLearner]) -> bool:
        learner = learners[0]
        ahead = (self.allowed(learner) - learner.updates) / self.ratio  # env steps
        # while the replays cannot give a batch (a resume without --checkpoint_replay
        # refills them) only the actors can change that: holding them would hang the run
        ok = ahead < self.slack or not learner.mixer.ready()
        self._waiting("actor_wait_s", not ok)
        return ok

    def stat_names(self) -> tuple[str, ...]:
        return tuple(self._waits)

    def take_stats(self, learner: PolicyLearner | None = None) -> dict[str, float]:
        for side, since in self._since.items():
            if since is not None:
                self._waiting(side, True)
        out, self._waits = self._waits, dict.fromkeys(self._waits, 0.0)
        return out


class PolicyPacers(Pacer):
    """Several policies (`--num_policies`): each learner under a pacer of its own (by
    `policy_id`); the actors act while every pacer lets them."""

    def __init__(self, pacers: list[Pacer]):
        self.pacers = pacers

    def due(self, learner: PolicyLearner) -> bool:
        return self.pacers[learner.policy_id].due(learner)

    def idle(self, learner: PolicyLearner) -> bool:
        return self.pacers[learner.policy_id].idle(learner)

    def may_act(self, learners: list[PolicyLearner]) -> bool:
        return all([p.may_act([learner]) for p, learner in zip(self.pacers, learners,
                                                               strict=True)])

    def take_stats(self, learner: PolicyLearner | None = None) -> dict[str, float]:
        return self.pacers[learner.policy_id].take_stats(learner)
