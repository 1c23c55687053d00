"""The `standard` and `custom` replays: a RolloutStorage plus an insertion rule and a
sampling strategy (dopamine's split of storage from the sampling distribution).

* standard: FIFO ring buffer, uniform sampling without replacement within a batch.
* custom (alias elite), by `sample_strategy`:
  - uniform: as standard;
  - elite_sampling: draw lambda*n distinct candidates uniformly, recompute their
    features with the *current* policy in one batched no-grad pass, measure the
    distance to the features the behaviour policy stored, and pick n by
    `elite_sampling_strategy` 1-4 (replay/sampling.py). The entry's `features`
    says which: "logits" (the stored field "logits", float32 [T+1, A]) or "hidden"
    (the stored field "features", the policy path's last hidden layer, float16
    [T+1, H], compared as float32); `features_fn` must compute the same kind;
  - attentive_sampling (Sun et al., 2020): the same, with the distance of each
    candidate to the states the actors visit now (the newest observations they
    sent), in feature space.
  Distances are the mean over `feature_steps` evenly spaced rows of each candidate
  (first and last included; all rows if it is >= T+1), an unbiased estimate of the
  mean over all steps at a fraction of the cost; only the n chosen rollouts are
  then copied whole.
  lambda anneals from `lambda_batch_multiplier` to 1 over `alfa_annealing_factor` x
  the learning-rate schedule length, counted in learner updates (`set_updates`).
  `insert_strategy=elite_insertion`: once full, the most off-policy of
  `elite_batch_size` random residents is overwritten instead of the oldest. One
  ranking of them serves the next `elite_batch_size // EVICTIONS_PER_RANKING` (at
  least 1) inserts, most off-policy first: ranking at every insert (a feature pass
  over 4 x 32 observations per stored rollout) left the MinAtar learner 0.42-0.60
  of uniform sampling's updates/s, now 0.79 (`standard`: 0.91; bench/replay.py).

A replay copies what it keeps out of the shared slot at `add`, so the slot is free
again at once: slot lifetime never depends on replay capacity.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import torch

from agents.distributions import Categorical
from replay import sampling
from replay.config import ReplaySpec
from replay.storage import FramePoolExhaustedError, RolloutStorage

RECENT_STATES = 64  # newest observations kept for attentive sampling
EVICTIONS_PER_RANKING = 4  # elite insertion: a ranking's most off-policy quarter is evicted


def stored_fields(entry: ReplaySpec, spec: dict) -> dict:
    """The fields a replay of `entry` stores: `spec` without "features" unless the
    entry reads stored hidden features (the other replays do not pay 2H bytes per
    step)."""
    if entry.stores_hidden_features:
        return spec
    return {k: v for k, v in spec.items() if k != "features"}


def chain_heads(entry: ReplaySpec, max_chain_heads: int) -> int:
    """Frame-pool sizing: out-of-order eviction (elite insertion) lets any rollout head
    a chain of shared frames; FIFO eviction at most `max_chain_heads`."""
    return entry.capacity if entry.insert == "elite_insertion" else max_chain_heads


def planned_bytes(entry: ReplaySpec, spec: dict, unroll_length: int,
                  pixel_stack: int | None, max_chain_heads: int) -> int:
    """Bytes a StorageReplay of `entry` will allocate, for the slots' `spec` (with
    "features" when some entry uses hidden features): `RolloutStorage`'s formula."""
    return RolloutStorage.planned_nbytes(entry.capacity, unroll_length,
                                         stored_fields(entry, spec), pixel_stack,
                                         chain_heads(entry, max_chain_heads))


