"""Entry point: flags (option_flags) -> Config (training/config.py) -> train |
train_w_load | test.

    python main.py --env=PongNoFrameskip-v4
    python main.py --op_mode=train_w_load --load_model_url=results/<run>
    python main.py --op_mode=test --load_model_url=results/<run> --test_episode_count=10

Flag priority: the command line > the flags saved in the checkpoint (resume and
test) > the defaults. Bad flags print every problem, naming the flag, and exit
with status 2 before anything is written or started. The first SIGINT / SIGTERM
saves a checkpoint and stops; a second one exits at once.
"""

from __future__ import annotations

import gc
import os
import sys

# Torch's OpenMP threads spin at the end of each parallel region by default. On cores
# that the actors share, a spinning learner thread holds a core they need: a small ppo
# run on CartPole beside one other busy process took 47 s instead of 5 (measured;
# docs: design-notes.md). Set before torch is imported, which reads it once; the
# user's own value wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from absl import flags  # noqa: E402

import option_flags  # noqa: E402


def run(values: dict, explicit: set[str] = frozenset(), problems: list[str] = ()) -> int:
    """Run one op mode with the given flag values; returns the exit status. `problems`:
    what the command line parser already found; they are reported with the rest.
    Under torchrun (training/ranks/torchrun.py) every rank joins the learners' group first;
    rank 0 runs, the others follow it."""
    from training.ranks import torchrun

    launch = torchrun.launched()
    if launch is None:
        return _run(values, explicit, problems)
    given = set(explicit)
    values, explicit, errors = torchrun.settle(values, set(explicit), launch)
    try:
        torchrun.join(launch)
    except torchrun.GroupFailure as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    if launch.rank != 0:
        return torchrun.follower(launch, given)
    status = 1
    try:
        status = _run(values, explicit, [*problems, *errors])
    finally:
        torchrun.release(status)
    return status


def _run(values: dict, explicit: set[str], problems: list[str]) -> int:
    """`run` for one process: the run, or rank 0 of the learners."""
    from training.checkpoint import CheckpointError, load_checkpoint
    from training.config import make_config, merge_saved
    from training.policies import policy_configs, policy_zero, run_given

    errors = list(problems)
    checkpoint = None
    raw = values
    if values["op_mode"] in ("train_w_load", "test") and values.get("load_model_url"):
        try:
            checkpoint = load_checkpoint(values["load_model_url"])
        except CheckpointError as e:
            errors.append(f"--load_model_url: {e}")
        else:
            values = merge_saved(values, explicit, checkpoint["config"])
    values, override_errors = policy_zero(values)
    cfg, config_errors = make_config(values, given=run_given(values, explicit))
    errors.extend(override_errors + config_errors)
    policies = None
    if cfg is not None and cfg.num_policies > 1 and cfg.op_mode != "test" \
            and not override_errors:
        saved = None if checkpoint is None else \
            [part.get("config", {}) for part in checkpoint["policies"]]
        policies, policy_errors = policy_configs(raw, explicit, cfg, saved)
        errors.extend(policy_errors)
    if errors:
        print("error: bad flags, nothing was started:", file=sys.stderr)
        for e in errors:
            print(f"  {e}", file=sys.stderr)
        return 2
    from training import session

    return session.run(cfg, checkpoint, policies)


def cli(argv: list[str]) -> int:
    """main.py's command line `argv` (sys.argv) to an exit status."""
    if any(a in ("-h", "--help", "--helpfull") for a in argv[1:]):
        print(flags.FLAGS.get_help())
        return 0
    problems = option_flags.parse_command_line(argv)
    values, explicit = option_flags.flag_values()
    return run(values, explicit, problems)


if __name__ == "__main__":
    status = cli(sys.argv)
    # Python's exit collects every object still alive, torch's included: 0.55 s of the
    # 0.8 s an exit took (measured). Frozen, they are left to the OS; files and
    # children were closed above, and atexit handlers still run.
    gc.freeze()
    sys.exit(status)
