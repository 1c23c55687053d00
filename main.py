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

import sys

from absl import flags

import option_flags


def _fail(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2


def run(values: dict, explicit: set[str] = frozenset()) -> int:
    """Run one op mode with the given flag values; returns the exit status."""
    from training.checkpoint import CheckpointError, load_checkpoint
    from training.config import make_config, merge_saved

    checkpoint = None
    if values["op_mode"] in ("train_w_load", "test"):
        if not values.get("load_model_url"):
            return _fail(f"--load_model_url: required with --op_mode={values['op_mode']}; "
                         "give a run directory or a checkpoint.pt")
        try:
            checkpoint = load_checkpoint(values["load_model_url"])
        except CheckpointError as e:
            return _fail(f"--load_model_url: {e}")
        values = merge_saved(values, explicit, checkpoint["config"])
    cfg, errors = make_config(values)
    if errors:
        print("error: bad flags, nothing was started:", file=sys.stderr)
        for e in errors:
            print(f"  {e}", file=sys.stderr)
        return 2
    from training import session

    return session.run(cfg, checkpoint)


def main(argv) -> int:
    if len(argv) > 1:
        return _fail(f"unexpected arguments {argv[1:]}; flags look like --name=value")
    values, explicit = option_flags.flag_values()
    return run(values, explicit)


if __name__ == "__main__":
    if any(a in ("-h", "--help", "--helpfull") for a in sys.argv[1:]):
        print(flags.FLAGS.get_help())
        sys.exit(0)
    try:
        remaining = flags.FLAGS(sys.argv)
    except flags.Error as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    sys.exit(main(remaining))
