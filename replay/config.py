"""Parse and check `--replay_parameters`, the seed platform's JSON replay language.

    [{"type": "queue", "capacity": 1, "sample_ratio": 0.5},
     {"type": "custom", "capacity": 1000, "sample_ratio": 0.5, "dist_function": "ln_norm",
      "sample_strategy": "elite_sampling", "lambda_batch_multiplier": 6,
      "alfa_annealing_factor": 2.0}]

`parse_replay_parameters` returns one typed `ReplaySpec` per entry, completed with
its defaults, and a list of every problem found, each naming the entry's index and
key. The specs are parsed once, with the config (`training/config.py`); everything
downstream reads `Config.replay_specs`.
"""

from __future__ import annotations

import dataclasses
import json
import math

TYPES = ("queue", "standard", "custom", "elite")  # elite: an alias of custom
COMMON = {"type": None, "capacity": 1, "sample_ratio": None}
CUSTOM_DEFAULTS = {
    "dist_function": "ln_norm",
    "p": 2.0,
    "sample_strategy": "elite_sampling",
    "insert_strategy": "fifo",
    "elite_sampling_strategy": "strategy3",
    "lambda_batch_multiplier": 6.0,
    "alfa_annealing_factor": 2.0,
    "elite_batch_size": 32,
    "feature_steps": 4,
    "features": "logits",
}
CHOICES = {
    "dist_function": ("ln_norm", "cos_dist", "kl_div"),
    "sample_strategy": ("elite_sampling", "attentive_sampling", "uniform"),
    "insert_strategy": ("fifo", "elite_insertion"),
    "elite_sampling_strategy": ("strategy1", "strategy2", "strategy3", "strategy4"),
    # what distances compare: the policy's logits, or the policy path's last hidden
    # layer (stored by the actors as float16, see workers/slots.py)
    "features": ("logits", "hidden"),
}


def _number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _check_custom(i: int, e: dict, errors: list[str]) -> None:
    for key, choices in CHOICES.items():
        if e[key] not in choices:
            errors.append(f"entry {i}: {key!r} must be one of {', '.join(choices)}, "
                          f"got {e[key]!r}")
    if not _number(e["p"]) or e["p"] <= 0:
        errors.append(f"entry {i}: 'p' must be a number > 0, got {e['p']!r}")
    if not _number(e["lambda_batch_multiplier"]) or e["lambda_batch_multiplier"] < 1:
        errors.append(f"entry {i}: 'lambda_batch_multiplier' must be a number >= 1, "
                      f"got {e['lambda_batch_multiplier']!r}")
    if not _number(e["alfa_annealing_factor"]) or e["alfa_annealing_factor"] <= 0:
        errors.append(f"entry {i}: 'alfa_annealing_factor' must be a number > 0, "
                      f"got {e['alfa_annealing_factor']!r}")
    fs = e["feature_steps"]
    if isinstance(fs, bool) or not isinstance(fs, int) or fs < 1:
        errors.append(f"entry {i}: 'feature_steps' must be an integer >= 1, got {fs!r}")
    if e["dist_function"] == "kl_div" and e["features"] == "hidden":
        errors.append(f"entry {i}: 'dist_function' 'kl_div' needs 'features' 'logits' (a KL "
                      "divergence compares two policies' logits); got 'features' 'hidden': "
                      "use 'ln_norm' or 'cos_dist' with hidden features")
    ebs = e["elite_batch_size"]
    if isinstance(ebs, bool) or not isinstance(ebs, int) or ebs < 1:
        errors.append(f"entry {i}: 'elite_batch_size' must be an integer >= 1, got {ebs!r}")


@dataclasses.dataclass(frozen=True)
class ReplaySpec:
    """One checked `--replay_parameters` entry. `type` is "queue", "standard" or
    "custom" (the alias "elite" is resolved). The fields after `sample_ratio` are
    read by custom replays only; a queue or standard entry keeps their defaults."""

    type: str
    capacity: int
    sample_ratio: float
    dist_function: str = CUSTOM_DEFAULTS["dist_function"]
    p: float = CUSTOM_DEFAULTS["p"]
    sample_strategy: str = CUSTOM_DEFAULTS["sample_strategy"]
    insert_strategy: str = CUSTOM_DEFAULTS["insert_strategy"]
    elite_sampling_strategy: str = CUSTOM_DEFAULTS["elite_sampling_strategy"]
    lambda_batch_multiplier: float = CUSTOM_DEFAULTS["lambda_batch_multiplier"]
    alfa_annealing_factor: float = CUSTOM_DEFAULTS["alfa_annealing_factor"]
    elite_batch_size: int = CUSTOM_DEFAULTS["elite_batch_size"]
    feature_steps: int = CUSTOM_DEFAULTS["feature_steps"]
    features: str = CUSTOM_DEFAULTS["features"]

    @property
    def strategy(self) -> str:
        """How it samples: the custom entry's `sample_strategy`, else "uniform"."""
        return self.sample_strategy if self.type == "custom" else "uniform"

    @property
    def insert(self) -> str:
        """Which resident a full replay overwrites: "fifo" or "elite_insertion"."""
        return self.insert_strategy if self.type == "custom" else "fifo"

    @property
    def uses_hidden_features(self) -> bool:
        """Whether its distances use hidden-layer features (not logits)."""
        return self.type == "custom" and self.features == "hidden"

    @property
    def stores_hidden_features(self) -> bool:
        """Whether it reads the behaviour policy's hidden features, so that the actors
        must store them: elite sampling, or elite insertion with uniform sampling.
        Attentive sampling compares current features only; uniform + fifo none."""
        return self.uses_hidden_features and (
            self.strategy == "elite_sampling"
            or (self.strategy == "uniform" and self.insert == "elite_insertion"))


