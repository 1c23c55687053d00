"""The Ray side of `--backend=ray` (the pool that drives it: workers/ray_pool.py):
joining or starting Ray (`init_ray`), a Ray actor's body (`RayRoller`: the same envs
and policy code as an actor process, `workers.actor.Roller`), and the weights it acts
with: `RayWeights` puts the learner's parameters into Ray's object store, a
`HeldWeights` in each actor holds the newest it was sent.

A rollout comes back as numpy arrays `[T+1, E, ...]` (the fields of workers/slots.py),
stacked frames sent once each (`workers.codec`), with the episodes that ended, the
actor's time split and its pid (a new pid: Ray restarted it).
"""

from __future__ import annotations

import dataclasses
import os
import warnings

import torch

from workers.actor import ActorConfig, Roller
from workers.actor_pool import SEED_SPACE
from workers.codec import pack_frames

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class HeldWeights:
    """What a Ray actor's policy pulls from (`workers.weights.SharedWeights`'s `pull`):
    the newest (version, state dict) it was sent."""

    def __init__(self):
        self.version = -1
        self.state: dict | None = None

    def pull(self, model: torch.nn.Module, have: int) -> int:
        if self.state is None or self.version <= have:
            return have
        model.load_state_dict(self.state)
        return self.version


class RayRoller:
    """The body of a Ray actor: a `Roller` and a buffer `[T+1, E, ...]` per field."""

    def __init__(self, cfg: ActorConfig, spec: dict, pixel_stack: int | None):
        import ray

        torch.set_num_threads(1)
        with warnings.catch_warnings():  # Ray 2.60's property reads its own deprecated one
            warnings.simplefilter("ignore", DeprecationWarning)
            restarted = ray.get_runtime_context().was_current_actor_reconstructed
        if restarted:  # new streams
            seed = (cfg.seed + 1_000_003 * (1 + os.getpid() % 997)) % SEED_SPACE
            cfg = dataclasses.replace(cfg, seed=seed)
        self.cfg = cfg
        self.pixel_stack = pixel_stack
        self.weights = HeldWeights()
        self.roller = Roller(cfg, self.weights)
        e = cfg.envs_per_worker
        self.buffers = {name: torch.zeros((shape[0], e, *shape[1:]), dtype=dtype)
                        for name, (shape, dtype) in spec.items()}

    def where(self) -> str:
        import ray

        return f"{os.uname().nodename} (node {ray.get_runtime_context().get_node_id()[:12]})"

    def rollout(self, version: int, weights: list) -> dict:
        """One rollout with the weights of `version` (`weights`: [an ObjectRef of the
        state dict], in a list so that Ray passes the reference, fetched only when
        newer than what is held)."""
        if version > self.weights.version:
            import ray

            self.weights.state = ray.get(weights[0])
            self.weights.version = version

        def write(t, row):
            for name, value in row.items():
                self.buffers[name][t].copy_(value)

        episodes = self.roller.rollout(write)
        out = {name: b.numpy() for name, b in self.buffers.items() if name != "obs"}
        obs = self.buffers["obs"].numpy()
        if self.pixel_stack:
            out["frames"], out["ends"] = pack_frames(obs)
        else:
            out["obs"] = obs
        return {"fields": out, "episodes": episodes, "seconds": self.roller.take_seconds(),
                "pid": os.getpid()}

    def close(self) -> None:
        """Close its envs before it is killed (a ViZDoom game killed unclosed leaves its
        entries in /dev/shm)."""
        self.roller.close()


class RayWeights:
    """The learner's side of the weights: `publish` is cheap; `ref()` puts the CPU
    parameters into the object store once per `every` versions."""

    def __init__(self, model: torch.nn.Module, every: int = 1):
        self.model = model
        self.every = every
        self.version = -1
        self._put: tuple[int, object] | None = None
        self.puts = 0  # parameter sets put, and their bytes (each node fetches each once)
        self.bytes_put = 0

    def publish(self, model: torch.nn.Module, version: int) -> None:
        self.model, self.version = model, version

    def ref(self) -> tuple[int, object]:
        """(version, ObjectRef) of the newest parameters put, putting them if they are
        `every` versions behind (or none were put)."""
        import ray

        if self._put is None or self.version - self._put[0] >= self.every:
            state = {k: v.detach().to("cpu", copy=True) for k, v in
                     self.model.state_dict().items()}
            self._put = (self.version, ray.put(state))
            self.puts += 1
            self.bytes_put += sum(v.nbytes for v in state.values())
        return self._put


def init_ray(address: str, num_cpus: int, log) -> bool:
    """Connect to Ray: `address` "" starts a local instance (returns True: the caller
    shuts it down), "auto" or host:port joins a cluster and ships this directory
    to its nodes (their Python packages must be installed, see the README)."""
    import ray

    if ray.is_initialized():  # by this process already (data-parallel rank 0 starts it)
        return False
    # log_to_driver: what an actor prints on its node (a crash's last words) reaches
    # this console, prefixed with its pid and node's IP
    common = {"include_dashboard": False, "log_to_driver": True, "logging_level": "WARNING"}
    if address:
        ray.init(address=address, runtime_env={
            "working_dir": ROOT, "excludes": [".venv", ".git", "results", "bench/curves",
                                              "*.pt", "*.whl"]}, **common)
        log.info(f"ray: joined the cluster at {address}: {ray.cluster_resources()}")
        return False
    # "local": a new instance even where a cluster runs on this machine (ray.init()
    # would join it, and refuse num_cpus)
    ray.init(address="local", num_cpus=num_cpus, object_store_memory=512 * 2**20,
             runtime_env={"env_vars": {"PYTHONPATH": ROOT}}, **common)
    log.info(f"ray: started a local instance with {num_cpus} CPUs")
    return True
