"""Several policies in one run (`--num_policies`): each policy's flags, and the checks
of `--policy_overrides`, `--share_experience`, `--weight_sync` and `--with_pbt`.

The run's own `Config` is policy 0's: the command line with policy 0's overrides.
Policy k's is the command line with its overrides, auto values for its own agent, and
the run-level flags (`RUN_LEVEL`: the env, the actors, the rollout length, the budget,
the files) of the run:

    configs, errors = policy_configs(values, explicit, run_cfg, saved)

A resumed run rebuilds them from each policy's saved flags (its part of the
checkpoint), the command line over them (`training.config.merge_saved`), and the
policy's overrides over both.
Everything here runs before anything is written: each problem names its flag.
"""

from __future__ import annotations

import dataclasses
import json
import math

from agents.registry import AGENTS, flag_readers, off_policy
from training.config import Config, make_config, merge_saved
from training.flag_spec import FLAG_SPECS, KINDS, SPECS_BY_NAME

# flags every policy of a run shares: they shape the actors, the rollout slots, the
# run's budget and files, or say what this invocation does
RUN_LEVEL = frozenset(
    {spec.name for spec in FLAG_SPECS if spec.section in (
        "general", "environment", "parallelism", "evaluation", "logging",
        "several policies")} - {"agent"}
    | {"r_f_steps", "use_lstm", "lstm_size", "caching", "cache_output_buffer_size",
       "checkpoint_replay"})
# what a policy's seed adds per policy index (its agent's own random streams differ)
SEED_STRIDE = 7_919
# the hyperparameters `--pbt_mutate` may name, and the range a perturbed value is kept
# in; the discounts move through 1 - x (training/pbt.py)
MUTABLE = {"lr": (0.0, math.inf), "q_lr": (0.0, math.inf),
           "entropy_loss_weight": (0.0, math.inf), "value_loss_weight": (0.0, math.inf),
           "ppo_clip": (1e-3, 1.0), "ppo_value_clip": (0.0, math.inf),
           "gradient_clip_by_norm_threshold": (0.0, math.inf), "alpha": (0.0, math.inf),
           "tau": (1e-6, 1.0), "gamma": (1e-6, 1.0 - 1e-6), "gae_lambda": (1e-6, 1.0 - 1e-6)}
DISCOUNTS = ("gamma", "gae_lambda")


def parse_overrides(text: str | None, count: int) -> tuple[list[dict], list[str]]:
    """`--policy_overrides` as `count` dicts of flag values (empty for None), and every
    problem: not JSON, not a list of `count` objects, an unknown flag, a run-level one,
    a value of the wrong type."""
    if text is None:
        return [{} for _ in range(count)], []
    try:
        items = json.loads(text)
    except json.JSONDecodeError as e:
        return [], [f"--policy_overrides: not JSON ({e}); give a list of objects, one per "
                    "policy"]
    if not isinstance(items, list) or len(items) != count \
            or not all(isinstance(item, dict) for item in items):
        return [], [f"--policy_overrides: must be a JSON list of --num_policies={count} "
                    f"objects, one per policy; got {text}"]
    errors = []
    for k, item in enumerate(items):
        for name, value in item.items():
            spec = SPECS_BY_NAME.get(name)
            where = f"--policy_overrides: policy {k}: {name!r}"
            if spec is None:
                errors.append(f"{where} is no flag")
            elif name in RUN_LEVEL:
                errors.append(f"{where} cannot differ between policies (the env, the actors, "
                              "the rollout length, the budget and the files are the run's); "
                              f"give it as --{name}")
            elif not _fits(spec, value):
                errors.append(f"{where}: {value!r} is no {spec.kind}"
                              + (f" (one of {', '.join(spec.choices)})" if spec.choices else ""))
            elif spec.kind == "float" and value is not None:
                item[name] = float(value)
    return items, errors


def _fits(spec, value) -> bool:
    if value is None:
        return spec.default is None
    if spec.kind == "float":
        return isinstance(value, (int, float)) and not isinstance(value, bool) \
            and math.isfinite(value)
    if spec.kind == "enum":
        return value in spec.choices
    return type(value) is KINDS[spec.kind]


