"""The learner: start the actors, turn their rollouts into batches, train, log.

Runs in the main process. One iteration: move every finished rollout from the
full queue into the replays, sample a batch when the replays are ready, take one
IMPALA step, publish the new weights, record finished episodes. A status line
goes out every `status_interval` seconds, a checkpoint every `save_model_period`
updates and at the end. Counting: an env step is one agent decision of one env;
frames = env steps x frameskip (1 outside Atari).
"""

from __future__ import annotations

import collections
import dataclasses
import math
import queue
import time

import numpy as np
import torch
import torch.multiprocessing as mp

from agents.impala import LossConfig, build_optimizer, impala_loss, polynomial_lr
from agents.networks import build_model
from replay.config import build_replays, parse_replay_parameters
from replay.mixer import BatchMixer
from training.checkpoint import save_checkpoint
from training.run_dir import RunDir
from workers.actor import ActorConfig, run_actor
from workers.slots import SlotPool, rollout_spec
from workers.weights import SharedWeights
from wrappers.envs import EnvOptions, env_info


class ActorFailure(RuntimeError):
    pass


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
    )


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(name)


def slot_count(cfg) -> int:
    """Rollout slots: two per env (one written, one waiting) and two batches' worth."""
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
        if checkpoint is not None:
            self.model.load_state_dict(checkpoint["model"])
            self.optimizer.load_state_dict(checkpoint["optimizer"])
            self.counters = Counters(**checkpoint["counters"])
        self.loss_cfg = loss_config(cfg)
        self.returns = collections.deque(maxlen=100)
        self.best_mean_return = -math.inf
        self.last_stats: dict[str, float] = {}
        self.random_policy = random_policy
        self._t_start = time.time()
        self._wall_at_start = self.counters.wall_time
        self._env_steps_at_start = self.counters.env_steps
        self.fps = 0.0
        self.first_rollout_at: tuple[float, int] | None = None  # (time, env steps before)
        self._last_actor_check = 0.0

        ctx = mp.get_context("spawn")
        spec = rollout_spec(
            cfg.r_f_steps, self.info.obs_shape, self.info.obs_dtype, self.info.num_actions
        )
        self.pool = SlotPool(spec, num_slots=slot_count(cfg), ctx=ctx)
        entries, _ = parse_replay_parameters(cfg.replay_parameters, cfg.batch_size)
        replays, ratios = build_replays(entries, self.pool)
        self.mixer = BatchMixer(self.pool, replays, ratios, cfg.batch_size)
        cpu_model = build_model(self.info.obs_shape, self.info.num_actions, cfg.hidden_size)
        cpu_model.load_state_dict(self.model.state_dict())
        self.weights = SharedWeights(cpu_model, ctx)
        self.weights.publish(self.model, self.counters.updates)
        self.events = ctx.Queue()
        self.stop = ctx.Event()
        actor_cfg = ActorConfig(
            env_id=cfg.env,
            env_options=env_options(cfg.to_dict()),
            envs_per_worker=cfg.envs_per_worker,
            unroll_length=cfg.r_f_steps,
            obs_shape=self.info.obs_shape,
            num_actions=self.info.num_actions,
            hidden_size=cfg.hidden_size,
            seed=cfg.seed + 1,
            random_policy=random_policy,
        )
        self.actors = [
            ctx.Process(
                target=run_actor,
                name=f"actor-{i}",
                daemon=True,
                args=(i, actor_cfg, self.pool, self.weights, self.events, self.stop),
            )
            for i in range(cfg.worker_count)
        ]

    # --- the loop --------------------------------------------------------------
    def run(self, max_env_steps: int | None = None, train: bool = True) -> None:
        """Train until `max_env_steps` (default: the config's) env steps were received."""
        cfg = self.cfg
        max_env_steps = max_env_steps or cfg.environment_max_steps
        for p in self.actors:
            p.start()
        self.log.info(
            f"run directory {self.run_dir.path}: {cfg.env}, {cfg.worker_count} actors x "
            f"{cfg.envs_per_worker} envs, T={cfg.r_f_steps}, batch {cfg.batch_size}, "
            f"device {self.device}, obs {self.info.obs_shape} {self.info.obs_dtype}"
        )
        self._t_start = time.time()
        self._env_steps_at_start = self.counters.env_steps
        self._last_status = (time.time(), self.counters.env_steps)
        last_ckpt = self.counters.updates
        while self.counters.env_steps < max_env_steps:
            self._drain_full(block=not self.mixer.ready())
            self._drain_events()
            if time.time() - self._last_actor_check >= 1.0:
                self._check_actors()
            if self.mixer.ready():
                batch = self.mixer.sample()
                if train:
                    self._update(batch)
            if time.time() - self._last_status[0] >= cfg.status_interval:
                self._status()
            if self.counters.updates - last_ckpt >= cfg.save_model_period:
                self.save()
                last_ckpt = self.counters.updates
        self._drain_events()
        self._status()

    def _drain_full(self, block: bool) -> bool:
        got = False
        while True:
            try:
                indices = (
                    self.pool.full.get(timeout=0.05)
                    if block and not got
                    else self.pool.full.get_nowait()
                )
            except queue.Empty:
                return got
            if not got and self.first_rollout_at is None:
                self.first_rollout_at = (time.time(), self.counters.env_steps)
            got = True
            for i in indices:
                self.mixer.add(i)
            self.counters.env_steps += self.cfg.r_f_steps * len(indices)

    def _drain_events(self) -> None:
        while True:
            try:
                kind, actor_id, payload = self.events.get_nowait()
            except queue.Empty:
                return
            if kind == "error":
                raise ActorFailure(f"actor {actor_id} failed:\n{payload}")
            now = self._wall()
            for ret, length in payload:
                self.counters.episodes += 1
                self.returns.append(ret)
                self.run_dir.episodes.writerow(
                    [
                        self.counters.env_steps,
                        self.counters.env_steps * self.frames_per_step,
                        ret,
                        length,
                        round(now, 3),
                    ]
                )
            if len(self.returns) == self.returns.maxlen:
                self.best_mean_return = max(self.best_mean_return, float(np.mean(self.returns)))

    def _check_actors(self) -> None:
        self._last_actor_check = time.time()
        for p in self.actors:
            if p.exitcode is not None:
                self._drain_events()  # an error report explains the exit, if there is one
                raise ActorFailure(f"{p.name} exited with code {p.exitcode}")

    def _update(self, batch: dict[str, torch.Tensor]) -> None:
        cfg = self.cfg
        batch = {k: v.to(self.device, non_blocking=True) for k, v in batch.items()}
        lr = polynomial_lr(
            cfg.lr,
            cfg.lr_end_value,
            self.counters.env_steps / cfg.environment_max_steps,
            cfg.lr_decay_power,
        )
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        loss, stats = impala_loss(self.model, batch, self.loss_cfg)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        max_norm = cfg.gradient_clip_by_norm_threshold or math.inf
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm)
        self.optimizer.step()
        self.counters.updates += 1
        self.weights.publish(self.model, self.counters.updates)
        stats.update(lr=lr, grad_norm=float(grad_norm))
        self.last_stats = stats
        self.run_dir.learner.writerow(
            {
                "updates": self.counters.updates,
                "env_steps": self.counters.env_steps,
                "frames": self.counters.env_steps * self.frames_per_step,
                "fps": round(self.fps, 1),
                **{k: f"{v:.6g}" for k, v in stats.items()},
            }
        )

    # --- reporting -------------------------------------------------------------
    def _wall(self) -> float:
        return self._wall_at_start + time.time() - self._t_start

    def mean_return(self) -> float | None:
        return float(np.mean(self.returns)) if self.returns else None

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
        }

    def mean_fps(self) -> float:
        elapsed = time.time() - self._t_start
        steps = self.counters.env_steps - self._env_steps_at_start
        return 0.0 if elapsed <= 0 else steps * self.frames_per_step / elapsed

    def _status(self) -> None:
        now = time.time()
        t0, s0 = self._last_status
        if now > t0:
            self.fps = (self.counters.env_steps - s0) * self.frames_per_step / (now - t0)
        self._last_status = (now, self.counters.env_steps)
        c = self.counters
        mean = self.mean_return()
        s = self.last_stats
        losses = (
            f"pg {s['policy_loss']:+.3f} v {s['value_loss']:.3f} ent {s['entropy']:.3f}"
            if s
            else "no update yet"
        )
        self.log.info(
            f"frames {c.env_steps * self.frames_per_step:,} | env steps {c.env_steps:,} | "
            f"fps {self.fps:,.0f} (mean {self.mean_fps():,.0f}) | updates {c.updates:,} | "
            f"return(100) {'n/a' if mean is None else f'{mean:.2f}'} "
            f"[{c.episodes} episodes] | {losses}"
        )
        self.run_dir.flush()
        self.run_dir.write_summary(self.summary())

    def save(self) -> str:
        self.counters.wall_time = self._wall()
        path = self.run_dir.file("checkpoint.pt")
        save_checkpoint(
            path,
            {
                "config": self.cfg.to_dict(),
                "model": self.model.state_dict(),
                "optimizer": self.optimizer.state_dict(),
                "counters": dataclasses.asdict(self.counters),
                "rng": {"torch": torch.get_rng_state(), "numpy": np.random.get_state()},
                "env_info": dataclasses.asdict(self.info),
            },
        )
        return path

    # --- shutdown --------------------------------------------------------------
    def close(self, timeout: float = 10.0) -> None:
        """Stop and join every actor, record their last episodes, close the queues.

        The queues are drained while waiting: a child cannot exit while its queue
        feeder thread is blocked on a full pipe.
        """
        self.stop.set()
        deadline = time.time() + timeout
        for p in self.actors:
            if p.pid is None:
                continue
            while p.is_alive() and time.time() < deadline:
                self._drain_at_exit()
                p.join(timeout=0.05)
            if p.is_alive():
                p.kill()
                p.join(timeout=5)
        self._drain_at_exit()
        # Nobody reads `free` any more: do not wait for its feeder to flush.
        self.pool.free.cancel_join_thread()
        for q in (self.pool.free, self.pool.full, self.events):
            q.close()
        for q in (self.pool.full, self.events):
            q.join_thread()

    def _drain_at_exit(self) -> None:
        try:
            while True:
                self.pool.full.get_nowait()
        except queue.Empty:
            pass
        try:
            self._drain_events()
        except ActorFailure:
            pass  # the run is over; a late error report changes nothing