def batch_shares(batch_size: int, ratios: list[float]) -> list[int]:
    """Largest-remainder apportionment of `batch_size` by `ratios` (sum to 1)."""
    raw = [batch_size * r for r in ratios]
    shares = [math.floor(x) for x in raw]
    order = sorted(range(len(raw)), key=lambda i: (raw[i] - shares[i], -i), reverse=True)
    for i in order[: batch_size - sum(shares)]:
        shares[i] += 1
    return shares


def parse_replay_parameters(text: str, batch_size: int
                            ) -> tuple[list[ReplaySpec], list[str]]:
    """The typed entries of `text` and every problem found (entries are [] then)."""
    errors: list[str] = []
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as e:
        return [], [f"not valid JSON ({e}); expected a list like "
                    '\'[{"type": "queue", "capacity": 1, "sample_ratio": 1}]\'']
    if not isinstance(raw, list) or not raw:
        return [], ["must be a non-empty JSON list of replay objects"]
    entries: list[dict] = []  # completed with their defaults, checked below
    for i, e in enumerate(raw):
        if not isinstance(e, dict):
            errors.append(f"entry {i}: must be an object, got {e!r}")
            continue
        kind = e.get("type")
        if kind not in TYPES:
            errors.append(f"entry {i}: 'type' must be one of {', '.join(TYPES)}, got {kind!r}")
            continue
        kind = "custom" if kind == "elite" else kind
        allowed = COMMON | (CUSTOM_DEFAULTS if kind == "custom" else {})
        for key in sorted(set(e) - set(allowed)):
            errors.append(f"entry {i}: unknown key {key!r} for type {e['type']!r}")
        full = {**{k: v for k, v in allowed.items() if v is not None}, **e, "type": kind}
        cap = full.get("capacity")
        if isinstance(cap, bool) or not isinstance(cap, int) or cap < 1:
            errors.append(f"entry {i}: 'capacity' must be an integer >= 1, got {cap!r}")
        ratio = full.get("sample_ratio")
        if not _number(ratio) or not 0 < ratio <= 1:
            errors.append(f"entry {i}: 'sample_ratio' must be a number in (0, 1], got {ratio!r}")
        if kind == "custom":
            _check_custom(i, full, errors)
        entries.append(full)
    if errors:
        return [], errors
    ratios = [float(e["sample_ratio"]) for e in entries]
    total = sum(ratios)
    if abs(total - 1.0) > 1e-6:
        errors.append(f"the sample_ratio values sum to {total:g}; they must sum to 1")
    if sum(1 for e in entries if e["type"] == "queue") > 1:
        errors.append("at most one 'queue' entry: a rollout can be queued only once")
    if not errors and batch_size > 0:
        for i, n in enumerate(batch_shares(batch_size, ratios)):
            if n == 0:
                errors.append(
                    f"entry {i}: sample_ratio {ratios[i]:g} of batch_size {batch_size} "
                    "rounds to 0 rollouts; raise the ratio or the batch size"
                )
            elif entries[i]["type"] != "queue" and entries[i]["capacity"] < n:
                errors.append(f"entry {i}: 'capacity' {entries[i]['capacity']} is below its "
                              f"share of the batch ({n} rollouts)")
    if errors:
        return [], errors
    return [ReplaySpec(**{**e, "sample_ratio": float(e["sample_ratio"])}) for e in entries], []


def match_saved_states(saved: list[ReplaySpec], states: list[dict], entries: list[ReplaySpec],
                       same_unroll: bool) -> list[tuple[dict | None, str]]:
    """Which saved replay state each of `entries` (this run's) continues from.

    `saved` and `states`: the checkpoint's entries and their `state_dict`s, in order;
    `same_unroll`: whether `--r_f_steps` is unchanged (stored rollouts have T+1 rows).
    A saved state is usable by an entry of the same kind (queue, or a storage:
    standard/custom) and capacity, whose stored rollouts (with `--checkpoint_replay`)
    have this run's length. Among the usable ones an entry takes, in this order, an
    unused one equal to it but for `sample_ratio`, the one at its own index, the first;
    so swapped, dropped and added entries find theirs. Returns per entry (the state or
    None, a note for the log: where it came from, or why it starts empty)."""
    free = set(range(min(len(saved), len(states))))

    def usable(j: int, e: ReplaySpec) -> bool:
        s = saved[j]
        return ((s.type == "queue") == (e.type == "queue") and s.capacity == e.capacity
                and (same_unroll or "storage" not in states[j]))

    out = []
    for i, e in enumerate(entries):
        options = [j for j in sorted(free) if usable(j, e)]
        equal = [j for j in options
                 if dataclasses.replace(saved[j], sample_ratio=e.sample_ratio) == e]
        pick = (equal or [j for j in options if j == i] or options or [None])[0]
        if pick is None:
            out.append((None, f"no saved replay of type {e.type} with capacity {e.capacity}"
                        + ("" if same_unroll else " and this --r_f_steps")
                        + ": it starts empty"))
            continue
        free.discard(pick)
        stored = "with its rollouts" if "storage" in states[pick] else \
            "sampling state only (no --checkpoint_replay): it refills"
        out.append((states[pick], f"continues saved entry {pick}, {stored}"))
    return out
