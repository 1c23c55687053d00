"""Builds a run's parts from its config and plan, and wires them into a `Learner`.

The order matters: seeds and threads first; the agent (and a checkpoint's model,
optimizer, counters and RNG states); the shared-memory slots; the replays, whose
elite and attentive sampling compute features with the agent's current model; the
shared weights the actors pull; the actor pool. `make_agent` is also what the
benchmarks time, so they take the step training takes.
"""

from __future__ import annotations

import functools

import torch
import torch.multiprocessing as mp

from agents.agent import Agent, OptimConfig
from agents.impact import ImpactAgent
from agents.impala import ImpalaAgent
from agents.networks import policy_features
from agents.ppo import PPOAgent, PPOConfig
from replay.config import match_saved_states, parse_replay_parameters
from replay.mixer import BatchMixer, build_replays
from training.checkpoint import restore_rng
from training.config import Config, resolve_device
from training.learner import Learner
from training.plan import RunPlan
from training.report import Report
from training.run_dir import RunDir
from workers.actor import ActorConfig, ModelPolicy
from workers.evaluator import MAX_DUTY, EvalConfig, Evaluator
from workers.pool import ActorPool
from workers.serial_pool import SerialActorPool
from workers.slots import SlotPool
from workers.weights import SharedWeights
from wrappers.envs import EnvInfo


def optim_config(cfg: Config) -> OptimConfig:
    return OptimConfig(optimizer=cfg.optimizer, lr=cfg.lr, lr_end_value=cfg.lr_end_value,
                       lr_decay_power=cfg.lr_decay_power, rmsprop_eps=cfg.rmsprop_eps,
                       rmsprop_alpha=cfg.rmsprop_alpha, adam_eps=cfg.adam_eps,
                       max_grad_norm=cfg.gradient_clip_by_norm_threshold)


def ppo_config(cfg: Config) -> PPOConfig:
    return PPOConfig(
        gamma=cfg.gamma, gae_lambda=cfg.gae_lambda, advantage=cfg.ppo_advantage,
        clip=cfg.ppo_clip, value_clip=cfg.ppo_value_clip, epochs=cfg.ppo_epochs,
        minibatches=cfg.ppo_minibatches, shuffle=cfg.ppo_shuffle,
        value_loss_weight=cfg.value_loss_weight,
        entropy_loss_weight=cfg.entropy_loss_weight, clip_rewards=cfg.clip_rewards,
        reward_clipping_method=cfg.reward_clipping_method, rho_const=cfg.rho_const,
        c_const=cfg.c_const, truly=cfg.agent == "truly_ppo", kl_delta=cfg.truly_ppo_delta,
        kl_alpha=cfg.truly_ppo_alpha)


def make_agent(cfg: Config, info: EnvInfo) -> Agent:
    """The `--agent` of `cfg` for `info`'s observations and actions."""
    model = cfg.model_spec(info).build()
    if model.log_std is not None:  # the actors get it with the first weights
        torch.nn.init.constant_(model.log_std, cfg.log_std_init)
    device = resolve_device(cfg.device)
    if cfg.agent == "impala":
        return ImpalaAgent(model, cfg.loss_config(), optim_config(cfg), device)
    if cfg.agent == "impact":
        return ImpactAgent(model, ppo_config(cfg), optim_config(cfg), device, seed=cfg.seed,
                           target_update=cfg.impact_target_update)
    return PPOAgent(model, ppo_config(cfg), optim_config(cfg), device, seed=cfg.seed)


def actor_config(cfg: Config, info: EnvInfo, policy: type = ModelPolicy) -> ActorConfig:
    return ActorConfig(
        env_id=cfg.env, env_options=cfg.env_options(), envs_per_worker=cfg.envs_per_worker,
        unroll_length=cfg.r_f_steps, model=cfg.model_spec(info), seed=cfg.seed + 1,
        policy=policy, store_features=cfg.store_features,
        reward_scale_gamma=cfg.gamma if cfg.scale_rewards else None)


def restore_replays(mixer: BatchMixer, cfg: Config, checkpoint: dict) -> list[str]:
    """Give each replay the checkpoint's state it continues from
    (`replay.config.match_saved_states`), or leave it empty; returns a log line per
    replay saying which. `--replay_parameters` may change on a resume: an entry whose
    state does not fit (another kind, capacity, --r_f_steps with stored rollouts, or a
    stored layout that changed with --worker_count) starts empty; nothing is refused."""
    saved_cfg = checkpoint["config"]
    saved, errors = parse_replay_parameters(
        saved_cfg.get("replay_parameters", cfg.replay_parameters), 0)
    matches = match_saved_states([] if errors else saved, checkpoint.get("replays", []),
                                 list(cfg.replay_specs),
                                 same_unroll=saved_cfg.get("r_f_steps") == cfg.r_f_steps)
    problems = mixer.restore([state for state, _ in matches])
    lines = []
    for i, ((_, note), problem) in enumerate(zip(matches, problems, strict=True)):
        e = cfg.replay_specs[i]
        note = f"starts empty: {problem}" if problem else note
        lines.append(f"resume: replay {i} ({e.type}, capacity {e.capacity}) {note}")
    return lines


