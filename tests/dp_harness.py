"""What tests/test_data_parallel.py runs in its learner ranks (spawned processes) and
in its single reference learner: agents built from flags, a fixed batch, updates;
and checkpoints of `GroupDriver.save` while rank 0 is slow at its own work."""

from __future__ import annotations

import functools
import logging
import os
import pickle
import time
from types import SimpleNamespace

import torch

from agents.normalize import RunningMeanStd, batch_moments
from option_flags import default_values
from training.config import make_config
from training.factory import make_agent
from training.ranks.driver import GroupDriver
from training.ranks.group import GroupFailure, GroupPacer, ProcessGroup
from training.report import Counters
from wrappers.envs import env_info

UPDATES = int(os.environ.get("DP_UPDATES", 20))
B = 4  # rollouts per rank; the single learner trains on 2 x B
T = 6

# name -> flags: every agent, the LSTM policy, Box actions with both normalisers,
# impala's group-wide weights (KL mask, CLEAR on replayed rollouts, scaled advantages)
CASES = {
    "impala": dict(env="CartPole-v1", agent="impala", kl_div_threshold=0.02,
                   clear_policy_cloning_weight=0.1, clear_value_cloning_weight=0.1,
                   normalize_advantages=True, normalize_returns=True),
    "ppo_steps": dict(env="CartPole-v1", agent="ppo", ppo_shuffle="steps", ppo_minibatches=4,
                      normalize_input=True),
    "truly_ppo": dict(env="CartPole-v1", agent="truly_ppo", ppo_shuffle="rollouts",
                      ppo_minibatches=4),
    "impact": dict(env="CartPole-v1", agent="impact", ppo_minibatches=2,
                   impact_target_update=3),
    "ppo_lstm": dict(env="CartPole-v1", agent="ppo", use_lstm=True, lstm_size=16,
                     ppo_minibatches=4),
    "ppo_box": dict(env="Pendulum-v1", agent="ppo", ppo_minibatches=4, normalize_input=True,
                    normalize_returns=True),
}


def make(case: str, device: str = "cpu"):
    """The case's agent (the same weights on every call) and its env's obs shape."""
    cfg, errors = make_config(default_values(
        **CASES[case], batch_size=B, r_f_steps=T, worker_count=1, seed=3,
        device=device.split(":")[0],
        optimizer="adam", lr=1e-3, ppo_epochs=2))
    assert not errors, errors
    info = env_info(cfg.env, cfg.env_options())
    torch.manual_seed(cfg.seed)
    agent = make_agent(cfg, info)
    agent.obs_shape = info.obs_shape
    return agent


@torch.no_grad()
def batch(agent, columns: int, seed: int = 11) -> dict[str, torch.Tensor]:
    """A fixed batch [T+1, columns, ...]: the model's own behaviour params, perturbed,
    and actions drawn from them."""
    g = torch.Generator().manual_seed(seed)
    model = agent.model
    obs = torch.randn(T + 1, columns, *agent.obs_shape, generator=g) * 2 + 0.5
    done = torch.rand(T + 1, columns, generator=g) < 0.15
    device = next(model.parameters()).device
    state = tuple(s.to(device) for s in model.initial_state(columns))
    logits, value, _ = model(obs.to(device), state, done.to(device))
    logits, value = logits.cpu(), value.cpu()
    logits = logits + 0.3 * torch.randn(logits.shape, generator=g)
    dist = model.distribution(logits)
    out = {"obs": obs, "action": dist.sample(generator=g), "logits": logits, "value": value,
           "reward": torch.randn(T + 1, columns, generator=g), "done": done,
           "truncated": torch.rand(T + 1, columns, generator=g) < 0.05,
           "bootstrap_value": torch.randn(T + 1, columns, generator=g),
           "replayed": torch.arange(columns) % 3 == 1}
    state = model.initial_state(columns)  # on the model's device, only its shape is read
    if state:
        out["core_state"] = 0.1 * torch.randn(T + 1, columns, len(state), state[0].shape[-1],
                                              generator=g)
    return out


def columns(b: dict[str, torch.Tensor], cols: slice) -> dict[str, torch.Tensor]:
    return {k: (v[cols] if k == "replayed" else v[:, cols]) for k, v in b.items()}


def train(agent, b: dict[str, torch.Tensor], check=None, updates: int = UPDATES
          ) -> dict[str, torch.Tensor]:
    """`updates` updates on `b` (its observations observed first); `check` runs after
    every optimizer step. The final state: parameters and buffers."""
    if check is not None:
        step = agent.step

        def checked_step(loss, name="main"):
            norm = step(loss, name)
            check()
            return norm
        agent.step = checked_step
    if agent.normalizes_inputs:
        agent.observe(b["obs"][:-1])
    for k in range(updates):
        agent.update(b, progress=k / (2 * UPDATES))
    return {k: v.detach().cpu().clone() for k, v in agent.model.state_dict().items()}


def single(case: str, device: str = "cpu", updates: int = UPDATES) -> dict[str, torch.Tensor]:
    agent = make(case, device)
    return train(agent, batch(agent, 2 * B), updates=updates)


def _record(diffs: list[float], group: ProcessGroup, model) -> None:
    diffs.append(group.max_difference(model))


class _Learner:
    def __init__(self, ready: bool):
        self.is_ready = ready

    def ready(self) -> bool:
        return self.is_ready


MUTATED = ("impala", "ppo_steps")  # the cases run again without the all-reduce
MUTATED_UPDATES = 3


