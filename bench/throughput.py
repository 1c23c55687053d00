"""Throughput of the pipeline against its parts, in one run, as JSON.

    python -m bench.throughput [--env=PongNoFrameskip-v4] [--steps=40000] [--repeats=1]
                               [--backend=ray] [--use_lstm] [--precision=bf16]

Measured on the same env with the same worker_count x envs_per_worker, each
using the whole machine, all in frames/s (env steps x frameskip):
    env_ceiling_fps  worker_count processes stepping the raw batched envs (random actions:
                     uniform, or N(0, 1) per dimension of a Box, clipped by the env)
    pipeline_fps     the real actors (random policy) through slots and queues; the
                     learner frees every rollout's slot unread (no batch, no update)
    train_fps        full training with the default model
    inference_fps    worker_count processes (one torch thread each) running the actor's
                     batched forward pass on envs_per_worker observations
    learner_fps      the learner's step alone (`training.factory.make_agent`'s `update`,
                     as training takes it) on synthetic batches [T+1, B, ...]
    compute_bound_fps  1 / (1/env + 1/inference + 1/learner): what full training could
                     reach if the machine did nothing but these three, one after another
    train_fps_policies  with --num_policies=K: full training of K policies of the default
                     agent on the same actors (actor i acts for policy i mod K); with
                     policies_over_one = train_fps_policies / train_fps, and the main
                     process's (the learners') share of the machine's CPU in each
                     (learner_cpu_share, learner_cpu_share_policies)
    learner_fps_impala, train_fps_impala  the same two with --agent=impala and its
                     defaults (on Atari: T=20, batch 8, RMSProp, normalised inputs and
                     returns), measured back to back with the above
    pipeline_fps_ray, train_fps_ray  with --backend=ray: the same two with the actors on
                     a local Ray instance (ray_bytes_per_env_rollout: what one env's
                     rollout costs through the object store; in training,
                     ray_bytes_per_weights and ray_weights_per_s: the parameters put
                     into it, which each actor node fetches), and their ratios to local
and the ratios pipeline_over_ceiling, train_over_ceiling and train_over_bound.
Start-up (process spawn, imports) is excluded: rates are taken from the first
rollout received, or after a warm-up.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

# as main.py runs training: OpenMP threads that sleep at a region's end, not spin (set
# before torch is imported; the user's own value wins). Spinning, this benchmark read
# Pong's training 11-12% slower than main.py trains (design notes: where a 2-core run
# spends its CPU).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np  # noqa: E402
import psutil  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from option_flags import default_values  # noqa: E402
from training.config import Config, make_config, resolve_device  # noqa: E402
from training.factory import build_driver, make_agent  # noqa: E402
from training.plan import make_plan  # noqa: E402
from training.policies import policy_configs  # noqa: E402
from training.run_dir import RunDir  # noqa: E402
from training.session import population_preflight  # noqa: E402
from workers.actor import ModelPolicy, RandomPolicy  # noqa: E402
from wrappers.envs import env_info, make_batched_env  # noqa: E402


def random_actions(rng: np.random.Generator, kind: str, num_actions: int, n: int) -> np.ndarray:
    """n random actions: int64 [n] uniform over the discrete actions, or float32
    [n, A] N(0, 1) (a fresh Gaussian policy's) for a Box."""
    if kind == "discrete":
        return rng.integers(0, num_actions, size=n)
    return rng.standard_normal((n, num_actions), dtype=np.float32)


def _raw_env_worker(env_id, options, n_envs, seconds, seed, out):
    import torch

    torch.set_num_threads(1)
    env = make_batched_env(env_id, n_envs, options, seed)
    env.reset()
    rng = np.random.default_rng(seed)
    for _ in range(50):  # warm-up
        env.step(random_actions(rng, env.action_kind, env.num_actions, n_envs))
    steps, t0 = 0, time.time()
    while time.time() - t0 < seconds:
        env.step(random_actions(rng, env.action_kind, env.num_actions, n_envs))
        steps += n_envs
    out.put((steps, time.time() - t0))
    env.close()


def env_ceiling_fps(cfg: Config, info, seconds: float) -> float:
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [
        ctx.Process(
            target=_raw_env_worker,
            args=(cfg.env, cfg.env_options(), cfg.envs_per_worker, seconds, i, out),
        )
        for i in range(cfg.worker_count)
    ]
    for p in procs:
        p.start()
    results = [out.get(timeout=seconds + 120) for _ in procs]
    for p in procs:
        p.join()
    return sum(s / t for s, t in results) * info.frames_per_step


def _inference_worker(spec, obs_dtype, n_envs, seconds, out):
    import torch

    from agents.networks import step_model

    torch.set_num_threads(1)
    model = spec.build().eval()
    obs_shape = spec.obs_shape
    dtype = torch.uint8 if obs_dtype == "uint8" else torch.float32
    obs = (torch.randint(0, 255, (n_envs, *obs_shape)) if dtype == torch.uint8
           else torch.randn(n_envs, *obs_shape)).to(dtype)
    state, starts = model.initial_state(n_envs), torch.zeros(n_envs, dtype=torch.bool)
    with torch.inference_mode():
        for _ in range(5):
            step_model(model, obs, state, starts)
        calls, t0 = 0, time.time()
        while time.time() - t0 < seconds:
            logits, _, _, state = step_model(model, obs, state, starts)
            model.distribution(logits).sample()
            calls += 1
    out.put((calls * n_envs, time.time() - t0))


def inference_fps(cfg: Config, info, seconds: float) -> float:
    """Actor inference alone, in worker_count processes, frames/s."""
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_inference_worker,
                         args=(cfg.model_spec(info), info.obs_dtype, cfg.envs_per_worker,
                               seconds, out))
             for _ in range(cfg.worker_count)]
    for p in procs:
        p.start()
    results = [out.get(timeout=seconds + 120) for _ in procs]
    for p in procs:
        p.join()
    return sum(s / t for s, t in results) * info.frames_per_step


