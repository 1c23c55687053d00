"""Several policies (`--num_policies`): routing, overrides, the shared replay under
concurrent readers, weight sync, PBT, and a run of two agents through a SIGINT and a
resume."""

from __future__ import annotations

import csv
import json
import logging
import os
import signal
import threading
import types

import torch

from agents.networks import step_model
from option_flags import default_values
from replay.config import ReplaySpec
from replay.shared import SharedView
from replay.storage_replay import StorageReplay
from tests.conftest import run_main, start_main
from tests.pair_runs import run_inline
from tests.test_lifecycle import run_dir, shm_entries, stop_and_check, wait_for
from training.checkpoint import load_checkpoint
from training.config import make_config
from training.factory import build_driver, make_agent
from training.observers import WeightSyncObserver, sync_problem
from training.pbt import PopulationBasedTraining
from training.plan import make_plan
from training.policies import WeightSync, policy_configs, policy_zero, run_given
from training.run_dir import RunDir
from training.session import population_preflight
from workers.slots import SlotPool, rollout_spec
from workers.weights import SharedWeights
from wrappers.envs import env_info

COUNTING = "tests.counting_env:Counting-v0"
QUEUE_AND_STANDARD = ('[{"type": "queue", "capacity": 1, "sample_ratio": 0.5}, '
                      '{"type": "standard", "capacity": 64, "sample_ratio": 0.5}]')


def configs(**flags):
    """Every policy's Config of these flag values, as main.py makes them."""
    raw = default_values(**flags)
    values, errors = policy_zero(raw)
    cfg, more = make_config(values, given=run_given(values, set(flags)))
    assert not errors + more, errors + more
    policies, problems = policy_configs(raw, set(flags), cfg)
    assert not problems, problems
    return policies


def build(tmp_path, **flags):
    """A serial driver of these flags (nothing started)."""
    policies = configs(serial=True, eval_interval=0, learner_threads=1,
                       results_dir=str(tmp_path), **flags)
    plan, problem = population_preflight(policies, None)
    assert problem is None, problem
    run = RunDir(str(tmp_path), policies[0].env, policies[0].to_dict(), echo=False, files=False)
    return build_driver(policies[0], plan, run, policies=policies), run


def test_each_rollout_reaches_its_policy_and_the_shared_replay_once(tmp_path):
    driver, run = build(tmp_path, env=COUNTING, agent="ppo", num_policies=2, worker_count=4,
                        envs_per_worker=2, r_f_steps=5, batch_size=4, share_experience=True,
                        replay_parameters=QUEUE_AND_STANDARD, normalize_input=False,
                        policy_overrides='[{}, {"hidden_size": 32}]')
    obs = driver.slots.buffers["obs"]
    ident = lambda i: (float(obs[0, i, 0]), float(obs[0, i, 1]))  # noqa: E731 (env, step)
    seen = {0: [], 1: []}
    shared_seen = []
    def recording(add, mine):
        return lambda i: (mine.append(ident(i)), add(i))[1]

    for k, learner in enumerate(driver.learners):
        learner.mixer.add = recording(learner.mixer.add, seen[k])
    add = driver.shared.add
    driver.shared.add = lambda i, gather=None: (shared_seen.append(ident(i)), add(i))[1]
    driver.actors.start()
    polled = []
    for _ in range(6):
        rollouts = driver.actors.poll(1.0)
        for r in rollouts:
            for i in r.indices:  # each policy's acting model gives the logits stored
                model = driver.learners[r.policy_id].agent.acting_model
                with torch.no_grad():
                    logits = step_model(model, obs[:, i], (), torch.zeros(obs.shape[0],
                                                                          dtype=torch.bool))[0]
                torch.testing.assert_close(logits, driver.slots.buffers["logits"][:, i])
            polled += [(r.policy_id, ident(i)) for i in r.indices]
        driver._receive(rollouts)
    driver.close()
    run.close()
    assert len(polled) >= 2 * 4 * 2  # two rounds of the 4 actors at least (slots allowing)
    assert sorted(shared_seen) == sorted(x for _, x in polled)  # every rollout, once
    for k in (0, 1):
        assert sorted(seen[k]) == sorted(x for p, x in polled if p == k)
    assert len({x for _, x in polled}) == len(polled)  # none doubled
    envs = {k: {x[0] for x in seen[k]} for k in (0, 1)}
    assert envs[0] and envs[1] and not envs[0] & envs[1]  # an env plays for one policy