class StorageReplay:
    """A `replay.base.Replay` that copies rollouts out of their slots."""

    replayed = True  # its samples are re-used data (CLEAR clones on them)

    def __init__(self, entry: ReplaySpec, pool, spec: dict, unroll_length: int,
                 pixel_stack: int | None, max_chain_heads: int, fill_in_factor: float,
                 features_fn=None, schedule_updates: float = 1.0, seed: int = 0,
                 distribution: type = Categorical):
        """
        Args:
            entry: a `--replay_parameters` entry of type standard or custom.
            pool: the SlotPool (gather / release).
            spec: `workers.slots.rollout_spec(...)`; with "features" ((T+1, H)
                float16) when the entry's `features` is "hidden".
            pixel_stack: frames per stacked obs (Atari), or None.
            max_chain_heads: storage frame-pool sizing (see replay/storage.py).
            features_fn: (obs [..., *obs_shape], core_state [..., *state] or None) ->
                float32 [..., K] under the current policy (no grad), of the entry's
                `features` kind: logits (K = A) or the hidden layer (K = H); needed by
                elite and attentive sampling and insertion. With "core_state" in the
                spec (a model with state) it gets the stored state of each row.
            schedule_updates: the learning-rate schedule length in learner updates.
            distribution: the class of the stored params (agents/distributions.py),
                for the `kl_div` distance.
        """
        self.entry = entry
        self.pool = pool
        self.capacity = entry.capacity
        self.kind = entry.type
        self.strategy = entry.strategy
        self.insert = entry.insert
        self.fill_in = max(1, int(fill_in_factor * self.capacity))
        # the stored behaviour features that distances compare with features_fn's
        self.feature_field = "features" if entry.stores_hidden_features else "logits"
        if self.feature_field not in spec:
            raise ValueError("'features': 'hidden' needs the rollouts to carry them: build "
                             "the spec with rollout_spec(..., feature_size=hidden_size)")
        self.storage = RolloutStorage(self.capacity, unroll_length, stored_fields(entry, spec),
                                      pixel_stack, chain_heads(entry, max_chain_heads))
        self.features_fn = features_fn
        self.distribution = distribution
        self.schedule_updates = schedule_updates
        self.counts = torch.zeros(self.capacity, dtype=torch.int64)
        self.next_position = 0
        self.updates = 0
        self.dropped = 0  # rollouts the frame pool had no room for
        self.generator = torch.Generator().manual_seed(seed)
        self.lock = threading.Lock()
        obs_shape, obs_dtype = spec["obs"]
        self.recent = torch.zeros((RECENT_STATES, *obs_shape[1:]), dtype=obs_dtype)
        self.stateful = "core_state" in spec
        self.recent_state = torch.zeros(RECENT_STATES, *spec["core_state"][0][1:]) \
            if self.stateful else None
        self.recent_count = 0
        self.victims: list[int] = []  # elite insertion: ranked positions to overwrite next
        steps = min(entry.feature_steps, unroll_length + 1)
        self.feature_rows = torch.linspace(0, unroll_length, steps).round().long().unique()

    # --- inserting -------------------------------------------------------------
    def add(self, index: int, gather: Callable[[], dict[str, torch.Tensor]] | None = None
            ) -> bool:
        """Copy slot `index` into the storage; False: the slot is not kept. `gather`
        returns the slot's copy `[T+1, 1, ...]` (the mixer gathers it once for every
        storage replay); without it the slot is gathered here."""
        if gather is None:
            return self.add_rollout(self.pool.gather(torch.tensor([index])))
        return self.add_rollout(gather())

    def add_rollout(self, batch: dict[str, torch.Tensor]) -> bool:
        """Store column 0 of `batch` (`[T+1, 1, ...]`, a copy of a slot); False."""
        with self.lock:
            self.recent[self.recent_count % RECENT_STATES] = batch["obs"][-1, 0]
            if self.stateful:
                self.recent_state[self.recent_count % RECENT_STATES] = batch["core_state"][-1, 0]
            self.recent_count += 1
            position = self._insert_position()
            try:
                self.storage.put(batch, 0, position)
            except FramePoolExhaustedError:
                self.dropped += 1
                return False
            self.counts[position] = 0
            if position == self.next_position:
                self.next_position = (self.next_position + 1) % self.capacity
        return False

    def _insert_position(self) -> int:
        if self.insert == "fifo" or len(self.storage) < self.capacity:
            return self.next_position
        if not self.victims:
            resident = self.storage.resident_positions()
            k = min(self.entry.elite_batch_size, len(resident))
            cand = resident[sampling.draw_candidates(len(resident), k, self.generator)]
            order = torch.sort(self._distances(cand), descending=True, stable=True).indices
            self.victims = cand[order[:max(1, k // EVICTIONS_PER_RANKING)]].tolist()
        return self.victims.pop(0)

    # --- sampling ----------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.storage)

    def ready(self, n: int) -> bool:
        return len(self.storage) >= max(n, self.fill_in)

    def set_updates(self, updates: int) -> None:
        self.updates = updates

    def current_lambda(self) -> float:
        if self.strategy == "uniform":
            return 1.0
        return sampling.annealed_lambda(self.entry.lambda_batch_multiplier, self.updates,
                                        self.schedule_updates, self.entry.alfa_annealing_factor)

    def _distances(self, positions: torch.Tensor) -> torch.Tensor:
        """float32 [M]: how off-policy (elite) or how far from now (attentive) the
        rollouts at `positions` are, over `feature_rows`, in the entry's feature kind
        (stored behaviour vs current for elite; candidates vs recent states for
        attentive, both current)."""
        attentive = self.strategy == "attentive_sampling"
        fields = ("obs",) if attentive else ("obs", self.feature_field)
        fields += ("core_state",) if self.stateful else ()
        batch = self.storage.get(positions, rows=self.feature_rows, fields=fields)
        current = self.features_fn(batch["obs"], batch.get("core_state"))
        if attentive:
            n = min(self.recent_count, RECENT_STATES)
            recent_state = self.recent_state[:n] if self.stateful else None
            return sampling.attentive_distances(
                current, self.features_fn(self.recent[:n], recent_state))
        behaviour = batch[self.feature_field].float()
        if self.entry.dist_function == "ln_norm":
            return sampling.ln_norm(behaviour, current, self.entry.p)
        if self.entry.dist_function == "kl_div":
            return sampling.kl_div(behaviour, current, self.distribution)
        return sampling.DISTANCES[self.entry.dist_function](behaviour, current)

    def sample(self, n: int) -> dict[str, torch.Tensor]:
        """n rollouts as a batch `[T+1, n, ...]`."""
        with self.lock:
            resident = self.storage.resident_positions()
            m = sampling.candidate_count(n, self.current_lambda(), len(resident))
            cand = resident[sampling.draw_candidates(len(resident), m, self.generator)]
            if self.strategy == "uniform":
                pick = torch.arange(n) % m
            else:
                number = int(self.entry.elite_sampling_strategy[-1])
                pick = sampling.select(number, self._distances(cand), self.counts[cand], n)
            chosen = cand[pick]
            self.counts.index_add_(0, chosen, torch.ones(n, dtype=torch.int64))
            return self.storage.get(chosen)

    def release_all(self) -> int:
        return 0  # holds no slot

    # --- reporting and checkpoints ------------------------------------------------
    def stats(self) -> dict[str, float]:
        """fill: len / capacity; dropped: rollouts the frame pool had no room for."""
        return {"fill": len(self) / self.capacity, "dropped": float(self.dropped)}

    def describe(self) -> str:
        size = self.storage.nbytes()
        return (f"{self.kind}, {self.strategy}: {self.capacity} rollouts, "
                f"{size / 2**20:.1f} MiB, {self.storage.bytes_per_step():.0f} bytes per step")

    def stored_bytes(self) -> int:
        return self.storage.nbytes()

    def state_dict(self, include_data: bool = False) -> dict:
        state = {"counts": self.counts.clone(), "next_position": self.next_position,
                 "updates": self.updates, "lambda": self.current_lambda(),
                 "recent": self.recent.clone(), "recent_count": self.recent_count,
                 **({"recent_state": self.recent_state.clone()} if self.stateful else {}),
                 "generator": self.generator.get_state(), "dropped": self.dropped}
        if include_data:
            state["storage"] = self.storage.state_dict()
        return state

    def state_problem(self, state: dict) -> str | None:
        """Why `state` (a `state_dict`) cannot be loaded into this replay, or None."""
        if tuple(state["counts"].shape) != (self.capacity,):
            return (f"it was saved with capacity {len(state['counts'])}, this one has "
                    f"{self.capacity}")
        if tuple(state["recent"].shape) != tuple(self.recent.shape):
            return "its observations have another shape"
        if self.stateful != ("recent_state" in state) or (
                self.stateful and state["recent_state"].shape != self.recent_state.shape):
            return "its model state has another shape (--use_lstm, --lstm_size)"
        if "storage" in state:
            return self.storage.state_problem(state["storage"])
        return None

    def load_state_dict(self, state: dict) -> None:
        problem = self.state_problem(state)
        if problem:
            raise ValueError(f"replay state does not fit: {problem}")
        self.counts.copy_(state["counts"])
        self.next_position = state["next_position"]
        self.updates = state["updates"]
        self.recent.copy_(state["recent"])
        if self.stateful:
            self.recent_state.copy_(state["recent_state"])
        self.recent_count = state["recent_count"]
        self.generator.set_state(state["generator"])
        self.victims = []
        self.dropped = state.get("dropped", 0)
        if "storage" in state:
            self.storage.load_state_dict(state["storage"])
