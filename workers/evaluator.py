"""The evaluation worker: the current policy's score on whole games, beside training.

Every `--eval_interval` env steps the learner copies its model into the
evaluator's own `SharedWeights` (only then: training publishes nothing extra, and
the Ray backend is served the same way) and asks for an evaluation. The worker, a
process of its own, pulls those weights and plays `--eval_episodes` whole games
(no life-loss endings, unclipped scores: test mode's env options) with actions
sampled from the policy or, with `--eval_policy=greedy`, the most likely one. It
sends back an `EvalResult`. It runs at a lower CPU priority than training
(`NICENESS`). One evaluation runs at a time: a request that comes due
while one is running waits for it. Evaluations also take at most a duty share of
the wall time (`duty_cap`: MAX_DUTY on a machine whose cores the actors and
learners fill, more for each core left free): after one that took D seconds the
next waits until D / duty seconds after that one began (its cost to training is
about the duty times the cost while it runs). Whatever delays a due evaluation is
logged, with the due points it passed over. At the end of a run the final policy
is evaluated too (`request_final`), unless the last evaluation already had its
weights. A `--serial` run, which waits for each evaluation anyway, has no cap, so
its eval.csv repeats bit for bit.
An evaluator that dies is logged and restarted, `MAX_RESTARTS` times, then left
off; training goes on. With several policies (`--num_policies`) it holds a model of
each: at each due point it evaluates every policy in turn, one evaluation at a time,
each under the duty cap, and each result names its policy.

`play` is also test mode's (`training/evaluate.py`).
"""

from __future__ import annotations

import dataclasses
import os
import signal
import time
from multiprocessing import connection
from typing import NamedTuple

import numpy as np
import torch

from agents.model_spec import ModelSpec
from agents.networks import step_model
from workers.actor import die_with_parent
from workers.actor_pool import per_policy
from workers.weights import SharedWeights
from wrappers.envs import EnvOptions, make_batched_env
from wrappers.video import VideoSink