def test_overrides_reach_their_learners_and_folders(tmp_path):
    driver, run = build(tmp_path, env="CartPole-v1", num_policies=2, worker_count=2,
                        policy_overrides='[{"agent": "impala"}, {"agent": "ppo", "lr": 3e-4, '
                                         '"entropy_loss_weight": 0.02}]')
    a, b = (learner.agent for learner in driver.learners)
    assert type(a).__name__ == "ImpalaAgent" and type(b).__name__ == "PPOAgent"
    assert b.schedules["main"].lr == 3e-4 and b.cfg.entropy_loss_weight == 0.02
    assert a.schedules["main"].lr != 3e-4
    assert [c.policy_id for c in driver.actors.configs] == [0, 1]
    flags1 = json.load(open(os.path.join(run.path, "policy_1", "flags.json")))
    assert flags1["agent"] == "ppo" and flags1["lr"] == 3e-4
    assert flags1["seed"] != json.load(open(os.path.join(run.path, "flags.json")))["seed"]
    driver.close()
    run.close()


def test_the_shared_replay_never_gives_a_torn_or_evicted_rollout():
    """A writer fills a 4-rollout shared replay with rollouts whose every field is
    their number, while two views sample it: each sampled rollout is one rollout."""
    spec = rollout_spec(7, (3,), "float32", 2)
    pool = SlotPool(spec, num_slots=1)
    entry = ReplaySpec(type="standard", capacity=4, sample_ratio=1.0)
    shared = StorageReplay(entry, pool, spec, 7, None, max_chain_heads=4, fill_in_factor=0.0)
    views = [SharedView(shared, entry, 0.0, seed=s) for s in (1, 2)]
    done = threading.Event()

    def write():
        for n in range(1, 1000):
            for buf in pool.buffers.values():
                buf[:, 0] = n if buf.dtype != torch.bool else n % 2 == 0
            shared.add(0)
        done.set()

    bad = []

    def read(view):
        while not done.is_set():
            if not view.ready(2):
                continue
            batch = view.sample(2)
            for j in range(2):
                n = batch["reward"][0, j]
                if not all(bool((batch[f][:, j].float() == n).all())
                           for f in ("obs", "reward", "value", "version")):
                    bad.append(j)

    threads = [threading.Thread(target=write)] + [
        threading.Thread(target=read, args=(v,)) for v in views]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert done.is_set() and not bad


def _learners(policies, info):
    return [types.SimpleNamespace(agent=make_agent(c, info, torch.device("cpu")), updates=0,
                                  cfg=c, publish=lambda: None) for c in policies]


def test_weight_sync_copies_all_but_the_excluded_parameters():
    policies = configs(env="CartPole-v1", agent="ppo", num_policies=3, worker_count=3)
    info = env_info("CartPole-v1", policies[0].env_options())
    learners = _learners(policies, info)
    models = [le.agent.acting_model for le in learners]
    before = [{k: v.clone() for k, v in m.state_dict().items()} for m in models]
    head = next(name for name, _ in models[0].named_parameters() if "policy" in name)
    prefix = head.rsplit(".", 1)[0]
    sync = WeightSync(source=0, targets=(1,), every_updates=2, exclude=(prefix,))
    observer = WeightSyncObserver(learners, sync, logging.getLogger("test"))
    learners[0].updates = 1
    observer.update(0, {})  # not yet due
    assert torch.equal(models[1].state_dict()[head], before[1][head])
    learners[0].updates = 2
    observer.update(0, {})
    for name, value in models[1].state_dict().items():
        expected = before[1][name] if name.startswith(prefix) else before[0][name]
        assert torch.equal(value, expected), name
    for name, value in models[2].state_dict().items():  # not a target
        assert torch.equal(value, before[2][name])
    other = configs(env="CartPole-v1", agent="ppo", hidden_size=16)[0]
    assert "shaped otherwise" in sync_problem(models[0], make_agent(other, info, torch.device(
        "cpu")).acting_model, WeightSync(0, (1,), 1))
    assert sync_problem(models[0], models[1], sync) is None