def synthetic_batch(cfg: Config, info, device) -> dict:
    """A batch [T+1, B, ...] of random observations, actions and rewards for `cfg`'s
    model on `info`'s env, on `device` (what the learner's step is timed on)."""
    import torch

    t1, b = cfg.r_f_steps + 1, cfg.batch_size
    obs = torch.randint(0, 255, (t1, b, *info.obs_shape), dtype=torch.uint8) \
        if info.obs_dtype == "uint8" else torch.randn(t1, b, *info.obs_shape)
    rng = np.random.default_rng(0)
    action = torch.from_numpy(random_actions(rng, info.action_kind, info.num_actions, t1 * b))
    batch = {"obs": obs, "action": action.view(t1, b, *action.shape[1:]),
             "logits": torch.randn(t1, b, cfg.model_spec(info).param_size),
             "value": torch.zeros(t1, b),
             "reward": torch.randn(t1, b), "done": torch.zeros(t1, b, dtype=torch.bool),
             "truncated": torch.zeros(t1, b, dtype=torch.bool),
             "bootstrap_value": torch.zeros(t1, b)}
    state_shape = cfg.model_spec(info).state_shape
    if state_shape:
        batch["core_state"] = torch.zeros(t1, b, *state_shape)
    return {k: v.to(device) for k, v in batch.items()}


def learner_alone_fps(cfg: Config, info, updates: int) -> float:
    """The training step alone on synthetic batches, with the learner's threads, frames/s."""
    import torch

    torch.set_num_threads(cfg.learner_threads)
    agent = make_agent(cfg, info)
    b = cfg.batch_size
    batch = synthetic_batch(cfg, info, agent.device)

    def sync():
        if agent.device.type == "cuda":
            torch.cuda.synchronize()

    for _ in range(3):
        agent.update(batch, 0.0)
    sync()
    t0 = time.time()
    for k in range(updates):
        agent.update(batch, k / updates)
    sync()
    return updates * cfg.r_f_steps * b * info.frames_per_step / (time.time() - t0)


class DiscardingMixer:
    """Takes the place of the batch mixer in the pipeline measurement: every rollout's
    slot is freed unread and no batch is ever ready, so the learner only moves slots."""

    def __init__(self, mixer):
        self.pool, self.replays = mixer.pool, mixer.replays

    def add(self, index: int) -> None:
        self.pool.release([index])

    def ready(self) -> bool:
        return False

    def set_updates(self, updates: int) -> None:
        pass

    def release_all(self) -> int:
        return 0


