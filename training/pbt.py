"""Population-based training (`--with_pbt`), an observer of the run's updates, with
Sample Factory's rules (its `pbt/population_based_training.py`).

Each time a policy's own env steps pass another `--pbt_period_env_steps`, PBT looks at
it (between updates, in the driver's thread):
- the policies are ranked by their objective, the mean return of their last 100
  training episodes (no look until every policy has one);
- a policy among the best ceil(`--pbt_replace_fraction` x K) is left alone;
- a policy among the worst as many picks one of the best at random and, if the
  objective gap is above `--pbt_replace_reward_gap_absolute` and, relative to the
  better one's, above `--pbt_replace_reward_gap`, copies its agent (weights,
  optimizer state, target networks: the *exploit*; its own random streams stay) and
  its hyperparameters;
- then every policy not left alone perturbs its (possibly copied) hyperparameters
  `--pbt_mutate`: each with probability `--pbt_mutation_rate` is multiplied or divided
  (a fair coin) by a factor drawn uniformly from [`--pbt_perturb_min`,
  `--pbt_perturb_max`], or, once in a hundred, set back to its initial value
  (policy 0's) if it moved.

At the start of a new run every policy but policy 0 perturbs its hyperparameters
once, as Sample Factory does, so that the population starts spread.

Where it differs from Sample Factory: PBT looks from the first period on (Sample
Factory waits `--pbt_start_mutation`, 20M env steps by default; here a first
period of `--pbt_period_env_steps` does the same job); policy 0 is never mutated and keeps its own
hyperparameters even when it copies a better policy's weights (Sample Factory gives it
the better one's), so it stays a reference; a learning rate moves its schedule's end
value by the same factor (the schedule keeps its shape); the random draws come from
one stream seeded by --seed, so a `--serial` run repeats bit for bit.

Every exploit and perturbation is a row of `pbt.csv` in the run directory; the current
hyperparameters and the stream are in the checkpoint, and a resumed run cuts pbt.csv
to the rows its checkpoint counted.
"""

from __future__ import annotations

import copy
import csv
import dataclasses
import math
import os
import random

from agents.registry import AGENTS
from training.config import Config
from training.observers import Observer
from training.policies import DISCOUNTS, MUTABLE, mutated
from training.run_dir import RunDir, cut_csv

EPS = 1e-6  # Sample Factory's, in the relative gap's denominator
RESET_CHANCE = 0.01  # a moved hyperparameter goes back to its initial value
PBT_COLUMNS = ["env_steps", "policy_env_steps", "event", "policy", "source", "param", "old",
               "new", "objective", "source_objective"]


def retune(learner, cfg: Config) -> None:
    """Give `learner` (a `PolicyLearner`) an agent built from `cfg` on the same model,
    with the old agent's whole state (optimizers, target networks, random streams, the
    precision it trains in, its learner group): its hyperparameters are then `cfg`'s,
    whatever the agent keeps them in. The state is copied before the new agent is
    built: a constructor may write to the shared model (sac fills its log alpha)."""
    old = learner.agent
    state = copy.deepcopy(old.state_dict())
    agent = AGENTS[cfg.agent].cls.from_config(old.model, cfg, old.device)
    agent.load_state_dict(state)
    agent.autocast, agent.precision_reason, agent.group = \
        old.autocast, old.precision_reason, old.group
    learner.agent, learner.cfg = agent, cfg


def exploit(learner, source) -> None:
    """Copy `source`'s agent into `learner`'s (weights, optimizers, target networks,
    counters) but for its random streams (`Agent.RANDOM_STATE`): the copy keeps its
    own, or it would draw the same replay rows, noise and minibatches as its source."""
    own = learner.agent.state_dict()
    state = source.agent.state_dict()
    learner.agent.load_state_dict(
        {**state, **{key: own[key] for key in learner.agent.RANDOM_STATE}})