def test_weight_sync_between_agents_renames_the_torso():
    """Wheeler's pair: a ddpg target's actor torso into a ppo explorer's policy torso."""
    policies = configs(env="Pendulum-v1", num_policies=2, worker_count=2,
                       policy_overrides='[{"agent": "ddpg", "hidden_size": 64}, {"agent": '
                                        '"ppo", "hidden_size": 64, "normalize_input": false}]')
    info = env_info("Pendulum-v1", policies[0].env_options())
    learners = _learners(policies, info)
    source, target = (le.agent.acting_model for le in learners)
    sync = WeightSync(0, (1,), 1, exclude=("log_noise", "action_", "policy."),
                      rename={"torso.": "policy_torso."})
    assert sync_problem(source, target, WeightSync(0, (1,), 1)) is not None
    assert sync_problem(source, target, sync) is None
    head = target.policy.weight.clone()
    WeightSyncObserver(learners, sync, logging.getLogger("test")).update(0, {})
    for name, value in source.torso.state_dict().items():
        assert torch.equal(target.policy_torso.state_dict()[name], value)
    assert torch.equal(target.policy.weight, head)


class _Report:
    """Fixed objectives for PBT."""

    def __init__(self, objectives):
        self.counters = types.SimpleNamespace(env_steps=0)
        self.policies = [types.SimpleNamespace(counters=types.SimpleNamespace(env_steps=0),
                                               mean_return=lambda v=v: v) for v in objectives]


