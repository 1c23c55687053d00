"""One invocation of the platform: a new run, a resumed run, or a test.

Everything that can be checked is checked before anything is written: settings
that cannot change mid-run, and the run plan (`training/plan.py`): whether the
shared-memory rollout slots and the replays fit.
A resumed run continues in its own run directory: counters, optimizer, learning
rate schedule and RNG states go on, and rows are appended to its CSVs.
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys

import torch

from agents.distributions import BOUNDED
from agents.model_spec import ARCHITECTURE_FLAGS
from agents.registry import AGENTS, model_spec
from training.checkpoint import (
    acting_weights,
    chosen_policy,
    policy_view,
    resolve_checkpoint_path,
    start_branch,
)
from training.config import SAVED_BEFORE, Config
from training.factory import build_driver, make_agent
from training.observers import sync_problem
from training.plan import RunPlan, check_memory, make_plan
from training.policies import parse_weight_sync
from training.ranks.group import GroupFailure, rank_view
from training.ranks.spawn import Ranks
from training.ranks.torchrun import Leader, launched, node_ranks
from training.run_dir import RunDir
from training.signals import StopSignal
from workers.actor_pool import ActorFailure
from workers.slots import spec_bytes
from wrappers.envs import EnvInfo, env_info

# Settings a resumed (all) or tested (the first two) agent must share with its
# checkpoint, besides the architecture (`architecture_problem`).
FIXED = ("env", "frames_stacked", "optimizer", "agent", "autotune", "num_policies")


def _changed(name: str, saved) -> str:
    return (f"--{name}: the checkpoint was trained with --{name}={saved}, which cannot "
            f"change; leave it out or pass --{name}={saved}")


def architecture_problem(cfg: Config, checkpoint: dict, policy_id: int = 0) -> str | None:
    """Why the checkpoint's model of policy `policy_id` cannot be loaded into the model
    of `cfg`'s flags (`agents.model_spec.ARCHITECTURE_FLAGS`), or None. A flag that
    changed is named; anything else that makes the weights not fit (a missing or
    reshaped tensor) is caught by comparing them with a model built from the flags."""
    part = checkpoint["policies"][policy_id]
    info = checkpoint["env_info"]
    saved = {**SAVED_BEFORE, **part.get("config", checkpoint["config"])}
    theirs = model_spec(info, saved)
    mine = dataclasses.replace(theirs, **{name: getattr(cfg, name)
                                          for name in ARCHITECTURE_FLAGS})
    for name in ARCHITECTURE_FLAGS:
        if getattr(mine, name) != getattr(theirs, name):
            return _changed(name, saved.get(name))
    expected = {k: tuple(v.shape) for k, v in mine.build().state_dict().items()}
    found = {k: tuple(v.shape) for k, v in acting_weights(checkpoint, policy_id).items()}
    if expected != found:
        odd = sorted(set(expected.items()) ^ set(found.items()))[:3]
        return (f"--load_model_url: the checkpoint's model does not fit the one these flags "
                f"build (tensors that differ: {odd}); it was saved by another version")
    return None


def action_problem(cfg: Config, info: EnvInfo) -> str | None:
    """Why `cfg.agent` cannot act in the env of `info`, or None."""
    kinds = AGENTS[cfg.agent].distributions
    if info.action_kind not in kinds:
        return (f"--agent: {cfg.agent} acts in {' and '.join(kinds)} action spaces and "
                f"{cfg.env} has {info.action_kind} actions; use ppo or impala")
    if kinds[info.action_kind] in BOUNDED and len(info.obs_shape) != 1:
        return (f"--agent: {cfg.agent}'s networks are MLPs over vector observations and "
                f"{cfg.env}'s are {list(info.obs_shape)}; use ppo")
    bounds = (*info.action_low, *info.action_high)
    if kinds[info.action_kind] in BOUNDED and not all(map(math.isfinite, bounds)):
        return (f"--agent: {cfg.agent} squashes its actions into the action space's bounds "
                f"and {cfg.env}'s are not finite; use ppo")
    return None


def _fail(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2


def preflight(cfg: Config, checkpoint: dict | None, policies: list[Config] | None = None
              ) -> tuple[RunPlan | None, str | None]:
    """(the run plan, None) if the run can start, else (None, the message of why not).
    A test needs no plan: it runs no actors and no replays. `policies`: each policy's
    config (--num_policies > 1)."""
    if checkpoint is not None:
        for name in FIXED if cfg.op_mode == "train_w_load" else FIXED[:2]:
            saved = checkpoint["config"].get(name, SAVED_BEFORE.get(name))
            if saved != getattr(cfg, name):
                return None, _changed(name, saved)
        for k, c in enumerate(policies or [cfg]):
            problem = architecture_problem(c, checkpoint, k)
            if problem:
                return None, problem if k == 0 else f"policy {k}: {problem}"
    if policies is not None and len(policies) > 1:
        return population_preflight(policies, checkpoint)
    if cfg.op_mode == "test":
        return None, None
    if cfg.learner_count == 1:
        info = env_info(cfg.env, cfg.env_options())
        problem = action_problem(cfg, info)
        if problem:
            return None, problem
        plan = make_plan(cfg, info)
        problem = check_memory(plan)
    else:  # rank 0's plan; every rank has slots and replays of its own, on this node
        plan = make_plan(rank_view(cfg, 0))  # those torchrun started here, or all of them
        here = len(node_ranks(cfg.learner_count))
        problem = check_memory(dataclasses.replace(
            plan, slot_bytes=plan.slot_bytes * here,
            replay_bytes=tuple(b * here for b in plan.replay_bytes)))
    return (None, problem) if problem else (plan, None)


def population_preflight(policies: list[Config], checkpoint: dict | None
                         ) -> tuple[RunPlan | None, str | None]:
    """`preflight` for several policies: each policy's agent, acting and saved agent,
    rollouts of one layout for all, the weight sync's parameters, and memory for the
    slots and every replay."""
    cfg = policies[0]
    saved = None if checkpoint is None else checkpoint["policies"]
    for k, c in enumerate(policies):
        for name in FIXED if saved is not None and k < len(saved) else ():
            before = saved[k].get("config", {}).get(name, getattr(c, name))
            if before != getattr(c, name):
                return None, f"--policy_overrides: policy {k}: {_changed(name, before)}"
    info = env_info(cfg.env, cfg.env_options())
    union = {"off_policy": any(c.off_policy for c in policies),
             "store_features": any(c.store_features for c in policies)}
    plans = []
    for k, c in enumerate(policies):
        problem = action_problem(c, info)
        if problem:
            return None, f"policy {k}: {problem}"
        plans.append(make_plan(dataclasses.replace(c, **union), info))
        if plans[k].spec != plans[0].spec:
            odd = sorted(n for n in set(plans[k].spec) | set(plans[0].spec)
                         if plans[k].spec.get(n) != plans[0].spec.get(n))
            return None, (f"--policy_overrides: policy {k}'s rollouts would differ from "
                          f"policy 0's in {odd}: the policies share the actors' rollout slots; "
                          "give them the same --use_lstm/--lstm_size, --hidden_size where a "
                          "replay reads hidden features, and agents of one action kind")
    sync, _ = parse_weight_sync(cfg.weight_sync, len(policies))
    if sync is not None:
        models = [make_agent(c, info, torch.device("cpu")).acting_model for c in policies]
        for t in sync.targets:
            problem = sync_problem(models[sync.source], models[t], sync)
            if problem:
                return None, f"--weight_sync: from policy {sync.source} to {t}: {problem}"
    ahead = sum(p.num_slots - cfg.n_envs for p in plans)
    plan = dataclasses.replace(
        plans[0], num_slots=cfg.n_envs + ahead,
        slot_bytes=spec_bytes(plans[0].spec) * (cfg.n_envs + ahead),
        replay_bytes=tuple(b for p in plans for b in p.replay_bytes))
    problem = check_memory(plan)
    return (None, problem) if problem else (plan, None)


def run(cfg: Config, checkpoint: dict | None = None, policies: list[Config] | None = None
        ) -> int:
    """One invocation; `policies`: each policy's config where --num_policies > 1
    (training/policies.py)."""
    chosen = None
    if cfg.op_mode == "test" and checkpoint is not None and len(checkpoint["policies"]) > 1:
        count = len(checkpoint["policies"])
        if cfg.policy_index is not None and not 0 <= cfg.policy_index < count:
            return _fail(f"--policy_index: the checkpoint has policies 0..{count - 1}, got "
                         f"{cfg.policy_index}")
        k, why = chosen_policy(checkpoint, cfg.policy_index)
        checkpoint = policy_view(checkpoint, k)
        saved = checkpoint["config"]
        cfg = dataclasses.replace(cfg, **{name: saved[name] for name in
                                          ("agent", *ARCHITECTURE_FLAGS) if name in saved})
        chosen = f"test: policy {k} ({why})"
    plan, problem = preflight(cfg, checkpoint, policies)
    if problem:
        return _fail(problem)
    stop = StopSignal().install()
    if cfg.op_mode == "test":
        from training.evaluate import evaluate

        if chosen:
            print(chosen)
        return evaluate(cfg, checkpoint, stop)
    if checkpoint is not None:
        c = checkpoint["counters"]
        loaded = os.path.abspath(resolve_checkpoint_path(cfg.load_model_url))
        superseded = start_branch(os.path.dirname(loaded), loaded, c["updates"])
        run_dir = RunDir(cfg.results_dir, cfg.env, cfg.to_dict(),
                         resume_path=os.path.dirname(loaded),
                         keep_rows=(c["episodes"], c["updates"], c.get("evaluations", 0)),
                         keep_events=(c["env_steps"], checkpoint.get("saved_at")),
                         files=cfg.num_policies == 1)
        run_dir.log.info(f"resuming from {cfg.load_model_url} at {c['env_steps']:,} env steps, "
                         f"{c['updates']:,} updates (resume {c.get('resumes', 0) + 1})")
        if superseded:
            run_dir.log.info(f"checkpoints of later updates, from the run this one branches "
                             f"off, moved to superseded/: {', '.join(superseded)}")
    else:
        run_dir = RunDir(cfg.results_dir, cfg.env, cfg.to_dict(), files=cfg.num_policies == 1)
    driver = ranks = None
    status = 0
    try:
        group = None
        if cfg.learner_count > 1:  # rank 0 here, the others started by it or by torchrun
            ranks = Leader(cfg, checkpoint, launch) if (launch := launched()) else \
                Ranks(cfg, run_dir.path, run_dir.log)
            group = ranks.group
        driver = build_driver(cfg, plan, run_dir, checkpoint, group=group, policies=policies)
        driver.run(stop_requested=stop)
        if stop():
            run_dir.log.info("stop requested: stopping the actors and saving a checkpoint")
    except (ActorFailure, GroupFailure) as e:
        run_dir.log.error(str(e))
        status = 1
    except Exception:
        run_dir.log.exception("the learner failed; saving what it can")
        status = 1
    finally:
        if driver is not None:
            driver.close()
            try:
                path = driver.save()
            except GroupFailure as e:  # a rank left during the last checkpoint
                run_dir.log.error(str(e))
                status = 1
                path = driver.save()  # rank 0's part alone
            run_dir.write_summary(driver.summary())
            run_dir.log.info(f"checkpoint saved: {os.path.abspath(path)}")
        if ranks is not None:  # after a failure a rank may hang: no long wait for it
            codes = ranks.close(wait_s=30.0 if status == 0 else 2.0)
            if any(code != 0 for code in codes):
                run_dir.log.error(f"learner ranks 1..{cfg.learner_count - 1} exited with "
                                  f"{codes}")
                status = status or 1
        run_dir.flush()
        run_dir.close()
    return status