class PopulationBasedTraining(Observer):
    """`policies`: every policy's `Config` (the initial ones); `learners`: their
    `PolicyLearner`s; `report`: the run's `PopulationReport` (objectives and each
    policy's env steps); `run`: the run directory (pbt.csv)."""

    def __init__(self, policies: list[Config], learners, report, run: RunDir):
        cfg = policies[0]
        self.cfg = cfg
        self.configs = list(policies)
        self.learners = learners
        self.report = report
        self.log = run.log
        self.path = run.file("pbt.csv")
        self.names = mutated(cfg)
        self.last = [0] * len(policies)  # each policy's env steps when PBT last looked
        self.rng = random.Random(cfg.seed + 1_000_033)
        self.rows = 0
        self._file = self._writer = None

    # --- the observer ------------------------------------------------------------------
    def update(self, policy_id: int, stats: dict[str, float]) -> None:
        steps = self.report.policies[policy_id].counters.env_steps
        if steps - self.last[policy_id] >= self.cfg.pbt_period_env_steps:
            self.last[policy_id] = steps
            self.look(policy_id)

    def objectives(self) -> list[float | None]:
        """Each policy's mean return of its last 100 training episodes (None: none yet)."""
        return [p.mean_return() for p in self.report.policies]

    def look(self, k: int, objectives: list[float] | None = None) -> None:
        """PBT's step for policy `k` (see the module docstring); `objectives` default to
        `objectives()`."""
        obj = objectives if objectives is not None else self.objectives()
        if any(o is None for o in obj):
            return
        order = sorted(range(len(obj)), key=lambda p: (-obj[p], p))
        n = math.ceil(self.cfg.pbt_replace_fraction * len(obj))
        best, worst = order[:n], order[-n:]
        if k in best:
            return
        source = k
        if k in worst:
            candidate = self.rng.choice(best)
            delta = obj[candidate] - obj[k]
            relative = abs(delta / (obj[candidate] + EPS))
            if abs(delta) > self.cfg.pbt_replace_reward_gap_absolute and \
                    relative > self.cfg.pbt_replace_reward_gap:
                source = candidate
        if source != k:
            exploit(self.learners[k], self.learners[source])
            self._row("exploit", k, source, "", "", "", obj)
            self.log.info(f"pbt: policy {k} (objective {obj[k]:.3g}) copies policy {source}'s "
                          f"weights (objective {obj[source]:.3g})")
        values = {name: getattr(self.configs[source if k else k], name) for name in self.names}
        if k != 0:
            for name, old in list(values.items()):
                values[name] = self._perturb(name, old)
                if values[name] != old:
                    self._row("perturb", k, source, name, old, values[name], obj)
        self._apply(k, values)
        self.learners[k].publish()

    def _perturb(self, name: str, value: float) -> float:
        """Sample Factory's perturbation of one float hyperparameter (a discount's
        1 - x by a factor in [1.01, 1.2], as its perturb_exponential_decay), kept in
        the hyperparameter's range (`training.policies.MUTABLE`)."""
        if self.rng.random() > self.cfg.pbt_mutation_rate:
            return value
        initial = getattr(self.configs[0], name)  # policy 0 is never mutated
        if value != initial and self.rng.random() < RESET_CHANCE:
            return initial
        if name in DISCOUNTS:
            factor = self.rng.uniform(1.01, 1.2)
            rest = 1.0 - value
            new = 1.0 - (rest / factor if self.rng.random() < 0.5 else rest * factor)
        else:
            factor = self.rng.uniform(self.cfg.pbt_perturb_min, self.cfg.pbt_perturb_max)
            new = value / factor if self.rng.random() < 0.5 else value * factor
        low, high = MUTABLE[name]
        return min(max(new, low), high)

    def start(self) -> None:
        """At the start of a new run (not a resume): as Sample Factory, every policy
        but policy 0 perturbs its hyperparameters once, so the population starts
        spread (rows "initial" of pbt.csv)."""
        obj = [math.nan] * len(self.configs)
        for k in range(1, len(self.configs)):
            values = {}
            for name in self.names:
                old = getattr(self.configs[k], name)
                values[name] = self._perturb(name, old)
                if values[name] != old:
                    self._row("initial", k, k, name, old, values[name], obj)
            self._apply(k, values)
            self.learners[k].publish()

    def _apply(self, k: int, values: dict[str, float]) -> None:
        """Make `values` policy k's hyperparameters (a learning rate moves the end value
        of its schedule by the same factor)."""
        cfg = self.configs[k]
        changed = {name: v for name, v in values.items() if getattr(cfg, name) != v}
        if "lr" in changed and cfg.lr > 0:
            changed["lr_end_value"] = cfg.lr_end_value * changed["lr"] / cfg.lr
        if not changed:
            return
        self.configs[k] = dataclasses.replace(cfg, **changed)
        retune(self.learners[k], self.configs[k])

    def _row(self, event: str, k: int, source: int, name: str, old, new, obj) -> None:
        if self._writer is None:
            fresh = not os.path.exists(self.path) or os.path.getsize(self.path) == 0
            self._file = open(self.path, "a", newline="")
            self._writer = csv.DictWriter(self._file, PBT_COLUMNS)
            if fresh:
                self._writer.writeheader()
        self._writer.writerow({
            "env_steps": self.report.counters.env_steps,
            "policy_env_steps": self.report.policies[k].counters.env_steps, "event": event,
            "policy": k, "source": source, "param": name,
            "old": f"{old:.6g}" if name else "", "new": f"{new:.6g}" if name else "",
            "objective": _number(obj[k]), "source_objective": _number(obj[source])})
        self._file.flush()
        self.rows += 1

    # --- checkpoints -------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {"values": [{name: getattr(c, name) for name in self.names}
                           for c in self.configs],
                "last": list(self.last), "rng": self.rng.getstate(), "rows": self.rows}

    def load_state_dict(self, state: dict) -> None:
        """Go on from a checkpoint: each policy's hyperparameters as they were, pbt.csv
        cut to the rows the checkpoint counted."""
        for k, values in enumerate(state["values"][:len(self.configs)]):
            self._apply(k, {n: v for n, v in values.items() if n in self.names})
        self.last[:len(state["last"])] = state["last"][:len(self.last)]
        self.rng.setstate(state["rng"])
        self.rows = state["rows"]
        cut_csv(self.path, self.rows)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


def _number(x: float) -> str:
    """A pbt.csv figure: empty where unknown (NaN)."""
    return "" if math.isnan(x) else f"{x:.6g}"