def test_pbt_exploits_perturbs_within_bounds_and_never_mutates_policy_0(tmp_path):
    policies = configs(env="CartPole-v1", agent="ppo", num_policies=4, worker_count=4,
                       with_pbt=True, pbt_mutation_rate=1.0, pbt_replace_fraction=0.25,
                       pbt_mutate="lr,entropy_loss_weight", entropy_loss_weight=0.01)
    info = env_info("CartPole-v1", policies[0].env_options())
    learners = _learners(policies, info)
    run = types.SimpleNamespace(file=lambda name: str(tmp_path / name),
                                log=logging.getLogger("test"))
    pbt = PopulationBasedTraining(policies, learners, _Report([10.0, 0.0, 5.0, 1.0]), run)
    winner = {k: v.clone() for k, v in learners[0].agent.model.state_dict().items()}
    pbt.look(1)  # the worst: copies the best (policy 0), then perturbs
    for name, value in learners[1].agent.model.state_dict().items():
        assert torch.equal(value, winner[name]), name
    lo, hi = policies[0].pbt_perturb_min, policies[0].pbt_perturb_max
    for name in ("lr", "entropy_loss_weight"):
        ratio = getattr(pbt.configs[1], name) / getattr(policies[0], name)
        assert lo - 1e-9 <= ratio <= hi + 1e-9 or lo - 1e-9 <= 1 / ratio <= hi + 1e-9, name
    agent = learners[1].agent  # the agent trains with them
    assert agent.schedules["main"].lr == pbt.configs[1].lr
    assert agent.cfg.entropy_loss_weight == pbt.configs[1].entropy_loss_weight
    pbt.look(0)  # the best: left alone
    pbt.report = _Report([0.0, 10.0, 5.0, 1.0])
    pbt.look(0)  # now the worst: copies policy 1's weights, keeps its hyperparameters
    assert pbt.configs[0] == policies[0] and learners[0].agent.cfg == learners[0].agent.cfg
    for name, value in learners[0].agent.model.state_dict().items():
        assert torch.equal(value, learners[1].agent.model.state_dict()[name]), name
    with open(tmp_path / "pbt.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["event"] for r in rows] == ["exploit", "perturb", "perturb", "exploit"]
    assert all(r["policy"] != "0" or r["event"] == "exploit" for r in rows)
    pbt.close()


def _timeless(path):
    drop = {"fps", "wall_time", "batch_wait_s", "update_s", "actor_wait_s", "learner_wait_s"}
    with open(path) as f:
        return [{k: v for k, v in row.items() if k not in drop} for row in csv.DictReader(f)]


def test_a_seeded_serial_pbt_run_repeats_bit_for_bit(tmp_path):
    runs = []
    for name in ("a", "b"):
        results = str(tmp_path / name)
        proc = run_inline("--env=CartPole-v1", "--serial", "--learner_threads=1", "--seed=5",
                          "--num_policies=2", "--worker_count=2", "--with_pbt",
                          "--pbt_period_env_steps=1000", "--pbt_replace_fraction=0.5",
                          "--pbt_mutation_rate=1", "--pbt_replace_reward_gap=0",
                          "--environment_max_steps=8000", "--eval_interval=0",
                          f"--results_dir={results}", timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
        runs.append(run_dir(results))
    for name in ("pbt.csv", "policy_0/learner.csv", "policy_1/learner.csv",
                 "policy_1/episodes.csv"):
        a, b = (_timeless(os.path.join(r, name)) for r in runs)
        assert a == b and a, name


def test_two_agents_through_a_sigint_and_a_resume(results):
    shm_before = shm_entries()
    proc = start_main("--env=CartPole-v1", "--num_policies=2", "--worker_count=2",
                      '--policy_overrides=[{"agent": "impala"}, {"agent": "ppo"}]',
                      "--eval_interval=0", "--environment_max_steps=10000000",
                      f"--results_dir={results}", "--status_interval=1")

    def both_updated():
        d = run_dir(results)
        return d is not None and all(
            os.path.exists(p) and sum(1 for _ in open(p)) > 3
            for p in (os.path.join(d, f"policy_{k}", "learner.csv") for k in (0, 1)))

    wait_for(both_updated, 120, "two updates of each policy", proc)
    out = stop_and_check(proc, [signal.SIGINT], results, shm_before)
    assert proc.returncode == 0, out
    d = run_dir(results)
    first = load_checkpoint(d)
    steps = [r["counters"]["env_steps"] for r in first["policy_reports"]]
    proc = run_main("--op_mode=train_w_load", f"--load_model_url={d}",
                    f"--environment_max_steps={first['counters']['env_steps'] + 4000}")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    second = load_checkpoint(d)
    assert second["counters"]["resumes"] == 1
    for k, part in enumerate(second["policy_reports"]):
        assert part["counters"]["env_steps"] > steps[k]
        with open(os.path.join(d, f"policy_{k}", "learner.csv")) as f:
            assert sum(1 for _ in f) - 1 == part["counters"]["updates"]
        assert second["policies"][k]["config"]["agent"] == ("impala", "ppo")[k]
    summary = json.load(open(os.path.join(d, "summary.json")))
    assert [p["env_steps"] for p in summary["policies"]] == [
        r["counters"]["env_steps"] for r in second["policy_reports"]]
    test = run_main("--op_mode=test", f"--load_model_url={d}", "--test_episode_count=2",
                    "--policy_index=1")
    assert test.returncode == 0 and "policy 1" in test.stdout, test.stderr[-2000:]


def test_mixed_agents_share_one_slot_layout_with_room_for_both():
    policies = configs(env="Pendulum-v1", num_policies=2, worker_count=2,
                       policy_overrides='[{"agent": "sac"}, {"agent": "ppo"}]')
    plan, problem = population_preflight(policies, None)
    assert problem is None and "final_obs" in plan.spec  # sac's, which the ppo actors write
    assert plan.num_slots > max(make_plan(c).num_slots for c in policies)


def test_a_republication_of_the_same_version_reaches_the_readers():
    """Weights copied into a policy between its updates (weight sync, a PBT exploit)
    are published under the version its actors hold: they still load them."""
    model, reader = torch.nn.Linear(2, 1), torch.nn.Linear(2, 1)
    weights = SharedWeights(model)
    weights.publish(model, 3)
    assert weights.pull(reader, -1) == 3
    with torch.no_grad():
        model.weight.fill_(7.0)
    weights.publish(model, 3)
    assert weights.pull(reader, 3) == 3 and torch.equal(reader.weight, model.weight)


def test_pbt_spreads_a_new_population_and_keeps_discounts_below_1(tmp_path):
    policies = configs(env="CartPole-v1", agent="ppo", num_policies=3, worker_count=3,
                       with_pbt=True, pbt_mutation_rate=1.0, pbt_mutate="lr,gamma",
                       gamma=0.999)
    info = env_info("CartPole-v1", policies[0].env_options())
    run = types.SimpleNamespace(file=lambda name: str(tmp_path / name),
                                log=logging.getLogger("test"))
    pbt = PopulationBasedTraining(policies, _learners(policies, info), _Report([0.0] * 3), run)
    for _ in range(20):
        pbt.start()
    assert pbt.configs[0] == policies[0]
    assert all(c.lr != policies[0].lr and 0 < c.gamma < 1 for c in pbt.configs[1:])
    pbt.close()
