"""Entry point: flags -> Config -> train | train_w_load | test.

    python main.py --env=PongNoFrameskip-v4
    python main.py --op_mode=train_w_load --load_model_url=results/<run>
    python main.py --op_mode=test --load_model_url=results/<run> --test_episode_count=10

Bad flags print every problem, naming the flag, and exit with status 2 before
anything is written or started. SIGINT / SIGTERM save a checkpoint and stop.
"""

from __future__ import annotations

import signal
import sys

from absl import flags

import option_flags


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def run(values: dict) -> int:
    """Run one op mode with the given flag values; returns the exit status."""
    cfg, errors = option_flags.make_config(values)
    if errors:
        print("error: bad flags, nothing was started:", file=sys.stderr)
        for e in errors:
            print(f"  {e}", file=sys.stderr)
        return 2
    from training import session

    return session.run(cfg)


def main(argv):
    if len(argv) > 1:
        print(f"error: unexpected arguments {argv[1:]}; flags look like --name=value",
              file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, _raise_interrupt)
    return run(option_flags.flag_values())


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
