"""A corpus of malformed command lines and replay JSONs through main.py's `cli`:
each exits 2, names the flag, raises nothing and writes nothing. In-process (the
absl flags are reset between cases); one case runs as a real subprocess with bytes
that are not UTF-8."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from absl import flags

import main
from tests.conftest import ROOT

Q = '{"type": "queue", "capacity": 1, "sample_ratio": %s}'
S = '{"type": "standard", "capacity": %s, "sample_ratio": %s}'
E = ('{"type": "custom", "capacity": 100, "sample_ratio": 0.5, '
     '"sample_strategy": "elite_sampling", %s}')


def rp(*entries: str) -> str:
    return "--replay_parameters=[" + ", ".join(entries) + "]"


# (the arguments after --env=CartPole-v1, what the message must name)
CORPUS = [
    # wrong types
    (["--lr=abc"], "--lr"), (["--batch_size=2.5"], "--batch_size"),
    (["--worker_count=two"], "--worker_count"), (["--clip_rewards=maybe"], "--clip_rewards"),
    (["--op_mode=fly"], "op_mode"), (["--agent=dqn"], "agent"),
    # NaN, inf, negative and zero numbers
    (["--lr=nan"], "--lr"), (["--lr=inf"], "--lr"), (["--value_loss_weight=-inf"],
                                                      "--value_loss_weight"),
    (["--gamma=nan"], "--gamma"), (["--lr=-0.1"], "--lr"), (["--gamma=1.5"], "--gamma"),
    (["--batch_size=0"], "--batch_size"), (["--batch_size=-3"], "--batch_size"),
    (["--envs_per_worker=-1"], "--envs_per_worker"), (["--r_f_steps=0"], "--r_f_steps"),
    (["--entropy_loss_weight=-0.01"], "--entropy_loss_weight"), (["--seed=-1"], "--seed"),
    (["--environment_max_steps=0"], "--environment_max_steps"),
    (["--rmsprop_eps=0"], "--rmsprop_eps"), (["--status_interval=0"], "--status_interval"),
    (["--learner_csv_interval=0"], "--learner_csv_interval"),
    (["--gradient_clip_by_norm_threshold=-1"], "--gradient_clip_by_norm_threshold"),
    (["--max_actor_restarts=-1"], "--max_actor_restarts"),
    (["--keep_checkpoints=0"], "--keep_checkpoints"), (["--stop_window=0"], "--stop_window"),
    (["--ray_address=auto"], "--ray_address"), (["--backend=slurm"], "backend"),
    (["--serial", "--backend=ray"], "--serial"), (["--serial", "--caching"], "--serial"),
    (["--serial_policy_lag=1"], "--serial_policy_lag"),
    (["--serial", "--serial_policy_lag=-1"], "--serial_policy_lag"),
    (["--queued_batches=0"], "--queued_batches"), (["--mlp_activation=gelu"], "mlp_activation"),
    (["--normalize_input=sometimes"], "--normalize_input"),
    (["--precision=fp16"], "precision"),
    (["--env=Pendulum-v1", "--agent=sac", "--precision=bf16"], "--precision"),
    # unknown flags and stray arguments
    (["--no_such_flag=3"], "no_such_flag"), (["extra"], "unexpected arguments"),
    (["--replay_parameters=not", "json"], "--replay_parameters"),
    # another agent's flags
    (["--ppo_epochs=8"], "--ppo_epochs"), (["--agent=impala", "--gae_lambda=0.9"],
                                            "--gae_lambda"),
    (["--agent=ppo", "--kl_div_threshold=0.5"], "--kl_div_threshold"),
    (["--agent=ppo", "--truly_ppo_alpha=5"], "--truly_ppo_alpha"),
    (["--agent=truly_ppo", "--clear_policy_cloning_weight=1"], "--clear_policy_cloning_weight"),
    (["--agent=ppo", "--ppo_clip=0"], "--ppo_clip"),
    (["--agent=ppo", "--impact_target_update=4"], "--impact_target_update"),
    (["--agent=impact", "--impact_target_update=0"], "--impact_target_update"),
    (["--agent=impact", "--ppo_advantage=gae"], "--ppo_advantage"),
    # a flag whose FlagSpec.read_when this run rules out
    (["--video_format=gif"], "--video_format"), (["--lstm_size=64"], "--lstm_size"),
    # replay presets: unknown, or given with --replay_parameters
    (["--replays=elite9"], "--replays"),
    (["--replays=standard", rp(Q % "1")], "--replays"),
    # non-UTF-8 input (undecodable bytes reach Python as lone surrogates)
    (["--env=Cart\udcffPole-v1"], "--env"),
    ([rp(Q % "1").replace("queue", "qu\udcfeeue")], "--replay_parameters"),
    # replay JSONs: not a list, empty, not objects, unknown keys and types
    (["--replay_parameters={}"], "--replay_parameters"), (["--replay_parameters=[]"],
                                                          "--replay_parameters"),
    (["--replay_parameters=[1, 2]"], "--replay_parameters"),
    (["--replay_parameters=[null]"], "--replay_parameters"),
    ([rp(Q % "1").replace('"capacity"', '"capacitty"')], "--replay_parameters"),
    ([rp(Q % "1").replace('"queue"', '"fifo"')], "--replay_parameters"),
    # ratios: NaN, inf, negative, not summing to 1
    ([rp(Q % "NaN")], "--replay_parameters"), ([rp(Q % "Infinity")], "--replay_parameters"),
    ([rp(Q % "0.5")], "--replay_parameters"), ([rp(Q % "0.6", S % (100, 0.6))],
                                               "--replay_parameters"),
    ([rp(Q % "1.5", S % (100, -0.5))], "--replay_parameters"),
    ([rp(Q % '"half"', S % (100, 0.5))], "--replay_parameters"),
    # capacities: negative, a string, a float, a bool, NaN, huge
    ([rp(Q % "0.5", S % (-5, 0.5))], "--replay_parameters"),
    ([rp(Q % "0.5", S % ('"big"', 0.5))], "--replay_parameters"),
    ([rp(Q % "0.5", S % (100.5, 0.5))], "--replay_parameters"),
    ([rp(Q % "0.5", S % ("true", 0.5))], "--replay_parameters"),
    ([rp(Q % "0.5", S % ("NaN", 0.5))], "--replay_parameters"),
    ([rp(Q % "0.5", S % (10**15, 0.5))], "--replay_parameters"),
    # duplicate queues; bad custom keys
    ([rp(Q % "0.5", Q % "0.5")], "--replay_parameters"),
    ([rp(Q % "0.5", E % '"lambda_batch_multiplier": 0.5')], "--replay_parameters"),
    ([rp(Q % "0.5", E % '"sample_strategy": "nope"')], "--replay_parameters"),
    ([rp(Q % "0.5", E % '"dist_function": "manhattan"')], "--replay_parameters"),
    ([rp(Q % "0.5", E % '"p": -1')], "--replay_parameters"),
    # envs, replays that cannot be composed, missing checkpoints, sizes
    (["--env=NoSuchGame-v9"], "--env"), (["--env=ALE/NoSuchGame-v5"], "--env"),
    (["--env=popgym:popgym-MineSweeperEasy-v0"], "--env"),  # MultiDiscrete actions
    (["--env=tests.counting_env:DictAction-v0"], "--env"),  # Dict actions
    (["--env=CartPole-v1", "--lstm_size=64"], "--lstm_size"),  # without --use_lstm
    (["--env=no_such_module:Thing-v0"], "--env"),
    (["--replay_parameters=[{\"type\": \"queue\""], "--replay_parameters"),
    ([rp('{"type": "standard", "capacity": 9, "sample_ratio": 1}')], "--replay_parameters"),
    (["--batch_size=abc"], "batch_size"), (["--op_mode=test"], "--load_model_url"),
    (["--op_mode=train_w_load", "--load_model_url=/no/such/run"], "--load_model_url"),
    (["--lr=0.001", "--lr_end_value=0.01"], "--lr_end_value"),
    (["--rmsprop_alpha=1.5"], "--rmsprop_alpha"),
    (["--agent=ppo", "--ppo_minibatches=64"], "--ppo_minibatches"),
    (["--agent=truly_ppo", "--gae_lambda=1.5"], "--gae_lambda"),
    (["--r_f_steps=100000000", "--batch_size=1000"], "--r_f_steps"),
    ([rp('{"type": "queue", "sample_ratio": 0.5}',
         '{"type": "standard", "capacity": 50000000, "sample_ratio": 0.5}')],
     "lower 'capacity'"),
    # several policies (--num_policies)
    (["--num_policies=0"], "--num_policies"),
    (["--policy_overrides=[{}]"], "--policy_overrides"), (["--with_pbt"], "--with_pbt"),
    (["--num_policies=2", "--worker_count=2", "--policy_overrides=[{}]"], "--policy_overrides"),
    (["--num_policies=2", "--worker_count=2", '--policy_overrides=[{}, {"nosuch": 1}]'],
     "--policy_overrides"),
    (["--num_policies=2", "--worker_count=2", '--policy_overrides=[{}, {"env": "Pong"}]'],
     "--policy_overrides"),
    (["--num_policies=2", "--worker_count=2", '--policy_overrides=[{}, {"lr": "abc"}]'],
     "--policy_overrides"),
    (["--num_policies=2", "--worker_count=2", '--policy_overrides=[{}, {"use_lstm": true}]'],
     "--policy_overrides"),
    (["--num_policies=2", "--worker_count=2", '--policy_overrides=[{}, {"agent": "sac"}]'],
     "--agent"),
    (["--num_policies=3", "--worker_count=2"], "--worker_count"),
    (["--num_policies=2", "--worker_count=2", "--with_pbt",
      '--policy_overrides=[{"agent": "ppo"}, {"agent": "impala"}]'], "--with_pbt"),
    (["--num_policies=2", "--worker_count=2", "--with_pbt", "--pbt_mutate=env"], "--pbt_mutate"),
    (["--num_policies=2", "--worker_count=2", "--weight_sync={'from': 0}"], "--weight_sync"),
    (["--num_policies=2", "--worker_count=2", '--policy_overrides=[{}, {"hidden_size": 16}]',
      '--weight_sync={"from": 0, "to": [1], "every_updates": 5}'], "--weight_sync"),
    (["--num_policies=2", "--worker_count=2", "--share_experience"], "--share_experience"),
    (["--num_policies=2", "--worker_count=2", "--learner_count=2"], "--learner_count"),
]


@pytest.fixture
def cli(monkeypatch, capsys, tmp_path):
    """main.cli on `--env=CartPole-v1 *args --results_dir=<tmp>`; -> (status, stderr).
    A command line that passes every check would train: that fails the test."""
    from training import session

    def no_training(cfg, checkpoint=None, policies=None):
        plan, problem = session.preflight(cfg, checkpoint, policies)
        if problem:
            print(f"error: {problem}", file=sys.stderr)
            return 2
        raise AssertionError("this command line passed every check and would train")

    monkeypatch.setattr(session, "run", no_training)
    results = tmp_path / "results"

    def call(args):
        flags.FLAGS.unparse_flags()
        try:
            status = main.cli(["main.py", "--env=CartPole-v1", *args,
                               f"--results_dir={results}"])
        finally:
            flags.FLAGS.unparse_flags()
        assert not results.exists(), "something was written"
        return status, capsys.readouterr().err

    return call


def test_the_corpus_is_large_enough():
    assert len(CORPUS) >= 40


@pytest.mark.parametrize("args, name", CORPUS, ids=[str(i) for i in range(len(CORPUS))])
def test_malformed_input_exits_2_naming_the_flag(cli, args, name):
    status, err = cli(args)
    assert status == 2, err
    assert name in err, err
    assert "Traceback" not in err


def test_every_problem_is_reported_at_once(cli):
    """The issue's example: an unquoted JSON value reaches main.py as two arguments;
    both halves are reported, together with a bad type, an unknown flag and a range."""
    status, err = cli(["--replay_parameters=not", "json", "--lr=abc", "--nosuch=1",
                       "--gamma=2"])
    assert status == 2
    for name in ("--replay_parameters", "not valid JSON", "unexpected arguments ['json']",
                 "--lr", "nosuch", "--gamma"):
        assert name in err, name


def test_a_value_after_a_space_is_still_read_as_the_flags(cli):
    status, err = cli(["--batch_size", "0"])
    assert status == 2 and "--batch_size: must be > 0" in err and "unexpected" not in err


def test_bytes_that_are_not_utf8_on_a_real_command_line(tmp_path):
    results = tmp_path / "results"
    proc = subprocess.run(
        [sys.executable, os.path.join(ROOT, "main.py"), b"--env=Cart\xffPole-v1",
         b'--replay_parameters=[{"type": "qu\xfeeue", "sample_ratio": 1}]',
         f"--results_dir={results}"], cwd=ROOT, capture_output=True, timeout=120)
    err = proc.stderr.decode("utf-8", "replace")
    assert proc.returncode == 2, err
    assert "--env" in err and "--replay_parameters" in err and "Traceback" not in err
    assert not results.exists()
