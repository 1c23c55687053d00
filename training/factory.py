"""Builds a run's parts from its config and plan, and wires them into a `Driver`.

The order matters: seeds and threads first; the shared-memory slots; the policy
learner (its agent, restored from a checkpoint's part for the policy; its replays,
whose elite and attentive sampling compute features with the agent's acting model;
the weights the actors pull); then the RNG states, counters and reports; the actor
pool; the observers. `make_agent` is also what the
benchmarks time, so they take the step training takes.
"""

from __future__ import annotations

import dataclasses
import functools
import os

import torch
import torch.multiprocessing as mp

from agents.agent import Agent
from agents.group import ALONE, Group
from agents.model_spec import ModelSpec
from agents.networks import policy_features
from agents.precision import choose_precision
from agents.registry import AGENTS
from replay.config import match_saved_states, parse_replay_parameters
from replay.mixer import BatchMixer, build_replays
from replay.shared import shared_entry
from replay.storage_replay import StorageReplay
from training.allocator import keep_freed_memory
from training.checkpoint import restore_rng
from training.config import Config, resolve_device
from training.driver import Driver
from training.observers import Observer, StopAtReturn, WeightSyncObserver
from training.pacer import BatchReadyPacer, PolicyPacers, ReplayRatioPacer
from training.plan import RunPlan
from training.policies import parse_weight_sync
from training.policy_learner import PolicyLearner
from training.ranks.driver import FollowerReport, GroupDriver
from training.ranks.group import GroupPacer, ProcessGroup, actor_share
from training.report import PopulationReport, Report
from training.run_dir import RunDir
from workers.actor import ActorConfig, ModelPolicy
from workers.actor_pool import ActorPoolBase, actor_seed
from workers.evaluator import EvalConfig, Evaluator, duty_cap
from workers.pool import ActorPool
from workers.serial_pool import SerialActorPool
from workers.slots import SlotPool
from workers.weights import SharedWeights
from wrappers.envs import EnvInfo, env_modules


def make_agent(cfg: Config, info: EnvInfo, device: torch.device | None = None) -> Agent:
    """The `--agent` of `cfg` (`agents/registry.py`) for `info`'s observations and
    actions, on `device` (default: --device's)."""
    entry = AGENTS[cfg.agent]
    model = entry.build_model(cfg.model_spec(info))
    if getattr(model, "log_std", None) is not None:  # the actors get it with the first weights
        torch.nn.init.constant_(model.log_std, cfg.log_std_init)
    agent = entry.cls.from_config(model, cfg, device or resolve_device(cfg.device))
    agent.autocast, agent.precision_reason = choose_precision(
        cfg.precision, agent.device, cfg.off_policy)
    return agent


def actor_config(cfg: Config, info: EnvInfo, policy: type = ModelPolicy,
                 first_actor: int = 0) -> ActorConfig:
    """The actors' config; `first_actor`: the run-wide id of the pool's actor 0 (a
    data-parallel rank's share starts there), which their seeds count from."""
    return ActorConfig(
        env_id=cfg.env, env_options=cfg.env_options(), envs_per_worker=cfg.envs_per_worker,
        unroll_length=cfg.r_f_steps, model=cfg.model_spec(info),
        seed=actor_seed(cfg.seed + 1, first_actor, 0, 0),
        policy=policy, store_features=cfg.store_features, store_final_obs=cfg.off_policy,
        random_until_trained=cfg.off_policy and cfg.learning_starts > 0,
        reward_scale_gamma=cfg.gamma if cfg.scale_rewards else None)


def restore_replays(mixer: BatchMixer, cfg: Config, saved_cfg: dict, states: list[dict]
                    ) -> list[str]:
    """Give each replay the checkpoint's state it continues from
    (`replay.config.match_saved_states`), or leave it empty; returns a log line per
    replay saying which. `--replay_parameters` may change on a resume: an entry whose
    state does not fit (another kind, capacity, --r_f_steps with stored rollouts, or a
    stored layout that changed with --worker_count) starts empty; nothing is refused."""
    saved, errors = parse_replay_parameters(
        saved_cfg.get("replay_parameters", cfg.replay_parameters), 0)
    matches = match_saved_states([] if errors else saved, states,
                                 list(cfg.replay_specs),
                                 same_unroll=saved_cfg.get("r_f_steps") == cfg.r_f_steps)
    problems = mixer.restore([state for state, _ in matches])
    lines = []
    for i, ((_, note), problem) in enumerate(zip(matches, problems, strict=True)):
        e = cfg.replay_specs[i]
        note = f"starts empty: {problem}" if problem else note
        lines.append(f"resume: replay {i} ({e.type}, capacity {e.capacity}) {note}")
    return lines