def policy_zero(values: dict) -> tuple[dict, list[str]]:
    """The flag values of the run's config: `values` with policy 0's overrides (a
    policy-level flag there wins over the command line's, as for every policy)."""
    count = values.get("num_policies") or 1
    if count <= 1 or values.get("policy_overrides") is None:
        return values, []
    overrides, errors = parse_overrides(values["policy_overrides"], count)
    return ({**values, **overrides[0]} if not errors else values), errors


def run_given(values: dict, explicit: set[str]) -> set[str]:
    """The command-line flags the run's (policy 0's) config is checked against: with
    several policies an agent-specific flag may be meant for another policy's agent
    (`policy_configs` checks that one of them reads it)."""
    if (values.get("num_policies") or 1) <= 1:
        return set(explicit)
    return set(explicit) - set(flag_readers())


def policy_configs(values: dict, explicit: set[str], run: Config,
                   saved: list[dict] | None = None) -> tuple[list[Config], list[str]]:
    """Every policy's `Config` (policy 0's is `run`), and every problem. `values`: the
    flag values before a checkpoint's were merged in (None for auto); `saved`: each
    policy's flags from a checkpoint being resumed (or tested)."""
    overrides, errors = parse_overrides(run.policy_overrides, run.num_policies)
    if errors:
        return [], errors
    shared = {name: getattr(run, name) for name in RUN_LEVEL}
    configs = [run]
    readers = flag_readers()
    for k in range(1, run.num_policies):
        base = dict(values) if saved is None or k >= len(saved) else \
            merge_saved(values, set(explicit), saved[k])
        v = {**base, **overrides[k], **shared, "seed": run.seed + SEED_STRIDE * k}
        agent = v.get("agent") or run.agent
        given = set(overrides[k]) | {f for f in explicit if f not in readers
                                     or agent in readers[f]}
        cfg, problems = make_config(v, given=given - RUN_LEVEL)
        errors += [f"policy {k} (--policy_overrides): {p}" for p in problems]
        if cfg is not None:
            configs.append(cfg)
    agents = {c.agent for c in configs}
    for flag in explicit:
        if flag in readers and not agents & set(readers[flag]):
            errors.append(f"--{flag}: only --agent={' or '.join(readers[flag])} reads it and "
                          f"no policy has one; leave it out")
    if errors:
        return [], errors
    return configs, population_problems(configs)


def population_problems(configs: list[Config]) -> list[str]:
    """What the policies of one run cannot do together (needs no env)."""
    run, k = configs[0], len(configs)
    errors = []
    if run.worker_count % k:
        errors.append(f"--worker_count: actor i acts for policy i mod {k}, so each policy "
                      f"needs the same number of actors; give a multiple of --num_policies={k} "
                      f"(got {run.worker_count})")
    if run.learner_count > 1:
        errors.append("--learner_count: several policies train on one learner each; leave "
                      "it out or use --num_policies=1")
    if run.share_experience:
        errors += _sharing_problems(configs)
    if run.weight_sync is not None:
        errors += parse_weight_sync(run.weight_sync, k)[1]
    if run.with_pbt:
        errors += _pbt_problems(configs)
    return errors


def _sharing_problems(configs: list[Config]) -> list[str]:
    readers = [k for k, c in enumerate(configs)
               if any(e.type == "standard" for e in c.replay_specs)]
    if not readers:
        return ["--share_experience: no policy samples the shared replay; give a policy a "
                "'standard' entry in --replay_parameters (or in its --policy_overrides)"]
    kinds = {k: AGENTS[c.agent].distributions for k, c in enumerate(configs)}
    errors = []
    for k in readers:
        if off_policy(configs[k].agent):
            continue  # transitions: the behaviour policy does not matter
        other = next((j for j in kinds if kinds[j] != kinds[k]), None)
        if other is not None:
            errors.append(
                f"--share_experience: policy {k} ({configs[k].agent}) corrects for the "
                f"behaviour policy with its own distribution, and policy {other}'s "
                f"({configs[other].agent}) acts with another one; give policy {k} no "
                "'standard' entry, or the same kind of agent to both")
    return errors


@dataclasses.dataclass(frozen=True)
class WeightSync:
    """`--weight_sync`: every `every_updates` updates of policy `source`, copy its acting
    model's state-dict entries, but those whose name starts with an `exclude` prefix,
    into those of each policy in `targets`, under the same name or, where a `rename`
    prefix matches, with that prefix replaced by its value."""

    source: int
    targets: tuple[int, ...]
    every_updates: int
    exclude: tuple[str, ...] = ()
    rename: dict = dataclasses.field(default_factory=dict)


