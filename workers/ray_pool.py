"""Actors on a Ray cluster (`--backend=ray`): the same envs and policy code as the
actor processes (`workers.actor.Roller`, in a `workers.ray_actor.RayRoller` on a
node), feeding the same learner.

`RayActorPool` has `workers.pool.ActorPool`'s interface, so the learner, the
replays and the batch mixer do not know which backend runs: `poll()` copies each
rollout that arrived into a free slot of the learner's SlotPool and hands back its
indices as a `FinishedRollout`.

* Requests: each Ray actor (one CPU of a node) has `in_flight` `rollout` calls
  outstanding; the learner waits on them with `ray.wait` and re-sends as they
  come back. A queued call acts with the weights of when it was sent, so more
  than one adds policy lag: 1 (the default) starts each rollout from the newest.
* Rollouts come back as numpy arrays `[T+1, E, ...]` (the fields of
  workers/slots.py), with stacked frames sent once (`workers.codec`), the
  episodes that ended and the actor's time split.
* Weights: `RayWeights.publish` (after each update) only records the model and
  version; the CPU parameters are `ray.put` once per `every` versions, when a
  request is sent, and the reference rides along with it; an actor loads them
  when the version is newer than the one it holds.
* Rollouts whose oldest row was acted by weights more than `max_policy_lag`
  updates old are dropped and counted (`stale_dropped`).
* A lost actor is restarted by Ray (its calls meanwhile fail with
  `ActorUnavailableError` and are sent again, counted in `unavailable_retries`); the
  death shows as a new pid in its results, is logged and counts toward
  `max_restarts` of the run, as with processes. An actor whose call raised is
  restarted too, and counted once, its remote traceback logged. An actor that
  returns nothing for `actor_timeout` s (unavailable, or its node gone and no node
  can place it) counts as a death too, so a run never starves silently: past
  `max_restarts` it stops with status 1.
* Placement: Ray places the actors on any node with a free CPU, or with
  `node="learner"` (`--ray_actor_node`) on the node this learner joined the cluster
  on (hard node affinity), so that a learner rank's rollouts stay on its machine.
* `close()` kills the actors and shuts down a Ray instance the pool started.
"""

from __future__ import annotations

import dataclasses
import os
import time
import warnings

import numpy as np
import torch

from workers.actor import ActorConfig
from workers.actor_pool import ActorFailure, ActorPoolBase, FinishedRollout, actor_seed
from workers.codec import unpack_frames
from workers.ray_actor import RayRoller, RayWeights, init_ray

# the least time the actors have to start (a node unpacks the working directory and
# imports torch; on a busy 2-core machine, more than 5 s)
START_S = 60.0