def build_policy_learner(policy_id: int, cfg: Config, plan: RunPlan, run: RunDir,
                         slots: SlotPool, weights_for, checkpoint: dict | None,
                         group: Group = ALONE, shared: StorageReplay | None = None
                         ) -> PolicyLearner:
    """Policy `policy_id`'s agent, replays and weights (`weights_for(acting_model)`
    makes the weights), restored from its part of `checkpoint` if given; the agent
    trains with `group` (data-parallel ranks: rank 0's weights, its replays those of
    the checkpoint's rank of the same number); its standard replays are views of
    `shared` if given (--share_experience)."""
    info = plan.info
    device = group.device if group.size > 1 else policy_device(cfg, policy_id)
    agent = make_agent(cfg, info, device)
    if group.rank == 0:
        run.log.info(agent.precision_reason if cfg.num_policies == 1 else
                     f"policy {policy_id}: {agent.precision_reason}")
    saved = None if checkpoint is None else checkpoint["policies"][policy_id]
    if saved is not None:
        agent.load_state_dict(saved["agent"])
    if group.size > 1:
        agent.group = group
        group.broadcast_module(agent.model)
    model = agent.acting_model
    features = functools.partial(policy_features, model, obs_shape=info.obs_shape)
    replays = build_replays(
        list(cfg.replay_specs), slots, plan.spec, cfg.r_f_steps, pixel_stack=plan.pixel_stack,
        max_chain_heads=plan.max_chain_heads, fill_in_factor=cfg.training_fill_in_factor,
        features_fn=functools.partial(features, kind="logits"),
        schedule_updates=cfg.environment_max_steps * cfg.replay_ratio if cfg.off_policy else
        cfg.environment_max_steps / (cfg.r_f_steps * cfg.batch_size),
        seed=cfg.seed + 7919 * group.rank,
        hidden_features_fn=functools.partial(features, kind="hidden"),
        distribution=model.distribution, shared=shared)
    for i, r in enumerate(replays):
        if r.stored_bytes():
            size = r.stored_bytes() / 2**20
            run.log.info(f"replay {i} ({r.describe()})" + (
                "" if cfg.checkpoint_replay else
                f"; not in checkpoints (--checkpoint_replay would add up to {size:.1f} MiB)"))
    mixer = BatchMixer(slots, replays, [e.sample_ratio for e in cfg.replay_specs], cfg.batch_size)
    if saved is not None:
        by_rank = [saved["replays"], *saved.get("rank_replays", [])]
        if group.rank == 0 and len(by_rank) > group.size:
            run.log.info(f"resume: the checkpoint holds the replays of {len(by_rank)} learners; "
                         f"those of ranks {group.size}..{len(by_rank) - 1} have no learner now "
                         "and are dropped")
        if group.rank < len(by_rank):
            for line in restore_replays(mixer, cfg, saved.get("config", checkpoint["config"]),
                                        by_rank[group.rank]):
                run.log.info(line)
        else:
            run.log.info(f"resume: the replays of learner rank {group.rank} start empty: the "
                         f"checkpoint holds those of {len(by_rank)} learner(s)")
    # a checkpoint of format 1 had one policy, whose updates were the run's
    updates = 0 if saved is None else saved.get("updates", checkpoint["counters"]["updates"])
    return PolicyLearner(policy_id, agent, mixer, weights_for(model), updates, cfg)


def policy_device(cfg: Config, policy_id: int) -> torch.device:
    """Policy `policy_id`'s device: --device's; on CUDA (no index given) with several
    policies, GPU policy_id mod the GPU count (Sample Factory's placement)."""
    device = resolve_device(cfg.device)
    if device.type != "cuda" or cfg.num_policies == 1 or device.index is not None:
        return device
    return torch.device("cuda", policy_id % torch.cuda.device_count())


