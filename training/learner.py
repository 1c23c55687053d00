"""The learner: start the actors, turn their rollouts into batches, train, log.

Runs in the main process. One iteration: grant free slots to the actors, take
the finished rollouts into the replays, sample a batch when the replays are
ready, take one IMPALA step, publish the new weights, record finished episodes.
A status line goes out every `status_interval` seconds, a checkpoint every
`save_model_period` updates. The loop ends at `environment_max_steps` or when
`stop_requested()` says so (a signal). Counting: an env step is one agent
decision of one env; frames = env steps x frameskip (1 outside Atari).
Besides the CSVs, each status line writes TensorBoard scalars (training/metrics.py)
with env steps as the step: losses and pipeline figures averaged over the interval,
system figures sampled then; every finished episode goes to `charts/`.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import math
import os
import random
import sys
import time

import numpy as np
import torch
import torch.multiprocessing as mp
from torch.nn.utils import parameters_to_vector

from agents.impala import LossConfig, build_optimizer, impala_loss, polynomial_lr
from agents.networks import build_model
from replay.config import parse_replay_parameters, stores_hidden_features
from replay.mixer import BatchMixer, Prefetcher, build_replays
from training import metrics
from training.checkpoint import save_checkpoint
from training.run_dir import RunDir
from workers.actor import ActorConfig
from workers.pool import ActorPool
from workers.slots import SlotPool, rollout_spec
from workers.weights import SharedWeights
from wrappers.envs import EnvOptions, env_info


def env_options(config: dict, training: bool = True) -> EnvOptions:
    """Env preprocessing from a config dict (`Config.to_dict()` or a checkpoint's)."""
    return EnvOptions(
        skipped_frames=config["skipped_frames"],
        frames_stacked=config["frames_stacked"],
        noop_threshold=config["noop_threshold"],
        episodic_life=config["episodic_life"] and training,
        repeat_action_probability=config["repeat_action_probability"],
    )


def loss_config(cfg) -> LossConfig:
    return LossConfig(
        gamma=cfg.gamma,
        policy_gradient_loss_weight=cfg.policy_gradient_loss_weight,
        value_loss_weight=cfg.value_loss_weight,
        entropy_loss_weight=cfg.entropy_loss_weight,
        rho_const=cfg.rho_const,
        pg_rho_const=cfg.pg_rho_const,
        c_const=cfg.c_const,
        clip_rewards=cfg.clip_rewards,
        reward_clipping_method=cfg.reward_clipping_method,
        clear_policy_cloning_weight=cfg.clear_policy_cloning_weight,
        clear_value_cloning_weight=cfg.clear_value_cloning_weight,
        kl_div_threshold=cfg.kl_div_threshold,
        normalize_advantages=cfg.normalize_advantages,
    )


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(name)


def store_features_of(entries: list[dict]) -> bool:
    """Whether the actors must store hidden features: some replay reads them."""
    return any(stores_hidden_features(e) for e in entries)


def slot_count(cfg) -> int:
    """Rollout slots: two rollouts' worth per env (held by the actors) and two batches."""
    return 2 * cfg.worker_count * cfg.envs_per_worker + 2 * cfg.batch_size


@dataclasses.dataclass
class Counters:
    env_steps: int = 0
    updates: int = 0
    episodes: int = 0
    wall_time: float = 0.0  # seconds of training, summed over resumed runs


class Learner:
    """Everything the training loop owns; `run()` trains until the step budget."""

    def __init__(self, cfg, run: RunDir, checkpoint: dict | None = None, random_policy=False):
        self.cfg = cfg
        self.run_dir = run
        self.log = run.log
        torch.manual_seed(cfg.seed)
        torch.set_num_threads(cfg.learner_threads)
        self.info = env_info(cfg.env, env_options(cfg.to_dict()))
        self.frames_per_step = self.info.frames_per_step
        self.device = resolve_device(cfg.device)
        self.model = build_model(self.info.obs_shape, self.info.num_actions, cfg.hidden_size)
        self.model.to(self.device)
        self.optimizer = build_optimizer(
            self.model.parameters(), cfg.optimizer, cfg.lr, cfg.rmsprop_eps, cfg.rmsprop_alpha
        )
        self.counters = Counters()
        self.returns: collections.deque[float] = collections.deque(maxlen=100)
        self.best_mean_return = -math.inf
        if checkpoint is not None:
            self._restore(checkpoint)
        self.loss_cfg = loss_config(cfg)
        self.last_stats: dict[str, float] = {}
        self.fps = 0.0
        self.first_rollout_at: tuple[float, int] | None = None  # (time, env steps before)
        self._t_start = time.time()
        self._wall_at_start = self.counters.wall_time
        self._env_steps_at_start = self.counters.env_steps
        self._last_status = (self._t_start, self.counters.env_steps)
        self._max_env_steps = cfg.environment_max_steps
        self._wait_since = time.perf_counter()  # when the learner began waiting for a batch
        self.pipeline = metrics.PipelineStats()
        self.system = metrics.SystemMonitor()
        self.tb = metrics.TensorBoardLog(run.path)

        entries, _ = parse_replay_parameters(cfg.replay_parameters, cfg.batch_size)
        store_features = store_features_of(entries)
        spec = rollout_spec(cfg.r_f_steps, self.info.obs_shape, self.info.obs_dtype,
                            self.info.num_actions,
                            feature_size=cfg.hidden_size if store_features else 0)
        self.slots = SlotPool(spec, num_slots=slot_count(cfg))
        replays = build_replays(
            entries, self.slots, spec, cfg.r_f_steps,
            pixel_stack=self.info.frame_stack or None,
            n_envs=cfg.worker_count * cfg.envs_per_worker,
            fill_in_factor=cfg.training_fill_in_factor, features_fn=self.features,
            schedule_updates=cfg.environment_max_steps / (cfg.r_f_steps * cfg.batch_size),
            seed=cfg.seed, hidden_features_fn=functools.partial(self.features, kind="hidden"))
        self.mixer = BatchMixer(self.slots, replays, [e["sample_ratio"] for e in entries],
                                cfg.batch_size)
        self._log_replays()
        if checkpoint is not None and "replays" in checkpoint:
            self.mixer.load_state_dict(checkpoint["replays"])
        self.prefetcher: Prefetcher | None = None
        self.weights = SharedWeights(self.model)
        self.weights.publish(self.model, self.counters.updates)
        actor_cfg = ActorConfig(
            env_id=cfg.env, env_options=env_options(cfg.to_dict()),
            envs_per_worker=cfg.envs_per_worker, unroll_length=cfg.r_f_steps,
            obs_shape=self.info.obs_shape, num_actions=self.info.num_actions,
            hidden_size=cfg.hidden_size, seed=cfg.seed + 1, random_policy=random_policy,
            store_features=store_features,
        )
        self.actors = ActorPool(mp.get_context("spawn"), actor_cfg, cfg.worker_count,
                                self.slots, self.weights, self.log, cfg.max_actor_restarts)

    @torch.no_grad()
    def features(self, obs: torch.Tensor, kind: str = "logits", chunk: int = 2048
                 ) -> torch.Tensor:
        """Current-policy features of obs [..., *obs_shape]: kind "logits" -> float32
        [..., A]; "hidden" -> the policy path's last hidden layer, float32 [..., H]
        (what the actors store as "features")."""
        lead = obs.shape[: obs.dim() - len(self.info.obs_shape)]
        flat = obs.reshape(-1, *self.info.obs_shape)
        if kind == "hidden":
            def net(x):
                return self.model.forward_with_hidden(x)[2]
        elif kind == "logits":
            def net(x):
                return self.model(x)[0]
        else:
            raise ValueError(f"kind must be 'logits' or 'hidden', got {kind!r}")
        out = [net(flat[i:i + chunk].to(self.device)).float().cpu()
               for i in range(0, flat.shape[0], chunk)]
        return torch.cat(out).reshape(*lead, -1)

    def _log_replays(self) -> None:
        for i, r in enumerate(self.mixer.replays):
            if hasattr(r, "storage"):
                size = r.stored_bytes()
                self.log.info(
                    f"replay {i} ({r.kind}, {r.strategy}): {r.capacity} rollouts, "
                    f"{size / 2**20:.1f} MiB, {r.storage.bytes_per_step():.0f} bytes per step"
                    + ("" if self.cfg.checkpoint_replay else
                       f"; not in checkpoints (--checkpoint_replay would add up to "
                       f"{size / 2**20:.1f} MiB)"))

    def _restore(self, ckpt: dict) -> None:
        self.model.load_state_dict(ckpt["model"])
        self.optimizer.load_state_dict(ckpt["optimizer"])
        self.counters = Counters(**ckpt["counters"])
        self.returns.extend(ckpt.get("recent_returns", []))
        best = ckpt.get("best_mean_return_100")
        self.best_mean_return = -math.inf if best is None else best
        rng = ckpt["rng"]
        torch.set_rng_state(rng["torch"])
        np.random.set_state(rng["numpy"])
        random.setstate(rng["python"])

    # --- the loop --------------------------------------------------------------
    def run(self, stop_requested=lambda: False, max_env_steps: int | None = None,
            train: bool = True) -> None:
        """Train until `max_env_steps` (default: the config's) env steps were received
        or `stop_requested()` is true. The update in flight always completes. With
        `train=False` rollouts are drained and discarded unread (the pipeline benchmark)."""
        cfg = self.cfg
        max_env_steps = max_env_steps or cfg.environment_max_steps
        self._max_env_steps = max_env_steps
        self.log.info(
            f"run directory {self.run_dir.path}: {cfg.env}, {cfg.worker_count} actors x "
            f"{cfg.envs_per_worker} envs, T={cfg.r_f_steps}, batch {cfg.batch_size}, "
            f"device {self.device}, obs {self.info.obs_shape} {self.info.obs_dtype}"
        )
        self.actors.start()
        if cfg.caching:
            self.prefetcher = Prefetcher(self.mixer, cfg.cache_output_buffer_size,
                                         pin_memory=self.device.type == "cuda")
        last_ckpt, last_check = self.counters.updates, 0.0
        self._wait_since = time.perf_counter()
        while self.counters.env_steps < max_env_steps and not stop_requested():
            self.actors.grant()
            self._receive(self.actors.poll(0.0 if self._batch_ready() else 0.05))
            if time.time() - last_check >= 1.0:
                self.actors.check()
                last_check = time.time()
            if not train:
                self.mixer.release_all()
                continue
            self.mixer.set_updates(self.counters.updates)
            batch = self._next_batch()
            if batch is not None:
                self._update(batch)
            if time.time() - self._last_status[0] >= cfg.status_interval:
                self._status()
                self._wait_since = time.perf_counter()  # reporting is not waiting
            if self.counters.updates - last_ckpt >= cfg.save_model_period:
                self.save()
                last_ckpt = self.counters.updates
                self._wait_since = time.perf_counter()
        self._status()

    def _batch_ready(self) -> bool:
        if self.prefetcher is not None:
            return not self.prefetcher.batches.empty()
        return self.mixer.ready()

    def _next_batch(self) -> dict[str, torch.Tensor] | None:
        if self.prefetcher is not None:
            return self.prefetcher.get(timeout=0.0)
        return self.mixer.sample() if self.mixer.ready() else None

    def _receive(self, rollouts) -> None:
        for indices, episodes in rollouts:
            if self.first_rollout_at is None:
                self.first_rollout_at = (time.time(), self.counters.env_steps)
            for i in indices:
                self.mixer.add(i)
            self.counters.env_steps += self.cfg.r_f_steps * len(indices)
            self._record_episodes(episodes)

    def _record_episodes(self, episodes) -> None:
        now = round(self._wall(), 3)
        for ret, length in episodes:
            self.counters.episodes += 1
            self.returns.append(ret)
            self.tb.episode(ret, length, self.counters.env_steps,
                            self.counters.env_steps * self.frames_per_step)
            self.run_dir.episodes.writerow({
                "env_steps": self.counters.env_steps,
                "frames": self.counters.env_steps * self.frames_per_step,
                "episode_return": ret, "episode_length": length, "wall_time": now,
            })
            if len(self.returns) == self.returns.maxlen:
                self.best_mean_return = max(self.best_mean_return, float(np.mean(self.returns)))

    def _update(self, batch: dict[str, torch.Tensor]) -> None:
        cfg = self.cfg
        t0 = time.perf_counter()
        wait_s = t0 - self._wait_since
        lag_mean, lag_max = metrics.policy_lag(batch["version"], self.counters.updates)
        batch = {k: v.to(self.device, non_blocking=True) for k, v in batch.items()
                 if k != "features"}  # for the replays only: the loss does not read them
        lr = polynomial_lr(cfg.lr, cfg.lr_end_value,
                           self.counters.env_steps / cfg.environment_max_steps, cfg.lr_decay_power)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        loss, stats = impala_loss(self.model, batch, self.loss_cfg)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        max_norm = cfg.gradient_clip_by_norm_threshold or math.inf
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm)
        before = parameters_to_vector(self.model.parameters()).detach().clone()
        self.optimizer.step()
        self.counters.updates += 1
        self.weights.publish(self.model, self.counters.updates)
        # RMS of the parameter step in units of lr: about 1 for a normalised
        # RMSProp/Adam step, far below 1 where eps dominates the denominator
        step = parameters_to_vector(self.model.parameters()).detach() - before
        step_over_lr = float(step.pow(2).mean().sqrt()) / lr if lr > 0 else 0.0
        stats.update(lr=lr, grad_norm=float(grad_norm), step_over_lr=step_over_lr)
        self.last_stats = stats
        update_s = time.perf_counter() - t0
        self.pipeline.add_update(wait_s, update_s, lag_mean, lag_max, stats)
        self.run_dir.learner.writerow({
            "updates": self.counters.updates, "env_steps": self.counters.env_steps,
            "frames": self.counters.env_steps * self.frames_per_step,
            "fps": round(self.fps, 1), **{k: f"{v:.6g}" for k, v in stats.items()},
            "policy_lag_mean": f"{lag_mean:.4g}", "policy_lag_max": f"{lag_max:.4g}",
            "batch_wait_s": f"{wait_s:.4g}", "update_s": f"{update_s:.4g}",
            "free_slots": len(self.slots.free),
        })
        self._wait_since = time.perf_counter()

    # --- reporting -------------------------------------------------------------
    def _wall(self) -> float:
        return self._wall_at_start + time.time() - self._t_start

    def mean_return(self) -> float | None:
        return float(np.mean(self.returns)) if self.returns else None

    def mean_fps(self) -> float:
        elapsed = time.time() - self._t_start
        steps = self.counters.env_steps - self._env_steps_at_start
        return 0.0 if elapsed <= 0 else steps * self.frames_per_step / elapsed

    def summary(self) -> dict:
        c = self.counters
        best = self.best_mean_return
        return {
            "env": self.cfg.env,
            "env_steps": c.env_steps,
            "frames": c.env_steps * self.frames_per_step,
            "updates": c.updates,
            "episodes": c.episodes,
            "wall_time_s": round(self._wall(), 3),
            "mean_return_last100": self.mean_return(),
            "best_mean_return_100": None if math.isinf(best) else best,
            "fps_mean": round(self.mean_fps(), 1),
            "actor_restarts": self.actors.restarts,
        }

    def _status(self) -> None:
        now = time.time()
        t0, s0 = self._last_status
        if now > t0:
            self.fps = (self.counters.env_steps - s0) * self.frames_per_step / (now - t0)
        self._last_status = (now, self.counters.env_steps)
        c = self.counters
        mean = self.mean_return()
        s = self.last_stats
        lag = self.pipeline.lag()
        losses = (f"pg {s['policy_loss']:+.3f} v {s['value_loss']:.3f} ent {s['entropy']:.3f}"
                  if s else "no update yet")
        bar, eta = metrics.progress(c.env_steps, self._max_env_steps,
                            (self.fps or self.mean_fps()) / self.frames_per_step,
                            sys.stdout.isatty())
        self.log.info(
            f"{bar}frames {c.env_steps * self.frames_per_step:,} | env steps {c.env_steps:,} | "
            f"fps {self.fps:,.0f} (mean {self.mean_fps():,.0f}) | updates {c.updates:,} | "
            f"return(100) {'n/a' if mean is None else f'{mean:.2f}'} "
            f"[{c.episodes} episodes] | {losses} | "
            f"lag {'n/a' if lag is None else f'{lag:.1f}'} | ETA {eta}"
        )
        self._write_scalars(now - t0)
        self.run_dir.flush()
        self.run_dir.write_summary(self.summary())

    def _write_scalars(self, interval_s: float) -> None:
        """The status interval's TensorBoard scalars, at the current env steps; flushed."""
        mean = self.mean_return()
        self.pipeline.add_actor_times(self.actors.take_actor_seconds())
        values = {"perf/fps": self.fps, "perf/fps_mean": self.mean_fps(),
                  "charts/episodes": float(self.counters.episodes),
                  **self.pipeline.scalars(interval_s),
                  **metrics.replay_scalars(self.mixer.replays, len(self.slots.free)),
                  **self.system.sample(os.getpid(), self.actors.pids())}
        if mean is not None:
            values["charts/mean_return_100"] = mean
        self.tb.scalars(values, self.counters.env_steps)
        self.tb.flush()

    def save(self) -> str:
        """An atomic checkpoint; returns the path of `checkpoint.pt`."""
        self.counters.wall_time = self._wall()
        best = self.best_mean_return
        return save_checkpoint(self.run_dir.path, self.counters.updates, {
            "config": self.cfg.to_dict(),
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "counters": dataclasses.asdict(self.counters),
            "recent_returns": list(self.returns),
            "best_mean_return_100": None if math.isinf(best) else best,
            "rng": {"torch": torch.get_rng_state(), "numpy": np.random.get_state(),
                    "python": random.getstate()},
            "replays": self.mixer.state_dict(include_data=self.cfg.checkpoint_replay),
            "env_info": dataclasses.asdict(self.info),
        }, keep=self.cfg.keep_checkpoints)

    # --- shutdown --------------------------------------------------------------
    def close(self) -> None:
        """Stop and join every actor; record the episodes they finished meanwhile."""
        if self.prefetcher is not None:
            self.prefetcher.close()
        for indices, episodes in self.actors.close():
            self.slots.release(indices)
            self._record_episodes(episodes)
        self.mixer.release_all()
        self.tb.close()