class RayActorPool(ActorPoolBase):
    """The actor-pool contract (workers/actor_pool.py) over Ray actors (see the module
    docstring)."""

    def __init__(self, cfg: ActorConfig, worker_count: int, slots, spec: dict,
                 weights: RayWeights, log, max_restarts: int = 3, resumes: int = 0,
                 address: str = "", max_policy_lag: int = 0, pixel_stack: int | None = None,
                 in_flight: int = 1, actor_timeout: float = 120.0, node: str = "any",
                 node_actors: int = 0):
        """`spec`: the slots' field -> (shape [T+1, ...], dtype) (`training.plan.RunPlan`);
        `pixel_stack`: C where obs are stacked frames (sent once each), else None;
        `actor_timeout`: seconds an actor may return nothing before it counts as lost;
        `node`: "any" (Ray places the actors) or "learner" (on this process's node,
        where its learner ranks run `node_actors` actors in all, these among them)."""
        super().__init__(log)
        self.cfg = cfg
        self.spec = spec
        self.worker_count = worker_count
        self.slots = slots
        self.weights = weights
        self.max_restarts = max_restarts
        self.resumes = resumes
        self.address = address
        self.max_policy_lag = max_policy_lag
        self.pixel_stack = pixel_stack
        self.in_flight_per_actor = in_flight
        self.actor_timeout = actor_timeout
        self.node = node
        self.node_actors = max(node_actors, worker_count)
        self.unavailable_retries = 0  # requests sent again while Ray restarted an actor
        self.stale_dropped = 0  # rollouts over max_policy_lag
        self.bytes_received = 0  # since the last `stats()`
        self.bytes_total = 0  # rollout bytes taken from the object store, and rollouts
        self.rollouts_total = 0
        self._stats_at = time.time()
        self._weights_put = 0  # weights.bytes_put at the last `stats()`
        self.actors: list = []
        self.in_flight: dict = {}  # ObjectRef -> actor index
        self._retry: list[tuple[float, int]] = []  # (when, actor index) to send again
        self._pids: list[int | None] = [None] * worker_count  # of each actor's process
        self._heard: list[float] = [0.0] * worker_count  # its last result, or counted death
        self._unavailable: list[bool] = [False] * worker_count  # reported as unavailable
        self._started_ray = False
        self._closed = False

    # --- starting --------------------------------------------------------------------
    def start(self) -> None:
        import ray

        self._started_ray = init_ray(self.address, max(1, self.worker_count), self.log)
        # Ray restarts a lost actor without limit; the run counts the deaths (a new pid
        # in its results) against --max_actor_restarts, as with processes
        remote = ray.remote(num_cpus=1, max_restarts=-1, max_task_retries=0)(RayRoller)
        if self.node == "learner":  # a restart too stays there
            remote = remote.options(scheduling_strategy=self._learner_node())
        self.actors = []
        for i in range(self.worker_count):
            cfg = dataclasses.replace(self.cfg,
                                      seed=actor_seed(self.cfg.seed, i, 0, self.resumes))
            self.actors.append(remote.remote(cfg, self.spec, self.pixel_stack))
        start_s = max(self.actor_timeout, START_S)
        try:
            placed = ray.get([a.where.remote() for a in self.actors], timeout=start_s)
        except ray.exceptions.GetTimeoutError:
            raise ActorFailure(f"the {self.worker_count} Ray actors did not all start within "
                               f"{start_s:g} s (--ray_actor_timeout, 60 at least): the cluster has "
                               f"{ray.available_resources().get('CPU', 0):g} free CPUs for "
                               f"them (each takes one)") from None
        for i, where in enumerate(placed):
            self.log.info(f"ray actor {i}: {self.cfg.envs_per_worker} envs on {where}")
        self._heard = [time.monotonic()] * self.worker_count

    def _learner_node(self):
        """Ray's hard node affinity to the node this learner joined the cluster on,
        once it is known to have a CPU for each actor of its learner ranks (else
        ActorFailure: Ray would wait for CPUs that never come)."""
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        node = ray.get_runtime_context().get_node_id()
        cpus = next((n["Resources"].get("CPU", 0.0) for n in ray.nodes()
                     if n["NodeID"] == node and n["Alive"]), 0.0)
        need = self.node_actors
        if cpus < need:
            ranks = " of its learner ranks" if need > self.worker_count else ""
            raise ActorFailure(
                f"--ray_actor_node=learner: this learner's Ray node ({os.uname().nodename}, "
                f"node {node[:12]}) has {cpus:g} CPUs for the {need} actors{ranks}; start "
                f"its raylet with --num-cpus={need} or more, lower --worker_count, or pass "
                "--ray_actor_node=any")
        self.log.info(f"ray: the actors stay on the learner's node {node[:12]} "
                      f"({cpus:g} CPUs)")
        return NodeAffinitySchedulingStrategy(node_id=node, soft=False)

    # --- feeding -----------------------------------------------------------------------
    def _send(self, i: int) -> None:
        if i not in self.in_flight.values() and not self._unavailable[i]:
            self._heard[i] = time.monotonic()  # idle until now (held back), not silent
        version, ref = self.weights.ref()
        self.in_flight[self.actors[i].rollout.remote(version, [ref])] = i

    def grant(self) -> None:
        """Keep `in_flight` requests outstanding per actor (an actor that Ray is
        restarting gets its requests again a little later)."""
        now = time.monotonic()
        counts = [0] * len(self.actors)
        for i in [*self.in_flight.values(), *(i for at, i in self._retry if at > now)]:
            counts[i] += 1
        self._retry = [(at, i) for at, i in self._retry if at > now]
        for i, n in enumerate(counts):
            for _ in range(self.in_flight_per_actor - n):
                self._send(i)

    def poll(self, timeout: float) -> list[FinishedRollout]:
        """The rollouts that arrived within `timeout` s, each copied into free slots (a
        rollout waits in Ray's object store while the slots are all in use)."""
        import ray

        if not self.in_flight:
            self._check_silence()
            time.sleep(timeout)
            return []
        ready, _ = ray.wait(list(self.in_flight), num_returns=len(self.in_flight),
                            timeout=timeout)
        ready = set(ready)
        out = []
        for ref in [r for r in self.in_flight if r in ready]:  # in the order sent
            if ref not in self.in_flight:  # dropped with its actor's death
                continue
            if len(self.slots.free) < self.cfg.envs_per_worker:
                for r in ready & self.in_flight.keys():  # answered; waiting for a slot
                    self._heard[self.in_flight[r]] = time.monotonic()
                break
            i = self.in_flight.pop(ref)
            try:
                result = ray.get(ref)
            except ray.exceptions.ActorUnavailableError as e:
                self._wait_for(i, e)  # restarting: its death is counted by its new pid
                continue
            except (ray.exceptions.RayActorError, ray.exceptions.RayTaskError,
                    ray.exceptions.ObjectLostError) as e:  # lost: its rollout with its node
                raised = isinstance(e, ray.exceptions.RayTaskError)
                if raised:  # its traceback, as it was on the actor's node
                    self.log.error(f"ray actor {i} raised:\n{str(e).strip()}")
                self._lost(i, f"{type(e).__name__}: {_first_line(e)}", restart=raised)
                continue
            self._heard[i] = time.monotonic()
            if self._unavailable[i]:
                self._unavailable[i] = False
                self.log.info(f"ray actor {i} is back ({self.unavailable_retries} requests "
                              f"sent again so far while actors were unavailable)")
            if self._pids[i] is not None and result["pid"] != self._pids[i]:
                self._lost(i, f"its process {self._pids[i]} died; Ray started "
                              f"{result['pid']} in its place", restart=False)
            self._pids[i] = result["pid"]
            finished = self._store(result)
            if finished is not None:
                out.append(finished)
        self._check_silence()  # after the answers: a learner that was busy is not silence
        return out

    def _store(self, result: dict) -> FinishedRollout | None:
        fields = result["fields"]
        size = sum(v.nbytes for v in fields.values())
        self.bytes_received += size
        self.bytes_total += size
        self.rollouts_total += 1
        self.count_seconds(result["seconds"])
        oldest = int(fields["version"][:-1].min())
        if self.max_policy_lag and self.weights.version - oldest > self.max_policy_lag:
            self.stale_dropped += 1
            return None
        if self.pixel_stack:
            fields = {**fields, "obs": unpack_frames(fields.pop("frames"), fields.pop("ends"),
                                                     self.pixel_stack)}
        taken = self.slots.take(self.cfg.envs_per_worker)
        index = torch.tensor(taken, dtype=torch.int64)
        with warnings.catch_warnings():  # Ray's arrays are read-only; they are only read
            warnings.simplefilter("ignore", UserWarning)
            for name, buffer in self.slots.buffers.items():
                buffer.index_copy_(1, index, torch.from_numpy(np.ascontiguousarray(fields[name])))
        return FinishedRollout(tuple(taken), result["episodes"], self.cfg.policy_id)

    def _wait_for(self, i: int, error: Exception) -> None:
        """Actor `i` is unavailable (Ray is restarting it): send its request again in
        0.5 s, counted; reported once until it answers again."""
        self.unavailable_retries += 1
        self._retry.append((time.monotonic() + 0.5, i))
        if not self._unavailable[i]:
            self._unavailable[i] = True
            self.log.warning(f"ray actor {i} unavailable ({_first_line(error)}); its request "
                             f"is sent again every 0.5 s, for up to --ray_actor_timeout="
                             f"{self.actor_timeout:g}s")

    def _check_silence(self) -> None:
        """An actor asked for a rollout (a request in flight or to be sent again) that
        returned nothing for `actor_timeout` s counts as lost (its requests in flight
        are dropped and sent again); one the learner holds back is idle, not silent."""
        now = time.monotonic()
        asked = set(self.in_flight.values()) | {i for _, i in self._retry}
        for i, heard in enumerate(self._heard):
            if i not in asked or now - heard <= self.actor_timeout:
                continue
            self._lost(i, f"no rollout for {self.actor_timeout:g} s (--ray_actor_timeout; "
                          f"{self.unavailable_retries} requests sent again while actors were "
                          f"unavailable): its node may be gone with no other to place it",
                       restart=False)

    def _lost(self, i: int, cause: str, restart: bool) -> None:
        """Count a death of actor `i` (ActorFailure past `max_restarts`), and send its
        request again; `restart`: it is alive but failed, so restart it first."""
        import ray

        self.restarts += 1
        self._heard[i] = time.monotonic()  # its silence is counted afresh from this death
        self._pids[i] = None  # the process Ray starts in its place is not another death
        for ref in [r for r, j in self.in_flight.items() if j == i]:
            del self.in_flight[ref]  # dead with it: not another death each
        self._retry = [(at, j) for at, j in self._retry if j != i]
        if self.restarts > self.max_restarts:
            raise ActorFailure(f"ray actor {i}: {cause}\n{self.restarts} actor deaths, more "
                               f"than --max_actor_restarts={self.max_restarts}: stopping the run")
        self.log.warning(f"ray actor {i} lost ({cause}); Ray restarts it and its request is "
                         f"sent again ({self.restarts}/{self.max_restarts})")
        if restart:
            ray.kill(self.actors[i], no_restart=False)
        self._retry.append((time.monotonic() + 0.5, i))

    # --- watching (a lost actor shows up as an error of its request in `poll`; Ray
    # actors are not our processes, so they have no pids here) ------------------------
    def stats(self) -> dict[str, float]:
        """`pipeline/` scalars since the previous call: rollout bytes per second taken
        from the object store and parameter bytes per second put into it (what each
        actor node fetches), and the rollouts dropped for their policy lag so far."""
        now = time.time()
        seconds = max(now - self._stats_at, 1e-9)
        rate = self.bytes_received / seconds
        weights = (self.weights.bytes_put - self._weights_put) / seconds
        self.bytes_received, self._weights_put, self._stats_at = 0, self.weights.bytes_put, now
        return {"pipeline/ray_bytes_per_s": rate, "pipeline/ray_weights_bytes_per_s": weights,
                "pipeline/ray_stale_dropped": float(self.stale_dropped),
                "pipeline/ray_unavailable_retries": float(self.unavailable_retries)}

    # --- stopping ----------------------------------------------------------------------
    def close(self, timeout: float = 10.0) -> list[FinishedRollout]:
        """Kill the actors (requests in flight are dropped, uncounted; each closes its
        envs first, after the request it is playing, within `timeout`) and shut down a
        Ray instance this pool started."""
        if self._closed:
            return []
        self._closed = True
        try:
            import ray

            if ray.is_initialized():
                closing = [a.close.remote() for a in self.actors]
                ray.wait(closing, num_returns=len(closing), timeout=timeout)
                for a in self.actors:
                    ray.kill(a, no_restart=True)
                if self._started_ray:
                    ray.shutdown()
        finally:
            self.in_flight.clear()
        return []


def _first_line(error: Exception) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