def build_driver(cfg: Config, plan: RunPlan, run: RunDir, checkpoint: dict | None = None,
                 policy: type = ModelPolicy, group: ProcessGroup | None = None,
                 policies: list[Config] | None = None) -> Driver:
    """Every part of the run, restored from `checkpoint` if given. `policy` is what
    the actors act with (`workers.actor.RandomPolicy` for the pipeline benchmark).
    With `group`, the parts of one data-parallel rank (training/ranks/group.py):
    its share of the actors; the files, evaluator and observers are rank 0's. With
    `policies` (--num_policies > 1: each policy's config, training/policies.py), a
    learner, folder and pacer per policy, and actor i acting for policy i mod K."""
    policies = policies or [cfg]
    torch.manual_seed(cfg.seed)
    torch.set_num_threads(cfg.learner_threads)
    if not cfg.serial:  # the serial mode's actors step in this process: they keep glibc's
        keep_freed_memory()  # defaults, as actor processes do (training/allocator.py)
    info = plan.info
    slots = SlotPool(plan.spec, num_slots=plan.num_slots)
    if cfg.backend == "ray":
        from workers.ray_actor import RayWeights

        def weights_for(model):
            return RayWeights(model, every=cfg.ray_weights_every)
    else:
        def weights_for(model):
            return SharedWeights(model, lag=cfg.serial_policy_lag if cfg.serial else 0)
    shared = build_shared_replay(policies, plan, slots, run, checkpoint) \
        if cfg.share_experience else None
    learners = [build_policy_learner(k, c, plan, run, slots, weights_for, checkpoint,
                                     group or ALONE, shared) for k, c in enumerate(policies)]
    if checkpoint is not None:
        restore_rng(checkpoint["rng"])
    leader = group is None or group.rank == 0
    if not leader:
        report = FollowerReport(run, checkpoint)
    elif len(policies) == 1:
        report = Report(run, cfg.env, info.frames_per_step, cfg.environment_max_steps,
                        state=checkpoint, status_stats=learners[0].agent.STATUS,
                        csv_interval=cfg.learner_csv_interval)
    else:
        report = population_report(policies, learners, run, info, checkpoint)
    pacers = [ReplayRatioPacer(pacer_counters(c, k, report), c.replay_ratio, c.learning_starts,
                               slack=cfg.n_envs // len(policies) * cfg.r_f_steps * 2)
              if c.off_policy else BatchReadyPacer() for k, c in enumerate(policies)]
    pacer = pacers[0] if len(policies) == 1 else PolicyPacers(pacers)
    for k, learner in enumerate(learners):
        files = run if len(policies) == 1 else report.policies[k].run_dir
        files.open_learner(learner.agent.stat_names() + pacers[k].stat_names())
    if checkpoint is not None:
        report.counters.resumes += 1
    first, count = actor_share(cfg.worker_count, cfg.learner_count, group.rank) \
        if group is not None else (0, cfg.worker_count)
    # actor i acts for policy i mod K (the pools take the seeds from policy 0's)
    actor_cfgs = [dataclasses.replace(actor_config(c, info, policy, first), policy_id=k,
                                      store_final_obs=any(p.off_policy for p in policies))
                  for k, c in enumerate(policies)]
    weights = [learner.weights for learner in learners]
    actors = make_actors(cfg, plan, run, slots, weights if len(weights) > 1 else weights[0],
                         report.counters.resumes,
                         actor_cfgs if len(actor_cfgs) > 1 else actor_cfgs[0], count)
    for learner in learners:
        learner.publish()
    observers = make_observers(cfg, policies, learners, report, run, checkpoint) \
        if leader else []
    evaluator = make_evaluator(cfg, info, [le.agent for le in learners], run,
                               report.counters.env_steps, [c.model_spec(info) for c in policies]) \
        if leader else None
    if group is None:
        return Driver(cfg, info, learners, slots, actors, report, pacer, observers,
                      evaluator=evaluator, shared=shared)
    return GroupDriver(cfg, info, learners, slots, actors, report, GroupPacer(group),
                       observers, evaluator=evaluator, group=group)


def pacer_counters(cfg: Config, policy_id: int, report):
    """The env steps an off-policy policy's replay ratio counts: the run's where it
    samples the shared replay (every policy's rollouts), else its own."""
    shared = cfg.share_experience and any(e.type == "standard" for e in cfg.replay_specs)
    return report.counters if shared or cfg.num_policies == 1 else \
        report.policies[policy_id].counters


def population_report(policies: list[Config], learners: list[PolicyLearner], run: RunDir,
                      info: EnvInfo, checkpoint: dict | None) -> PopulationReport:
    """The reports of a run of several policies: the run's, and each policy's on its
    folder `policy_<k>/` (a resumed one cut to what the checkpoint counted)."""
    cfg = policies[0]
    saved = [None] * len(policies) if checkpoint is None else \
        checkpoint.get("policy_reports", [None] * len(policies))
    reports = []
    for k, (c, learner) in enumerate(zip(policies, learners, strict=True)):
        state = saved[k] if k < len(saved) else None
        counts = None if state is None else state["counters"]
        files = run.child(f"policy_{k}", c.to_dict(), keep_rows=None if counts is None else (
            counts["episodes"], counts["updates"], counts.get("evaluations", 0)),
            keep_events=None if counts is None else (counts["env_steps"], state.get("saved_at")))
        reports.append(Report(files, cfg.env, info.frames_per_step, cfg.environment_max_steps,
                              state=state, status_stats=learner.agent.STATUS,
                              label=f"policy {k}: ", csv_interval=c.learner_csv_interval))
    return PopulationReport(Report(run, cfg.env, info.frames_per_step,
                                   cfg.environment_max_steps, state=checkpoint), reports)


def build_shared_replay(policies: list[Config], plan: RunPlan, slots: SlotPool, run: RunDir,
                        checkpoint: dict | None) -> StorageReplay:
    """--share_experience's replay (replay/shared.py), restored from the checkpoint's."""
    cfg = policies[0]
    shared = StorageReplay(shared_entry(policies), slots, plan.spec, cfg.r_f_steps,
                           plan.pixel_stack, max_chain_heads=plan.max_chain_heads,
                           fill_in_factor=0.0, seed=cfg.seed + 104_723)
    run.log.info(f"shared replay: {shared.describe()}")
    state = None if checkpoint is None else checkpoint.get("shared_replay")
    if state is not None:
        problem = shared.state_problem(state)
        if problem:
            run.log.info(f"resume: the shared replay starts empty: {problem}")
        else:
            shared.load_state_dict(state)
    return shared


def make_observers(cfg: Config, policies: list[Config], learners: list[PolicyLearner],
                   report, run: RunDir, checkpoint: dict | None) -> list[Observer]:
    """`--stop_at_return`'s, `--weight_sync`'s and `--with_pbt`'s observers (each
    restored from the checkpoint's state)."""
    observers: list[Observer] = []
    if cfg.stop_at_return is not None:
        observers.append(StopAtReturn(report, cfg.stop_at_return, cfg.stop_window))
    if cfg.weight_sync is not None:
        observers.append(WeightSyncObserver(learners, parse_weight_sync(
            cfg.weight_sync, len(policies))[0], run.log))
    if cfg.with_pbt:
        from training.pbt import PopulationBasedTraining

        pbt = PopulationBasedTraining(policies, learners, report, run)
        if checkpoint is None:
            pbt.start()
        observers.append(pbt)
    for o in observers:
        state = None if checkpoint is None else checkpoint.get(f"observer_{type(o).__name__}")
        if state is not None:
            o.load_state_dict(state)
    return observers


def make_actors(cfg: Config, plan: RunPlan, run: RunDir, slots: SlotPool, weights,
                resumes: int, actor_cfg: ActorConfig, count: int) -> ActorPoolBase:
    """`count` actors of `--backend` (or `--serial`), acting with `weights`."""
    if cfg.backend == "ray":
        from training.ranks.torchrun import node_ranks
        from workers.ray_pool import RayActorPool

        return RayActorPool(actor_cfg, count, slots, plan.spec, weights, run.log,
                            cfg.max_actor_restarts, resumes=resumes, address=cfg.ray_address,
                            max_policy_lag=cfg.max_policy_lag, pixel_stack=plan.pixel_stack,
                            in_flight=cfg.ray_in_flight,
                            actor_timeout=cfg.ray_actor_timeout, node=cfg.ray_actor_node,
                            node_actors=sum(actor_share(cfg.worker_count, cfg.learner_count,
                                                        r)[1]
                                            for r in node_ranks(cfg.learner_count)))
    if cfg.serial:
        return SerialActorPool(actor_cfg, count, slots, weights, run.log, resumes=resumes)
    return ActorPool(worker_context(env_modules(cfg.env)), actor_cfg, count, slots, weights,
                     run.log, cfg.max_actor_restarts, resumes=resumes)


@functools.cache
def worker_context(modules: tuple[str, ...] = ()):
    """The start method of the actor and evaluator processes: a forkserver that has
    imported their modules (torch, the envs, and `modules`: those the run's env needs
    besides) once (workers/preload.py), so that each process forks from it ready,
    instead of a fresh interpreter importing them again (spawn's cost: seconds per
    process, paid on every start and every restart). Forked from a server that ran
    nothing but imports, they share none of the learner's threads or CUDA state. Their
    parent is the server, which exits when this process does, taking them with it
    (their PR_SET_PDEATHSIG). One server per process: the first call's preload holds."""
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload([*modules, "workers.preload"])
    return ctx


def make_evaluator(cfg: Config, info: EnvInfo, agents: list[Agent], run: RunDir, env_steps: int,
                   models: list[ModelSpec]) -> Evaluator | None:
    """The evaluation worker of `--eval_interval` (None when 0) for the policies of
    `agents` (whose acting models are built from `models`); its first evaluation comes
    at the next multiple of the interval after `env_steps`."""
    if cfg.eval_interval <= 0:
        return None
    eval_cfg = EvalConfig(
        env_id=cfg.env, env_options=cfg.env_options(training=False),
        episodes=cfg.eval_episodes, num_envs=min(cfg.eval_episodes, cfg.envs_per_worker),
        greedy=cfg.eval_policy == "greedy", models=tuple(models),
        seed=cfg.seed + 104_729)
    return Evaluator(worker_context(env_modules(cfg.env)), eval_cfg,
                     [a.acting_model for a in agents], cfg.eval_interval,
                     run.log, next_at=(env_steps // cfg.eval_interval + 1) * cfg.eval_interval,
                     max_duty=None if cfg.serial else
                     duty_cap(os.cpu_count() or 1, cfg.worker_count + cfg.learner_count))