def _cases(group: ProcessGroup, device: str, cases, updates: int) -> dict:
    out = {}
    for case in cases:
        agent = make(case, device)
        agent.group = group
        diffs: list[float] = []
        b = columns(batch(agent, 2 * B), slice(group.rank * B, (group.rank + 1) * B))
        out[case] = train(agent, {k: v.to(device) for k, v in b.items()},
                          check=functools.partial(_record, diffs, group, agent.model),
                          updates=updates)
        out[case + ":max_step_diff"] = max(diffs)
        out[case + ":steps"] = len(diffs)
    return out


def rank_main(rank: int, rendezvous: str, results: str, device: str = "cpu") -> None:
    """Rank `rank` of 2: each case on its half of the batch, the moments merge, the
    starved pacer, then the MUTATED cases with the all-reduce skipped; its results
    pickled to the file `results`."""
    torch.set_num_threads(1)
    group = ProcessGroup(rank, 2, rendezvous, torch.device(device), timeout_s=60.0,
                         nccl=False)  # gloo, on CUDA tensors too (two ranks share one GPU)
    out = _cases(group, device, CASES, UPDATES)
    # normaliser statistics: 3 and 5 samples merged against one update over all 8
    data = torch.arange(16.0).reshape(8, 2) ** 1.5
    norm = RunningMeanStd((2,))
    norm.update(torch.ones(4, 2))  # what both had before
    part = data[:3] if rank == 0 else data[3:]
    for m in group.gather_moments(batch_moments(part, (2,))):
        norm.merge(m)
    out["moments"] = norm.moments()
    # a starved rank: rank 1 has no batch, then both have one
    pacer = GroupPacer(group)
    out["starved"] = [pacer.due(_Learner(rank == 0)), pacer.due(_Learner(True))]
    out["waits"] = group.waits
    # the mutation the equivalence must catch: no all-reduce of the gradients
    group.reduce_gradients = lambda params: None
    out["mutated"] = _cases(group, device, MUTATED, MUTATED_UPDATES)
    group.close()
    with open(results + ".tmp", "wb") as f:
        pickle.dump(out, f)
    os.replace(results + ".tmp", results)


# --- checkpoints while rank 0 works alone (`GroupDriver.save`) ---------------------------
SAVE_TIMEOUT_S = 2.0  # the ranks' --learner_timeout
SLOW_S = 4.0  # rank 0's own work (or rank 1's hang), well past the timeout
# case -> (seconds before rank 0's save, its write, before rank 1's save)
SAVE_CASES = {"evaluate": (SLOW_S, 0.0, 0.0),  # rank 0's final evaluation
              "write": (0.0, SLOW_S, 0.0),  # a large replay, a slow disk
              "hang": (0.0, 0.0, SLOW_S)}  # rank 1 hangs: rank 0 must still give up


class _SavedLearner:
    """What `GroupDriver.save` reads of a policy learner: its agent's model and state."""

    def __init__(self, rank: int):
        torch.manual_seed(0)
        self.agent = SimpleNamespace(model=torch.nn.Linear(3, 2))
        self.mixer = SimpleNamespace(replays=[])
        self.rank = rank

    def state_dict(self, include_replay_data: bool) -> dict:
        return {"replays": [f"rank {self.rank}'s replays"]}


class _SlowSaver(GroupDriver):
    """`GroupDriver` of stand-in parts; its checkpoint is kept in `written` and takes
    `write_s` to write."""

    write_s = 0.0
    written = None

    def write_checkpoint(self, policies: list[dict]) -> str:
        time.sleep(self.write_s)
        self.written = policies
        return "checkpoint.pt"


def _both_here(path: str, rank: int, deadline_s: float = 60.0) -> None:
    """Wait until both ranks reached this point (a file each), so that the group
    starts within its short timeout however long the imports took."""
    open(f"{path}.{rank}", "w").close()
    deadline = time.monotonic() + deadline_s
    while not os.path.exists(f"{path}.{1 - rank}"):
        assert time.monotonic() < deadline, "the other rank did not come"
        time.sleep(0.05)


def save_main(rank: int, rendezvous: str, results: str) -> None:
    """Rank `rank` of 2 through each of SAVE_CASES, in a group of its own: a checkpoint
    (`GroupDriver.save`), then the next iteration's agreement. Pickles to `results`,
    per case: the GroupFailure's message (None: none), the seconds it took and
    rank 0's checkpoint."""
    torch.set_num_threads(1)
    out = {}
    for case, (before_0, write_0, before_1) in SAVE_CASES.items():
        _both_here(f"{rendezvous}-{case}", rank)
        group = ProcessGroup(rank, 2, f"{rendezvous}-{case}", torch.device("cpu"),
                             SAVE_TIMEOUT_S, nccl=False)
        report = SimpleNamespace(log=logging.getLogger(f"rank{rank}"), counters=Counters())
        driver = _SlowSaver(SimpleNamespace(checkpoint_replay=True), None,
                            [_SavedLearner(rank)], None, None, report, None, group=group)
        driver.write_s = write_0 if rank == 0 else 0.0
        t0 = time.monotonic()
        error = None
        try:
            time.sleep(before_0 if rank == 0 else before_1)
            driver.save()
            group.agree([0.0])
        except GroupFailure as e:
            error = str(e)
        out[case] = {"error": error, "seconds": time.monotonic() - t0 - (before_0 if rank == 0
                                                                          else before_1),
                     "written": driver.written}
        group.close()
    with open(results + ".tmp", "wb") as f:
        pickle.dump(out, f)
    os.replace(results + ".tmp", results)