def parse_weight_sync(text: str | None, count: int) -> tuple[WeightSync | None, list[str]]:
    """`--weight_sync`'s JSON for `count` policies, and every problem."""
    if text is None:
        return None, []
    bad = [f"--weight_sync: must be a JSON object {{\"from\": 0, \"to\": [1], "
           f"\"every_updates\": 100, \"exclude\": [\"prefix\", ...], \"rename\": "
           f"{{\"prefix\": \"new prefix\"}}}} over the policies 0..{count - 1}; got {text}"]
    try:
        d = json.loads(text)
    except json.JSONDecodeError:
        return None, bad
    if not isinstance(d, dict) or set(d) - {"from", "to", "every_updates", "exclude", "rename"} \
            or not {"from", "to", "every_updates"} <= set(d):
        return None, bad
    source, targets, every = d["from"], d["to"], d["every_updates"]
    exclude, rename = d.get("exclude", []), d.get("rename", {})
    ints = [source, every, *(targets if isinstance(targets, list) else [None])]
    if not all(type(i) is int for i in ints) or not isinstance(exclude, list) \
            or not all(isinstance(e, str) for e in exclude) or not isinstance(rename, dict) \
            or not all(isinstance(v, str) for v in rename.values()):
        return None, bad
    errors = []
    if not 0 <= source < count or not targets or \
            not all(0 <= t < count and t != source for t in targets):
        errors.append(f"--weight_sync: 'from' and 'to' must be policies 0..{count - 1}, "
                      f"'to' not empty and without 'from'; got {text}")
    if every < 1:
        errors.append(f"--weight_sync: 'every_updates' must be >= 1, got {every}")
    return (None if errors else WeightSync(source, tuple(targets), every, tuple(exclude),
                                           rename)), errors


def _pbt_problems(configs: list[Config]) -> list[str]:
    """What --with_pbt cannot run with: PBT copies whole agents between policies, so the
    agent, the optimizer and the architecture (agents.model_spec.ARCHITECTURE_FLAGS) must
    not differ; and its own flags' ranges."""
    from agents.model_spec import ARCHITECTURE_FLAGS

    run = configs[0]
    errors = []
    if len(configs) < 2:
        errors.append("--with_pbt: a population needs --num_policies >= 2")
    for name in ("agent", "optimizer", *ARCHITECTURE_FLAGS):
        values = {getattr(c, name) for c in configs}
        if len(values) > 1:
            errors.append(f"--with_pbt: a policy copies another's weights and optimizer, so "
                          f"--{name} cannot differ between policies (got "
                          f"{sorted(map(str, values))})")
    for name in mutated(run):
        readers = flag_readers().get(name)
        if name not in MUTABLE:
            errors.append(f"--pbt_mutate: {name!r} is not one of the hyperparameters PBT "
                          f"perturbs: {', '.join(MUTABLE)}")
            continue
        deaf = sorted({c.agent for c in configs if readers is not None and c.agent not in readers})
        if deaf:
            errors.append(f"--pbt_mutate: {' and '.join(deaf)} does not read --{name}; leave "
                          f"{name} out of the list (or --pbt_mutate out, for the agent's own "
                          "default)")
    if not 0 < run.pbt_replace_fraction <= 0.5:
        errors.append(f"--pbt_replace_fraction: must be in (0, 0.5], got "
                      f"{run.pbt_replace_fraction}")
    if not 1 <= run.pbt_perturb_min <= run.pbt_perturb_max:
        errors.append(f"--pbt_perturb_min/max: need 1 <= min <= max, got "
                      f"{run.pbt_perturb_min}, {run.pbt_perturb_max}")
    if not 0 <= run.pbt_mutation_rate <= 1:
        errors.append(f"--pbt_mutation_rate: must be in [0, 1], got {run.pbt_mutation_rate}")
    if run.pbt_period_env_steps <= 0:
        errors.append(f"--pbt_period_env_steps: must be > 0, got {run.pbt_period_env_steps}")
    return errors


def mutated(cfg: Config) -> list[str]:
    """`--pbt_mutate`'s flag names."""
    return [n.strip() for n in cfg.pbt_mutate.split(",") if n.strip()]