def build_learner(cfg: Config, plan: RunPlan, run: RunDir, checkpoint: dict | None = None,
                  policy: type = ModelPolicy) -> Learner:
    """Every part of the run, restored from `checkpoint` if given. `policy` is what
    the actors act with (`workers.actor.RandomPolicy` for the pipeline benchmark)."""
    torch.manual_seed(cfg.seed)
    torch.set_num_threads(cfg.learner_threads)
    info = plan.info
    agent = make_agent(cfg, info)
    if checkpoint is not None:
        agent.load_state_dict(checkpoint)
        restore_rng(checkpoint["rng"])
    report = Report(run, cfg.env, info.frames_per_step, cfg.environment_max_steps,
                    state=checkpoint)
    if checkpoint is not None:
        report.counters.resumes += 1
    slots = SlotPool(plan.spec, num_slots=plan.num_slots)
    features = functools.partial(policy_features, agent.model, obs_shape=info.obs_shape)
    replays = build_replays(
        list(cfg.replay_specs), slots, plan.spec, cfg.r_f_steps, pixel_stack=plan.pixel_stack,
        max_chain_heads=plan.max_chain_heads, fill_in_factor=cfg.training_fill_in_factor,
        features_fn=functools.partial(features, kind="logits"),
        schedule_updates=cfg.environment_max_steps / (cfg.r_f_steps * cfg.batch_size),
        seed=cfg.seed, hidden_features_fn=functools.partial(features, kind="hidden"),
        distribution=agent.model.distribution)
    for i, r in enumerate(replays):
        if r.stored_bytes():
            size = r.stored_bytes() / 2**20
            run.log.info(f"replay {i} ({r.describe()})" + (
                "" if cfg.checkpoint_replay else
                f"; not in checkpoints (--checkpoint_replay would add up to {size:.1f} MiB)"))
    mixer = BatchMixer(slots, replays, [e.sample_ratio for e in cfg.replay_specs], cfg.batch_size)
    if checkpoint is not None:
        for line in restore_replays(mixer, cfg, checkpoint):
            run.log.info(line)
    if cfg.backend == "ray":
        from workers.ray_pool import RayActorPool, RayWeights

        weights = RayWeights(agent.model, every=cfg.ray_weights_every)
        actors = RayActorPool(actor_config(cfg, info, policy), cfg.worker_count, slots,
                              plan.spec, weights, run.log, cfg.max_actor_restarts,
                              resumes=report.counters.resumes, address=cfg.ray_address,
                              max_policy_lag=cfg.max_policy_lag, pixel_stack=plan.pixel_stack,
                              in_flight=cfg.ray_in_flight)
    elif cfg.serial:
        weights = SharedWeights(agent.model, lag=cfg.serial_policy_lag)
        actors = SerialActorPool(actor_config(cfg, info, policy), cfg.worker_count, slots,
                                 weights, run.log, resumes=report.counters.resumes)
    else:
        weights = SharedWeights(agent.model)
        actors = ActorPool(mp.get_context("spawn"), actor_config(cfg, info, policy),
                           cfg.worker_count, slots, weights, run.log, cfg.max_actor_restarts,
                           resumes=report.counters.resumes)
    weights.publish(agent.model, report.counters.updates)
    return Learner(cfg, info, agent, slots, mixer, weights, actors, report,
                   evaluator=make_evaluator(cfg, info, agent, run, report.counters.env_steps))


def make_evaluator(cfg: Config, info: EnvInfo, agent: Agent, run: RunDir, env_steps: int
                   ) -> Evaluator | None:
    """The evaluation worker of `--eval_interval` (None when 0); its first evaluation
    comes at the next multiple of the interval after `env_steps`."""
    if cfg.eval_interval <= 0:
        return None
    eval_cfg = EvalConfig(
        env_id=cfg.env, env_options=cfg.env_options(training=False),
        episodes=cfg.eval_episodes, num_envs=min(cfg.eval_episodes, cfg.envs_per_worker),
        greedy=cfg.eval_policy == "greedy", model=cfg.model_spec(info),
        seed=cfg.seed + 104_729)
    return Evaluator(mp.get_context("spawn"), eval_cfg, agent.model, cfg.eval_interval,
                     run.log, next_at=(env_steps // cfg.eval_interval + 1) * cfg.eval_interval,
                     max_duty=None if cfg.serial else MAX_DUTY)