def play(model, env, episodes: int, greedy: bool, seed: int, video: VideoSink | None = None,
         video_games: int = 0) -> list[tuple[float, int]]:
    """Play `episodes` games over env.num_envs envs; (return, length in env steps).
    Each env has a fixed quota of games, so short games are not over-represented.
    Env 0's first `video_games` games go to `video`."""
    n = env.num_envs
    quotas = np.array([episodes // n + (1 if i < episodes % n else 0) for i in range(n)])
    done = np.zeros(n, dtype=np.int64)
    results: list[tuple[float, int]] = []
    gen = torch.Generator().manual_seed(seed)
    obs_np = env.reset()
    obs = torch.from_numpy(obs_np)
    state, starts = model.initial_state(n), torch.ones(n, dtype=torch.bool)
    with torch.inference_mode():
        while (done < quotas).any():
            if video is not None and done[0] < video_games:
                video.add(env.frame(obs_np, 0))
            logits, _, _, state = step_model(model, obs, state, starts)
            policy = model.distribution(logits)
            action = policy.mode() if greedy else policy.sample(gen)
            step = env.step(action.numpy())
            obs_np = step.obs
            obs = torch.from_numpy(obs_np)
            starts = torch.from_numpy(step.terminated | step.truncated)
            for i, ret, length in step.episodes:
                if done[i] < quotas[i]:
                    done[i] += 1
                    results.append((ret, length))
    return results


@dataclasses.dataclass(frozen=True)
class EvalConfig:
    env_id: str
    env_options: EnvOptions  # test mode's: whole games
    episodes: int
    num_envs: int
    greedy: bool
    models: tuple[ModelSpec, ...]  # one per policy
    seed: int


class EvalResult(NamedTuple):
    """One evaluation of policy `policy_id`: requested at `env_steps`, played by
    weights `version`."""

    env_steps: int
    version: int
    returns: list[float]
    lengths: list[int]
    policy_id: int = 0


def run_evaluator(cfg: EvalConfig, weights: list[SharedWeights], requests, results) -> None:
    """Process entry point: one evaluation per request (env steps, policy id) read from
    the `requests` pipe, each answered on `results`; ends when the pipe closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    die_with_parent()
    # background work. On Pong (2 cores, 2 actors, a 2-thread learner) it did not
    # lower the evaluator's measured cost: 14.4% of training time at nice 10 against
    # 13.4% at the learner's priority, an evaluation every 37.5k env steps (README)
    os.nice(NICENESS)
    torch.set_num_threads(1)
    models = [spec.build().eval() for spec in cfg.models]
    env = make_batched_env(cfg.env_id, cfg.num_envs, cfg.env_options, seed=cfg.seed)
    try:
        k = 0
        while True:
            env_steps, policy_id = requests.recv()
            model = models[policy_id]
            version = weights[policy_id].pull(model, -1)
            games = play(model, env, cfg.episodes, cfg.greedy, cfg.seed + k)
            results.send(EvalResult(env_steps, version, [float(r) for r, _ in games],
                                    [int(n) for _, n in games], policy_id))
            k += 1
    except (EOFError, BrokenPipeError, OSError):
        pass  # the learner closed the pipes
    finally:
        env.close()


MAX_RESTARTS = 3
NICENESS = 10  # the evaluator's CPU priority below training's
# the share of wall time evaluations may take: with Pong on 2 cores training ran 16%
# slower while one was running, so a quarter of the time costs it about 4%
MAX_DUTY = 0.25


def duty_cap(cores: int, busy: int) -> float:
    """The share of the wall time evaluations may take on `cores` cores of which the
    actors and learners keep `busy` (one each): MAX_DUTY, and MAX_DUTY more for each
    core left free (no cap, 1.0, from 3 free cores up)."""
    return min(1.0, MAX_DUTY * (1 + max(0, cores - busy)))


class Evaluator:
    """The learner's side: `maybe_request` when training passes the next multiple of
    `interval` env steps, `poll` for results, `close` at the end."""

    def __init__(self, ctx, cfg: EvalConfig, models, interval: int, log,
                 next_at: int, max_duty: float | None = None):
        """`models`: the acting model of each policy (or the one policy's)."""
        self.ctx = ctx
        self.max_duty = max_duty  # None: no cap (see the module docstring)
        self.not_before = 0.0  # time.time() before which no evaluation starts
        self.cfg = cfg
        self.interval = interval
        self.log = log
        self.next_at = next_at  # env steps of the next evaluation
        self.weights = [SharedWeights(m) for m in per_policy(models)]
        self.restarts = 0
        self.busy_since: float | None = None
        self.process = None
        self.versions: dict[int, int] = {}  # per policy: the weights of its newest request
        self.pending: list[int] = []  # policies still to evaluate at the current due point
        self.asked = 0  # the policy of the newest request
        self._told: set[tuple[int, bool]] = set()  # (due point, busy) already logged

    def start(self) -> None:
        requests_r, self.requests = self.ctx.Pipe(duplex=False)
        self.results, results_w = self.ctx.Pipe(duplex=False)
        cfg = dataclasses.replace(self.cfg, seed=self.cfg.seed + 7919 * self.restarts)
        self.process = self.ctx.Process(target=run_evaluator, name="evaluator", daemon=True,
                                        args=(cfg, self.weights, requests_r, results_w))
        self.process.start()
        requests_r.close()
        results_w.close()
        self.busy_since = None

    def maybe_request(self, models, versions, env_steps: int, policy_steps=None) -> bool:
        """Ask for an evaluation if `env_steps` reached the next due point (then of each
        policy in turn: `models` and `versions` list them, or are the one policy's),
        none is running and the duty cap allows it (a due one waits for both, and what
        it waits for is logged once); whether it asked. An evaluation is recorded at
        `env_steps`, or at its policy's own env steps in `policy_steps`."""
        if self.process is None or (not self.pending and env_steps < self.next_at):
            return False
        now = time.time()
        if self.busy_since is not None or now < self.not_before:
            busy = self.busy_since is not None
            if not self.pending and (self.next_at, busy) not in self._told:
                self._told.add((self.next_at, busy))
                why = "the evaluation in flight" if busy else \
                    f"the duty cap ({self.max_duty:.0%} of the wall time): " \
                    f"{self.not_before - now:.0f} s"
                self.log.info(f"evaluation due at {self.next_at:,} env steps waits for {why}")
            return False
        models, versions = per_policy(models), per_policy(versions)
        fresh = not self.pending
        k = self.pending.pop(0) if self.pending else 0
        steps = env_steps if policy_steps is None else policy_steps[k]
        if not self._send(models[k], versions[k], steps, k):
            if not fresh:
                self.pending.insert(0, k)
            return False
        if fresh:
            passed = (env_steps - self.next_at) // self.interval
            if passed:
                self.log.info(f"evaluation at {env_steps:,} env steps: {passed} due point(s) "
                              f"of --eval_interval={self.interval:,} passed while it waited")
            self.next_at = (env_steps // self.interval + 1) * self.interval
            self.pending = list(range(1, len(models)))
        return True

    def request_final(self, models, versions, env_steps: int, policy_steps=None) -> bool:
        """At the end of a run: ask for an evaluation of the final weights of the first
        policy whose `versions` entry was not the last asked for, whatever the interval
        and the duty cap, unless one is still running; whether it asked (call it again,
        once that one is done, for the next policy)."""
        if self.process is None or self.busy_since is not None:
            return False
        models, versions = per_policy(models), per_policy(versions)
        for k, version in enumerate(versions):
            if self.versions.get(k) != version:
                steps = env_steps if policy_steps is None else policy_steps[k]
                return self._send(models[k], version, steps, k)
        return False

    def _send(self, model: torch.nn.Module, version: int, env_steps: int,
              policy_id: int = 0) -> bool:
        self.weights[policy_id].publish(model, version)
        try:
            self.requests.send((env_steps, policy_id))
        except (BrokenPipeError, OSError):
            return False  # dead: `poll` restarts it
        self.busy_since = time.time()
        self.versions[policy_id] = version
        self.asked = policy_id
        return True

    def poll(self) -> list[EvalResult]:
        """Finished evaluations; restarts a dead evaluator (logged)."""
        out = []
        if self.process is None:
            return out
        try:
            while self.results.poll():
                out.append(self.results.recv())
                if self.max_duty and self.busy_since is not None:
                    took = time.time() - self.busy_since
                    self.not_before = self.busy_since + took / self.max_duty
                self.busy_since = None
        except (EOFError, OSError):
            pass
        if self.process.exitcode is not None:
            code = self.process.exitcode
            self.requests.close()
            self.results.close()
            self.restarts += 1
            if self.restarts > MAX_RESTARTS:
                self.log.error(f"the evaluator exited with code {code}, {self.restarts} times: "
                               "no more evaluations in this run; training goes on")
                self.process = None
                return out
            self.log.warning(f"the evaluator exited with code {code}; restarting it "
                             f"({self.restarts}/{MAX_RESTARTS}); training goes on")
            self.start()
        return out

    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    def close(self) -> None:
        """Close the pipes (the worker ends after the game in hand) and join it."""
        if self.process is None:
            return
        self.requests.close()
        self.results.close()
        self.process.join(2)
        if self.process.exitcode is None:
            self.process.kill()
            self.process.join(5)
        self.process = None


def wait_ready(evaluator: Evaluator, timeout: float, stop=lambda: False) -> list[EvalResult]:
    """Results of the evaluation in flight, waiting for it up to `timeout` s or until
    `stop()` (at the end of a run, and after each request of a `--serial` run)."""
    deadline = time.time() + timeout
    out: list[EvalResult] = []
    while evaluator.busy_since is not None and evaluator.process is not None \
            and time.time() < deadline and not stop():
        connection.wait([evaluator.results], min(1.0, max(0.0, deadline - time.time())))
        out += evaluator.poll()
    return out
