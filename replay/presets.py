"""`--replays`: named replay mixes, in the seed platform's `--replay_parameters` language.

One home for the mixes that `bench/replays.py` compares and users ask for by name:

    python main.py --env=MinAtar/Breakout-v1 --replays=elite3

Each is JSON for `--replay_parameters` (replay/config.py). Every mix but `queue`
takes half of each batch fresh from the queue and half from a storage replay of
1000 rollouts (the seed README's example capacity), so it trains on each fresh
rollout twice on average (replay ratio 2: learner samples per env sample).
"""

from __future__ import annotations

import json

QUEUE = {"type": "queue", "capacity": 1}
STORAGE = {"capacity": 1000, "sample_ratio": 0.5}


def _mix(**storage) -> str:
    """Queue 0.5 + one storage replay of 1000 rollouts at 0.5."""
    return json.dumps([{**QUEUE, "sample_ratio": 0.5}, {**STORAGE, **storage}])


def _elite(**options) -> str:
    return _mix(type="custom", sample_strategy="elite_sampling", **options)


PRESETS: dict[str, str] = {
    # on-policy data only: what a run does without --replays
    "queue": json.dumps([{**QUEUE, "sample_ratio": 1}]),
    # uniform experience replay
    "standard": _mix(type="standard"),
    # elite sampling on ln_norm distances, the seed's four strategies (README: Replays)
    **{f"elite{i}": _elite(dist_function="ln_norm", elite_sampling_strategy=f"strategy{i}")
       for i in range(1, 5)},
    # elite sampling (strategy 3, the default) on the other two distances
    "elite_cos": _elite(dist_function="cos_dist"),
    "elite_kl": _elite(dist_function="kl_div"),
    # attentive experience replay: rollouts whose states look like the current ones
    "attentive": _mix(type="custom", sample_strategy="attentive_sampling"),
    # uniform sampling; a full replay overwrites its most off-policy rollout
    "elite_insertion": _mix(type="custom", sample_strategy="uniform",
                            insert_strategy="elite_insertion"),
}

