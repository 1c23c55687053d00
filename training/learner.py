"""The learner's loop: grant slots, take rollouts, sample batches, update, publish.

Runs in the main process. One iteration: grant free slots to the actors, offer
the finished rollouts to the replays, sample a batch when the replays are ready,
take one agent step (`agents/agent.py`), publish the new weights, record finished
episodes. A status line goes out every `status_interval` seconds, a checkpoint
every `save_model_period` updates. The loop ends at `max_env_steps`, when the
recent mean return reaches `--stop_at_return`, or when `stop_requested()` says so
(a signal). The parts are built and wired by
`training/factory.py`; counting and reporting are `training/report.py`'s.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time

import torch

from agents.agent import Agent
from replay.mixer import BatchMixer, Prefetcher
from training import metrics
from training.checkpoint import rng_state, save_checkpoint
from training.config import Config
from training.report import Report
from workers.evaluator import Evaluator, wait_ready
from workers.pool import ActorPool
from workers.slots import SlotPool
from workers.weights import SharedWeights
from wrappers.envs import EnvInfo


class Learner:
    """The training loop over parts built elsewhere; `run()` trains until the budget."""

    def __init__(self, cfg: Config, info: EnvInfo, agent: Agent, slots: SlotPool,
                 mixer: BatchMixer, weights: SharedWeights, actors: ActorPool, report: Report,
                 evaluator: Evaluator | None = None):
        self.cfg = cfg
        self.evaluator = evaluator
        self.info = info
        self.agent = agent
        self.slots = slots
        self.mixer = mixer
        self.weights = weights
        self.actors = actors
        self.report = report
        self.log = report.log
        self.prefetcher: Prefetcher | None = None
        self._dropped = self.replay_dropped()  # as last logged
        self._reached = False  # the recent mean return reached --stop_at_return
        self.stop_losses: dict[str, int] = {}  # what the stop lost (`close`)
        self._wait_since = time.perf_counter()  # when the learner began waiting for a batch

    @property
    def counters(self):
        return self.report.counters

    # --- the loop --------------------------------------------------------------
    def run(self, stop_requested=lambda: False, max_env_steps: int | None = None) -> None:
        """Train until `max_env_steps` (default: the config's) env steps were received
        or `stop_requested()` is true. The update in flight always completes."""
        cfg = self.cfg
        max_env_steps = max_env_steps or cfg.environment_max_steps
        self.report.max_env_steps = max_env_steps
        self.log.info(
            f"run directory {self.report.run_dir.path}: {cfg.env}, {cfg.worker_count} actors x "
            f"{cfg.envs_per_worker} envs, T={cfg.r_f_steps}, batch {cfg.batch_size}, "
            f"device {self.agent.device}, obs {self.info.obs_shape} {self.info.obs_dtype}"
        )
        self.actors.start()
        if self.evaluator is not None:
            self.evaluator.start()
        if cfg.caching:
            self.prefetcher = Prefetcher(self.mixer, cfg.cache_output_buffer_size,
                                         pin_memory=self.agent.device.type == "cuda")
        last_ckpt, last_check, last_status = self.counters.updates, 0.0, time.time()
        self._wait_since = time.perf_counter()
        while self.counters.env_steps < max_env_steps and not stop_requested():
            if self._reached:
                self.log.info(f"the mean return of the last {cfg.stop_window} episodes reached "
                              f"--stop_at_return={cfg.stop_at_return}: stopping")
                break
            self.actors.grant()
            self._receive(self.actors.poll(0.0 if self._batch_ready() else 0.05))
            if time.time() - last_check >= 1.0:
                self.actors.check()
                last_check = time.time()
            self.mixer.set_updates(self.counters.updates)
            batch = self._next_batch()
            if batch is not None:
                self._update(batch)
            self._evaluate(stop_requested)
            if time.time() - last_status >= cfg.status_interval:
                self.status()
                last_status = time.time()
                self._wait_since = time.perf_counter()  # reporting is not waiting
            if self.counters.updates - last_ckpt >= cfg.save_model_period:
                self.save()
                last_ckpt = self.counters.updates
                self._wait_since = time.perf_counter()
        if self.evaluator is not None and not stop_requested():  # the one in flight
            for res in wait_ready(self.evaluator, 120, stop_requested):
                self.report.evaluation(*res)
        self.status()

    def _batch_ready(self) -> bool:
        if self.prefetcher is not None:
            return not self.prefetcher.batches.empty()
        return self.mixer.ready()

    def _next_batch(self) -> dict[str, torch.Tensor] | None:
        if self.prefetcher is not None:
            return self.prefetcher.get(timeout=0.0)
        return self.mixer.sample() if self.mixer.ready() else None

    def _receive(self, rollouts) -> None:
        for rollout in rollouts:
            for i in rollout.indices:
                self.mixer.add(i)
            self.report.rollouts(self.cfg.r_f_steps * len(rollout.indices))
            self.report.episodes(rollout.episodes)
            if rollout.episodes:  # the stop target changes only with new episodes
                self._reached = self.report.reached(self.cfg.stop_at_return,
                                                    self.cfg.stop_window)

    def _update(self, batch: dict[str, torch.Tensor]) -> None:
        t0 = time.perf_counter()
        wait_s = t0 - self._wait_since
        lag = metrics.policy_lag(batch["version"], self.counters.updates)
        stats = self.agent.update(
            batch, self.counters.env_steps / self.cfg.environment_max_steps)
        self.weights.publish(self.agent.model, self.counters.updates + 1)
        self.report.update(stats, wait_s, time.perf_counter() - t0, lag, len(self.slots.free))
        self._wait_since = time.perf_counter()

    def _evaluate(self, stop_requested) -> None:
        """Ask for an evaluation when one is due; record those that finished. A
        `--serial` run waits for each, so its eval.csv repeats bit for bit too."""
        if self.evaluator is None:
            return
        asked = self.evaluator.maybe_request(self.agent.model, self.counters.updates,
                                             self.counters.env_steps)
        done = wait_ready(self.evaluator, math.inf, stop_requested) \
            if asked and self.cfg.serial else []
        for res in done + self.evaluator.poll():
            self.report.evaluation(*res)

    # --- reporting and checkpoints ------------------------------------------------
    def status(self) -> None:
        self.report.pipeline.add_actor_times(self.actors.take_actor_seconds())
        dropped = self.replay_dropped()
        for i, (r, now, before) in enumerate(zip(self.mixer.replays, dropped, self._dropped,
                                                strict=True)):
            if now > before:
                self.log.warning(f"replay {i} ({r.describe()}): {now - before} rollouts not "
                                 f"stored since the last status, {now} in all: its frame pool "
                                 "was full (replay/storage.py)")
        self._dropped = dropped
        extra = {**metrics.replay_scalars(self.mixer.replays, len(self.slots.free)),
                 **self.actors.stats(),
                 **self.report.system.sample(os.getpid(), self.actors.pids())}
        self.report.status(extra, self.actors.restarts, {"replay_dropped": self._dropped})

    def replay_dropped(self) -> list[int]:
        """Per replay: rollouts its frame pool had no room for, so far."""
        return [int(r.stats().get("dropped", 0)) for r in self.mixer.replays]

    def summary(self) -> dict:
        return {**self.report.summary(self.actors.restarts),
                "replay_dropped": self.replay_dropped(),
                **({"stop": self.stop_losses} if self.stop_losses else {})}

    def save(self) -> str:
        """An atomic checkpoint; returns the path of `checkpoint.pt`. The run files are
        flushed and fsynced first, so they hold every row the checkpoint counts."""
        self.report.flush(sync=True)
        return save_checkpoint(self.report.run_dir.path, self.counters.updates, {
            "config": self.cfg.to_dict(),
            **self.agent.state_dict(),
            **self.report.state_dict(),
            "rng": rng_state(),
            "replays": self.mixer.state_dict(include_data=self.cfg.checkpoint_replay),
            "env_info": dataclasses.asdict(self.info),
        }, keep=self.cfg.keep_checkpoints)

    # --- shutdown --------------------------------------------------------------
    def close(self) -> None:
        """Stop and join every actor. What the stop loses goes to the log and to
        `stop_losses` (summary.json): rollouts the actors finished while stopping are
        dropped uncounted, their env steps and episodes both (so the counters and the
        CSVs agree); rollouts received and counted but still queued are not trained on."""
        if self.prefetcher is not None:
            self.prefetcher.close()
        if self.evaluator is not None:
            self.evaluator.close()
        late = self.actors.close()
        for rollout in late:
            self.slots.release(rollout.indices)
        unread = self.mixer.release_all()
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
