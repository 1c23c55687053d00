"""Parse and check `--replay_parameters`, the seed platform's JSON replay language.

    [{"type": "queue", "capacity": 1, "sample_ratio": 0.5},
     {"type": "standard", "capacity": 1000, "sample_ratio": 0.5}]

`parse_replay_parameters` returns the entries and a list of every problem found,
each naming the entry's index and key.
"""

from __future__ import annotations

import json

BUILT_TYPES = ("queue",)
KNOWN_TYPES = ("queue", "standard", "custom", "elite")
COMMON_KEYS = {"type", "capacity", "sample_ratio"}


def parse_replay_parameters(text: str, batch_size: int) -> tuple[list[dict], list[str]]:
    errors: list[str] = []
    try:
        entries = json.loads(text)
    except json.JSONDecodeError as e:
        return [], [f"not valid JSON ({e}); expected a list like "
                    '\'[{"type": "queue", "capacity": 1, "sample_ratio": 1}]\'']
    if not isinstance(entries, list) or not entries:
        return [], ["must be a non-empty JSON list of replay objects"]
    ratios = []
    for i, e in enumerate(entries):
        where = f"entry {i}"
        if not isinstance(e, dict):
            errors.append(f"{where}: must be an object, got {e!r}")
            continue
        kind = e.get("type")
        if kind not in KNOWN_TYPES:
            errors.append(f"{where}: 'type' must be one of {', '.join(KNOWN_TYPES)}, got {kind!r}")
        elif kind not in BUILT_TYPES:
            errors.append(f"{where}: replay type {kind!r} is not available yet; use 'queue'")
        for key in sorted(set(e) - COMMON_KEYS):
            if kind in BUILT_TYPES:
                errors.append(f"{where}: unknown key {key!r} for type {kind!r}")
        cap = e.get("capacity", 1)
        if isinstance(cap, bool) or not isinstance(cap, int) or cap < 1:
            errors.append(f"{where}: 'capacity' must be an integer >= 1, got {cap!r}")
        ratio = e.get("sample_ratio")
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0 < ratio <= 1:
            errors.append(f"{where}: 'sample_ratio' must be a number in (0, 1], got {ratio!r}")
        else:
            ratios.append(float(ratio))
    if errors:
        return entries, errors
    total = sum(ratios)
    if abs(total - 1.0) > 1e-6:
        errors.append(f"the sample_ratio values sum to {total:g}; they must sum to 1")
    if sum(1 for e in entries if e["type"] == "queue") > 1:
        errors.append("at most one 'queue' entry: a rollout can be queued only once")
    if not errors and batch_size > 0:
        from replay.mixer import batch_shares

        for i, n in enumerate(batch_shares(batch_size, ratios)):
            if n == 0:
                errors.append(
                    f"entry {i}: sample_ratio {ratios[i]:g} of batch_size {batch_size} "
                    "rounds to 0 rollouts; raise the ratio or the batch size"
                )
    return entries, errors


def build_replays(entries: list[dict], pool) -> tuple[list, list[float]]:
    from replay.queue import QueueReplay

    replays, ratios = [], []
    for e in entries:
        if e["type"] == "queue":
            replays.append(QueueReplay(pool, e.get("capacity", 1)))
        ratios.append(float(e["sample_ratio"]))
    return replays, ratios
