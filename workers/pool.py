"""The actor processes as seen from the learner: start, feed, watch, restart, stop.

Each actor has two pipes of its own: `grants` (learner -> actor: lists of free
slot indices) and `messages` (actor -> learner: the typed messages of
workers/messages.py, a `RolloutDone` per finished rollout with its episodes and
the actor's time split, or an `ActorError`). `poll()` and `close()` hand the
driver each finished rollout as a `FinishedRollout` (workers/actor_pool.py, the
contract every pool keeps).
With several policies (`--num_policies`=K) the pool gets an `ActorConfig` and weights
per policy, and actor i acts for policy i mod K: its rollouts carry that policy's id.
The learner keeps the ledger of which slots each actor holds, so when an actor
dies (an exception, or SIGKILL) its slots are reclaimed exactly and a new actor
takes its place with a fresh seed (`actor_seed`); after `max_restarts` deaths the run is
stopped with `ActorFailure`.
"""

from __future__ import annotations

import dataclasses
import signal
import time
from multiprocessing import connection

import torch

from workers.actor import ActorConfig, run_actor
from workers.actor_pool import ActorFailure, ActorPoolBase, FinishedRollout, actor_seed, per_policy
from workers.messages import ActorError, RolloutDone


@dataclasses.dataclass
class _Actor:
    actor_id: int
    incarnation: int
    process: object
    grants: connection.Connection  # learner's write end
    messages: connection.Connection  # learner's read end
    held: set[int] = dataclasses.field(default_factory=set)
    error: str | None = None


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code}"


class ActorPool(ActorPoolBase):
    def __init__(self, ctx, cfg: ActorConfig | list[ActorConfig], worker_count: int, slots,
                 weights, log, max_restarts: int = 3, resumes: int = 0):
        """`resumes`: how many times the run was resumed; actor seeds differ by it. `cfg`
        and `weights`: the one policy's, or a list with each policy's."""
        super().__init__(log)
        self.ctx = ctx
        self.resumes = resumes
        self.configs = per_policy(cfg)
        self.cfg = self.configs[0]
        self.slots = slots
        self.weights = per_policy(weights)
        self.max_restarts = max_restarts
        self._pending: list[FinishedRollout] = []
        self.stop_flag = torch.zeros(1, dtype=torch.uint8).share_memory_()
        # each actor keeps one rollout's slots in hand and one in reserve
        self.target_held = 2 * self.cfg.envs_per_worker
        self.worker_count = worker_count
        self.actors: list[_Actor] = []

    def start(self) -> None:
        self.actors = [self._spawn(i, 0) for i in range(self.worker_count)]

    def _spawn(self, actor_id: int, incarnation: int) -> _Actor:
        grants_r, grants_w = self.ctx.Pipe(duplex=False)
        messages_r, messages_w = self.ctx.Pipe(duplex=False)
        k = actor_id % len(self.configs)
        cfg = dataclasses.replace(
            self.configs[k], seed=actor_seed(self.cfg.seed, actor_id, incarnation, self.resumes))
        process = self.ctx.Process(
            target=run_actor, name=f"actor-{actor_id}", daemon=True,
            args=(actor_id, cfg, self.slots.buffers, self.weights[k], grants_r, messages_w,
                  self.stop_flag),
        )
        process.start()
        grants_r.close()  # the child's ends live in the child
        messages_w.close()
        return _Actor(actor_id, incarnation, process, grants_w, messages_r)

    # --- feeding -----------------------------------------------------------------
    def grant(self) -> None:
        """Top every live actor up to `target_held` slots."""
        for a in self.actors:
            need = self.target_held - len(a.held)
            if need <= 0 or a.process.exitcode is not None:
                continue
            given = self.slots.take(need)
            if given:
                try:
                    a.grants.send(given)
                except (BrokenPipeError, OSError):
                    self.slots.release(given)
                    continue
                a.held.update(given)

    def poll(self, timeout: float) -> list[FinishedRollout]:
        """Finished rollouts (slot indices, episodes) that arrived within `timeout` s."""
        out, self._pending = self._pending, []
        if out:
            timeout = 0.0
        ready = connection.wait([a.messages for a in self.actors if not a.messages.closed],
                                timeout)
        for a in self.actors:
            if a.messages in ready:
                out.extend(self._read(a))
        return out

    def _read(self, a: _Actor) -> list[FinishedRollout]:
        out = []
        try:
            while a.messages.poll():
                msg = a.messages.recv()
                if isinstance(msg, RolloutDone):
                    self.count_seconds(msg.seconds)
                    a.held.difference_update(msg.indices)
                    out.append(FinishedRollout(msg.indices, msg.episodes, msg.policy_id))
                elif isinstance(msg, ActorError):
                    a.error = msg.traceback
        except (EOFError, OSError):
            pass  # it died; `check` deals with it
        return out

    # --- watching ----------------------------------------------------------------
    def check(self) -> None:
        """Replace dead actors; raise ActorFailure once deaths exceed max_restarts."""
        for i, a in enumerate(self.actors):
            if a.process.exitcode is None:
                continue
            # keep what it finished before dying for the next poll; read its error report
            self._pending.extend(self._read(a))
            cause = _describe_exit(a.process.exitcode)
            detail = f":\n{a.error}" if a.error else ""
            self.slots.release(a.held)
            reclaimed = len(a.held)
            a.held.clear()
            self.restarts += 1
            if self.restarts > self.max_restarts:
                raise ActorFailure(
                    f"actor {a.actor_id} {cause}{detail}\n{self.restarts} actor deaths, more "
                    f"than --max_actor_restarts={self.max_restarts}: stopping the run"
                )
            self.log.warning(f"actor {a.actor_id} {cause}; {reclaimed} slots reclaimed; "
                             f"restarting it ({self.restarts}/{self.max_restarts}){detail}")
            a.grants.close()
            a.messages.close()
            self.actors[i] = self._spawn(a.actor_id, a.incarnation + 1)

    def pids(self) -> list[int | None]:
        """The current actor processes' pids, by actor id."""
        return [a.process.pid for a in self.actors]

    # --- stopping ----------------------------------------------------------------
    def close(self, timeout: float = 10.0) -> list[FinishedRollout]:
        """Ask every actor to stop, join them (kill after `timeout`), return what
        they sent meanwhile; every slot they held goes back to the free list."""
        if self.stop_flag[0]:
            return []  # closed already
        self.stop_flag[0] = 1
        late = []
        deadline = time.time() + timeout
        for a in self.actors:
            while a.process.exitcode is None and time.time() < deadline:
                late.extend(self.poll(0.05))  # never let an actor block on a full pipe
            if a.process.exitcode is None:
                a.process.kill()
                a.process.join(5)
        late.extend(self.poll(0))
        for a in self.actors:
            self.slots.release(a.held)
            a.held.clear()
            a.grants.close()
            a.messages.close()
        return late
