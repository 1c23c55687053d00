"""The driver: the run's loop over the actors and the policy learners.

Runs in the main process and owns what a run has once: the actor pool
(workers/actor_pool.py), the rollout slots, the evaluator, the counters and
reports, the status cadence, checkpoints and stopping. It routes each finished
rollout to the policy learner of its `policy_id` (training/policy_learner.py),
which owns the agent, the replays and the weights of one policy (Sample Factory's
split: a learner per policy id). One iteration:

    grant free slots (if the pacer lets the actors act) -> poll finished rollouts ->
    route them (count env steps, record episodes, tell the observers) -> for each
    learner its pacer says is due: a batch, an update, tell the observers -> an
    evaluation if due -> a status line every `status_interval` s, a checkpoint every
    `save_model_period` updates

The loop ends at `max_env_steps`, when an observer asks to stop (`--stop_at_return`,
training/observers.py), or when `stop_requested()` says so (a signal). Progress,
the learning-rate schedules' 0 to 1, is the run's env steps over
--environment_max_steps: one global count that every learner reads. The parts are
built and wired by `training/factory.py`; counting and reporting are
`training/report.py`'s.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time

import torch

from training import metrics
from training.checkpoint import rng_state, save_checkpoint
from training.config import Config
from training.observers import Observer
from training.pacer import Pacer
from training.policy_learner import PolicyLearner
from training.report import Report
from workers.actor_pool import ActorPoolBase
from workers.evaluator import Evaluator, wait_ready
from workers.slots import SlotPool
from wrappers.envs import EnvInfo


class Driver:
    """The training loop over parts built elsewhere; `run()` trains until the budget."""

    def __init__(self, cfg: Config, info: EnvInfo, learners: list[PolicyLearner],
                 slots: SlotPool, actors: ActorPoolBase, report: Report, pacer: Pacer,
                 observers: list[Observer] = (), evaluator: Evaluator | None = None,
                 shared=None):
        """`report`: a `Report`, or with several policies a `PopulationReport`;
        `shared`: the replay every policy's rollouts also go to (--share_experience)."""
        self.cfg = cfg
        self.info = info
        self.learners = learners
        self.slots = slots
        self.actors = actors
        self.report = report
        self.pacer = pacer
        self.observers = list(observers)
        self.evaluator = evaluator
        self.shared = shared
        self.log = report.log
        self.leader = True  # this driver reports: status, evaluations, the final ones
        self._dropped = self.replay_dropped()  # as last logged
        self.stop_losses: dict[str, int] = {}  # what the stop lost (`close`)
        self._wait_since = time.perf_counter()  # when the learners began waiting for a batch

    @property
    def counters(self):
        return self.report.counters

    def progress(self) -> float:
        """The run's progress (0 to 1) for the learning-rate schedules."""
        return self.counters.env_steps / self.cfg.environment_max_steps

    # --- the loop --------------------------------------------------------------------
    def run(self, stop_requested=lambda: False, max_env_steps: int | None = None) -> None:
        """Train until `max_env_steps` (default: the config's) env steps were received
        or `stop_requested()` is true. The update in flight always completes."""
        cfg = self.cfg
        max_env_steps = self.start(max_env_steps)
        last_ckpt, last_check, last_status = self.counters.updates, 0.0, time.time()
        while self.counters.env_steps < max_env_steps and not self._stop_before(stop_requested):
            if self.pacer.may_act(self.learners):
                self.actors.grant()
            ready = not all(self.pacer.idle(learner) for learner in self.learners)
            self._receive(self.actors.poll(0.0 if ready else 0.05))
            if time.time() - last_check >= 1.0:
                self.actors.check()
                last_check = time.time()
            if self._stop_after_receipt(stop_requested):
                break
            for learner in self.learners:
                if self.pacer.due(learner):
                    self._train(learner)
            if self.leader:
                self._evaluate(stop_requested)
                if time.time() - last_status >= cfg.status_interval:
                    self.status()
                    last_status = time.time()
                    self._wait_since = time.perf_counter()  # reporting is not waiting
            if self.counters.updates - last_ckpt >= cfg.save_model_period:
                self.save()
                last_ckpt = self.counters.updates
                self._wait_since = time.perf_counter()
        if self.leader:
            self.final_evaluation(stop_requested)
            self.status()

    def _stop_before(self, stop_requested) -> bool:
        """Whether to stop before this iteration: a signal, or an observer's reason."""
        if stop_requested():
            return True
        reasons = [r for r in (o.stop_reason() for o in self.observers) if r]
        if reasons:
            self.log.info(f"{reasons[0]}: stopping")
        return bool(reasons)

    def _stop_after_receipt(self, stop_requested) -> bool:
        """Whether to stop once this iteration's rollouts arrived (data-parallel ranks
        agree on it there: training/ranks/driver.py)."""
        return False

    def _train(self, learner: PolicyLearner) -> None:
        """An update of `learner`, which its pacer found due, if a batch is there."""
        batch = learner.next_batch()
        if batch is not None:
            self._update(learner, batch)

    def final_evaluation(self, stop_requested) -> None:
        """At the end of a run (not after a stop request): the evaluation in flight
        (up to 120 s), then one of the final weights if none had them."""
        if self.evaluator is None or stop_requested():
            return
        for res in wait_ready(self.evaluator, 120, stop_requested):
            self.report.evaluation(*res)
        while self.evaluator.request_final(*self._eval_args()):
            k = self.evaluator.asked
            self.log.info(f"evaluating the final policy{f' {k}' if len(self.learners) > 1 else ''} "
                          f"(weights {self.learners[k].updates})")
            for res in wait_ready(self.evaluator, math.inf, stop_requested):
                self.report.evaluation(*res)
            if stop_requested():
                break

    def _eval_args(self) -> tuple:
        """The evaluator's view of the policies: their acting models, weights versions,
        the run's env steps and (several policies) each policy's own."""
        return ([learner.agent.acting_model for learner in self.learners],
                [learner.updates for learner in self.learners], self.counters.env_steps,
                self.report.policy_steps())

    def start(self, max_env_steps: int | None) -> int:
        """Start the actors, the evaluator and the learners; the env steps to train to
        (`max_env_steps`, default the config's)."""
        cfg = self.cfg
        max_env_steps = max_env_steps or cfg.environment_max_steps
        self.report.max_env_steps = max_env_steps
        self.log.info(
            f"run directory {self.report.run_dir.path}: {cfg.env}, {cfg.worker_count} actors x "
            f"{cfg.envs_per_worker} envs, T={cfg.r_f_steps}, batch {cfg.batch_size}, "
            f"device {self.learners[0].agent.device}, obs {self.info.obs_shape} "
            f"{self.info.obs_dtype}"
            + (f", {cfg.learner_count} learners (batch {cfg.learner_count * cfg.batch_size} "
               "in all)" if cfg.learner_count > 1 else ""))
        self.actors.start()
        if self.evaluator is not None:
            self.evaluator.start()
        for learner in self.learners:
            learner.start(cfg.caching, cfg.cache_output_buffer_size)
        self._wait_since = time.perf_counter()
        return max_env_steps

    def _receive(self, rollouts) -> None:
        for rollout in rollouts:
            if self.shared is not None:  # copied out before the policy's replays free them
                for i in rollout.indices:
                    self.shared.add(i)
            self.learners[rollout.policy_id].receive(rollout)
            self.report.rollouts(self.cfg.r_f_steps * len(rollout.indices), rollout.policy_id)
            self.report.episodes(rollout.episodes, rollout.policy_id)
            if rollout.episodes:
                for observer in self.observers:
                    observer.episodes(rollout.policy_id, rollout.episodes)

    def _update(self, learner: PolicyLearner, batch: dict[str, torch.Tensor]) -> None:
        t0 = time.perf_counter()
        wait_s = t0 - self._wait_since
        stats, lag = learner.train(batch, self.progress())
        stats.update(self.pacer.take_stats(learner))
        self.report.update(stats, wait_s, time.perf_counter() - t0, lag, len(self.slots.free),
                           learner.policy_id)
        for observer in self.observers:
            observer.update(learner.policy_id, stats)
        self._wait_since = time.perf_counter()

    def _evaluate(self, stop_requested) -> None:
        """Ask for an evaluation (of each policy in turn) when one is due; record those
        that finished. A `--serial` run waits for each, so its eval.csv repeats bit for
        bit."""
        if self.evaluator is None:
            return
        asked = self.evaluator.maybe_request(*self._eval_args())
        done = wait_ready(self.evaluator, math.inf, stop_requested) \
            if asked and self.cfg.serial else []
        for res in done + self.evaluator.poll():
            self.report.evaluation(*res)

    # --- reporting and checkpoints ----------------------------------------------------
    def status(self) -> None:
        self.report.pipeline.add_actor_times(self.actors.take_actor_seconds())
        dropped = self.replay_dropped()
        replays = self.replays()
        for i, (r, now, before) in enumerate(zip(replays, dropped, self._dropped, strict=True)):
            if now > before:
                self.log.warning(f"replay {i} ({r.describe()}): {now - before} rollouts not "
                                 f"stored since the last status, {now} in all: its frame pool "
                                 "was full (replay/storage.py)")
        self._dropped = dropped
        extra = {**metrics.replay_scalars(replays, len(self.slots.free)),
                 **self.actors.stats(),
                 **self.report.system.sample(os.getpid(), self.actors.pids())}
        self.report.status(extra, self.actors.restarts, {"replay_dropped": self._dropped})

    def replays(self) -> list:
        """Every replay object: the policies' in order, then the shared one."""
        return [r for learner in self.learners for r in learner.mixer.replays] + \
            ([self.shared] if self.shared is not None else [])

    def replay_dropped(self) -> list[int]:
        """Per replay (`replays()`): rollouts its frame pool had no room for, so far."""
        return [int(r.stats().get("dropped", 0)) for r in self.replays()]

    def summary(self) -> dict:
        return {**self.report.summary(self.actors.restarts),
                "replay_dropped": self.replay_dropped(),
                **({"stop": self.stop_losses} if self.stop_losses else {})}

    def save(self) -> str:
        """An atomic checkpoint; returns the path of `checkpoint.pt`."""
        return self.write_checkpoint([learner.state_dict(self.cfg.checkpoint_replay)
                                      for learner in self.learners])

    def _run_parts(self) -> dict:
        """What a checkpoint holds besides the policies: the shared replay and the
        observers' state (PBT's), where there are."""
        states = {f"observer_{type(o).__name__}": o.state_dict() for o in self.observers}
        parts = {name: state for name, state in states.items() if state is not None}
        if self.shared is not None:
            parts["shared_replay"] = self.shared.state_dict(self.cfg.checkpoint_replay)
        return parts

    def write_checkpoint(self, policies: list[dict]) -> str:
        """Write a checkpoint of the run with the policies' parts `policies`; the run
        files are flushed and fsynced first, so they hold every row it counts."""
        self.report.flush(sync=True)
        return save_checkpoint(self.report.run_dir.path, self.counters.updates, {
            "config": self.cfg.to_dict(),
            **self.report.state_dict(),
            "rng": rng_state(),
            "env_info": dataclasses.asdict(self.info),
            "policies": policies,
            **self._run_parts(),
        }, keep=self.cfg.keep_checkpoints)

    # --- shutdown ---------------------------------------------------------------------
    def close(self) -> None:
        """Stop and join every actor. What the stop loses goes to the log and to
        `stop_losses` (summary.json): rollouts the actors finished while stopping are
        dropped uncounted, their env steps and episodes both (so the counters and the
        CSVs agree); rollouts received and counted but still queued are not trained on."""
        if self.evaluator is not None:
            self.evaluator.close()
        for observer in self.observers:
            observer.close()
        late = self.actors.close()
        for rollout in late:
            self.slots.release(rollout.indices)
        unread = sum(learner.close() for learner in self.learners)
        t = self.cfg.r_f_steps
        self.stop_losses = {
            "late_env_steps_dropped": t * sum(len(r.indices) for r in late),
            "late_episodes_dropped": sum(len(r.episodes) for r in late),
            "queued_env_steps_not_trained": t * unread}
        self.log.info(
            f"stop: {self.stop_losses['late_env_steps_dropped']:,} env steps "
            f"({self.stop_losses['late_episodes_dropped']} episodes) that the actors finished "
            f"while stopping are dropped, uncounted; {t * unread:,} env steps counted but "
            "still queued were not trained on")
        self.report.close()