def learner_fps(cfg: Config, info, steps: int, train: bool, wire: dict | None = None,
                policies: list[Config] | None = None, usage: dict | None = None) -> float:
    """Frames/s of a run from its first rollout: training (`train`), or random actors
    with the batches discarded. `wire`, with --backend=ray, receives the rollout bytes
    and rollouts taken from Ray's object store; `policies`: several policies' configs
    (--num_policies); `usage` receives the main process's share of the machine's CPU
    over the run ("cpu_share")."""
    with tempfile.TemporaryDirectory() as tmp:
        run = RunDir(tmp, cfg.env, cfg.to_dict(), echo=False, files=policies is None)
        plan = make_plan(cfg, info) if policies is None else \
            population_preflight(policies, None)[0]
        driver = build_driver(cfg, plan, run, policy=ModelPolicy if train else RandomPolicy,
                              policies=policies)
        assert driver.evaluator is None, "the rates must not wait for evaluations"
        me, wall0 = psutil.Process(), time.time()
        cpu0 = sum(me.cpu_times()[:2])
        if not train:  # every slot freed unread: no input statistics, no batch
            for learner in driver.learners:
                learner.mixer = DiscardingMixer(learner.mixer)
                learner.receive = lambda rollout, mixer=learner.mixer: [
                    mixer.add(i) for i in rollout.indices]
        try:
            driver.run(max_env_steps=steps)
            t_end, steps_end = time.time(), driver.counters.env_steps
            if usage is not None:
                usage["cpu_share"] = (sum(me.cpu_times()[:2]) - cpu0) / (
                    (t_end - wall0) * (os.cpu_count() or 1))
            if wire is not None:
                weights = driver.actors.weights
                wire.update(bytes=driver.actors.bytes_total,
                            rollouts=driver.actors.rollouts_total, weight_puts=weights.puts,
                            weight_bytes=weights.bytes_put,
                            seconds=t_end - driver.report.first_rollout_at[0])
        finally:
            driver.close()
            run.close()
        t0, s0 = driver.report.first_rollout_at
        return (steps_end - s0) * driver.info.frames_per_step / (t_end - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--env", default="PongNoFrameskip-v4")
    ap.add_argument("--steps", type=int, default=40_000, help="env steps per measurement")
    ap.add_argument("--seconds", type=float, default=15.0, help="raw env measurement time")
    ap.add_argument("--worker_count", type=int, default=None)
    ap.add_argument("--envs_per_worker", type=int, default=None)
    ap.add_argument("--repeats", type=int, default=1, help="runs; medians are reported")
    ap.add_argument("--learner_threads", type=int, default=None,
                    help="torch threads of the learner (default: main.py's auto)")
    ap.add_argument("--learner_updates", type=int, default=20,
                    help="updates timed for learner_fps")
    ap.add_argument("--use_lstm", action="store_true",
                    help="every measurement with main.py's --use_lstm (its --lstm_size)")
    ap.add_argument("--num_policies", type=int, default=1,
                    help="K > 1: also train_fps_policies, K policies on the same actors")
    ap.add_argument("--only_train", action="store_true",
                    help="measure train_fps (and train_fps_policies) alone")
    ap.add_argument("--precision", choices=("auto", "fp32", "bf16"), default="auto",
                    help="main.py's --precision for every measurement")
    ap.add_argument("--backend", choices=("local", "ray"), default="local",
                    help="ray: also pipeline_fps_ray and train_fps_ray, actors on a local "
                         "Ray instance, and their ratios to the local figures")
    args = ap.parse_args()
    values = default_values(
        env=args.env,
        environment_max_steps=10**9,
        worker_count=args.worker_count,
        envs_per_worker=args.envs_per_worker,
        learner_threads=args.learner_threads,
        save_model_period=10**9,
        status_interval=1e9,
        # no evaluator: the run's end would wait for an evaluation of the final policy
        # (10 whole games), counted as training time; Sample Factory's rate has none
        eval_interval=0,
        use_lstm=args.use_lstm or None,
        precision=args.precision,
    )
    cfg, errors = make_config(values)
    cfg_impala, errors_impala = make_config({**values, "agent": "impala"})
    if errors or errors_impala:
        sys.exit("\n".join(errors + errors_impala))
    info = env_info(cfg.env, cfg.env_options())
    policies = None
    if args.num_policies > 1:
        many = {**values, "num_policies": args.num_policies}
        cfg_many, errors = make_config(many)
        policies, more = policy_configs(many, set(), cfg_many) if cfg_many else ([], [])
        if errors or more:
            sys.exit("\n".join(errors + more))
    runs = []
    for _ in range(args.repeats):
        run = {}
        if args.only_train or policies:
            one, many_usage = {}, {}
            run["train_fps"] = learner_fps(cfg, info, args.steps, train=True, usage=one)
            run["learner_cpu_share"] = one["cpu_share"]
            if policies:
                run["train_fps_policies"] = learner_fps(policies[0], info, args.steps,
                                                        train=True, policies=policies,
                                                        usage=many_usage)
                run["learner_cpu_share_policies"] = many_usage["cpu_share"]
                run["policies_over_one"] = run["train_fps_policies"] / run["train_fps"]
        if args.only_train:
            runs.append(run)
            continue
        run.update({
            "env_ceiling_fps": env_ceiling_fps(cfg, info, args.seconds),
            "inference_fps": inference_fps(cfg, info, args.seconds),
            "learner_fps": learner_alone_fps(cfg, info, args.learner_updates),
            "pipeline_fps": learner_fps(cfg, info, args.steps, train=False),
            "learner_fps_impala": learner_alone_fps(cfg_impala, info, args.learner_updates),
            "train_fps_impala": learner_fps(cfg_impala, info, args.steps, train=True)})
        if "train_fps" not in run:  # unless measured above, beside the policies' run
            run["train_fps"] = learner_fps(cfg, info, args.steps, train=True)
        run["compute_bound_fps"] = 1.0 / sum(1.0 / run[k] for k in
                                             ("env_ceiling_fps", "inference_fps", "learner_fps"))
        if args.backend == "ray":
            cfg_ray, _ = make_config({**values, "backend": "ray"})
            wire: dict = {}
            run["pipeline_fps_ray"] = learner_fps(cfg_ray, info, args.steps, train=False,
                                                  wire=wire)
            run["ray_bytes_per_env_rollout"] = wire["bytes"] / max(
                1, wire["rollouts"] * cfg.envs_per_worker)
            trained: dict = {}
            run["train_fps_ray"] = learner_fps(cfg_ray, info, args.steps, train=True,
                                               wire=trained)
            run["ray_bytes_per_weights"] = trained["weight_bytes"] / max(1, trained["weight_puts"])
            run["ray_weights_per_s"] = trained["weight_puts"] / trained["seconds"]
        runs.append(run)
    result = {k: round(statistics.median(r[k] for r in runs), 1 if k.endswith("fps") else 3)
              for k in runs[0]}
    if args.only_train:
        print(json.dumps({**result, "env": cfg.env, "agent": cfg.agent,
                          "num_policies": args.num_policies, "precision": args.precision,
                          "worker_count": cfg.worker_count,
                          "envs_per_worker": cfg.envs_per_worker, "repeats": args.repeats,
                          "runs": runs, "cpu_count": os.cpu_count()}, indent=2))
        return
    result.update(
        pipeline_over_ceiling=round(result["pipeline_fps"] / result["env_ceiling_fps"], 3),
        train_over_ceiling=round(result["train_fps"] / result["env_ceiling_fps"], 3),
        train_over_bound=round(result["train_fps"] / result["compute_bound_fps"], 3),
        **({"pipeline_ray_over_local": round(result["pipeline_fps_ray"]
                                             / result["pipeline_fps"], 3),
            "train_ray_over_local": round(result["train_fps_ray"] / result["train_fps"], 3)}
           if args.backend == "ray" else {}),
        device=str(resolve_device(cfg.device)),
        train_fps_per_core=round(result["train_fps"] / (os.cpu_count() or 1), 1),
        env=cfg.env,
        worker_count=cfg.worker_count,
        envs_per_worker=cfg.envs_per_worker,
        agent=cfg.agent,
        use_lstm=cfg.use_lstm,
        batch_size=cfg.batch_size,
        r_f_steps=cfg.r_f_steps,
        learner_threads=cfg.learner_threads,
        train_over_impala=round(result["train_fps"] / result["train_fps_impala"], 3),
        repeats=args.repeats,
        runs=[{k: round(v, 1) for k, v in r.items()} for r in runs],
        cpu_count=os.cpu_count(),
    )
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
