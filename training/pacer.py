"""The pacer: when a policy learner trains (between receiving rollouts and updating).

`BatchReadyPacer` is the rule of every run today: train whenever the learner's
replays can give a batch (TorchBeast's and Sample Factory's). A pacer that holds a
learner back until enough fresh env steps arrived per update (a replay ratio, as
Reverb's rate limiter does) is another class with the same `due`.
"""

from __future__ import annotations

from training.policy_learner import PolicyLearner


class Pacer:
    def due(self, learner: PolicyLearner) -> bool:
        """Whether `learner` trains now (it then takes a batch and updates)."""
        raise NotImplementedError


class BatchReadyPacer(Pacer):
    """Train whenever a batch is ready."""

    def due(self, learner: PolicyLearner) -> bool:
        return learner.ready()
