"""The absl flags of the command line, and the only module besides `main.py` that
reads `FLAGS`.

Each flag is declared once, in `training/flag_spec.py` (name, kind, default, enum
choices, section, help text); this module defines an absl flag per entry of its
`FLAG_SPECS`, as `training/config.py` makes a `Config` field per entry. Booleans
also take yes/no/on/off (`_BoolParser`).

Flags keep the seed platform's names. A flag whose default is `None` ("auto")
takes a value that suits the family of `--env` (Atari, MinAtar, continuous or
vector), see `wrappers.envs.FAMILIES`; a value given on the command line
always wins. `training.config.make_config` turns the values into the frozen
`Config` and lists every problem; `main.py` prints them and exits with status 2
before anything is written or started. `default_values` gives a Config's worth of
values without a command line (benchmarks, tests); the `check_*` functions at the
end serve code that writes main.py command lines (sweeps).
"""

from __future__ import annotations

from absl import flags

from training.config import config_fields
from training.flag_spec import FLAG_SPECS, FlagSpec

FLAGS = flags.FLAGS


class _BoolParser(flags.BooleanParser):
    """true/t/1/yes/y/on and false/f/0/no/n/off, any case."""

    def parse(self, argument):
        if isinstance(argument, str):
            low = argument.strip().lower()
            if low in ("yes", "y", "on"):
                return True
            if low in ("no", "n", "off"):
                return False
        return super().parse(argument)


def _define(spec: FlagSpec) -> None:
    """The absl flag of one `FLAG_SPECS` entry."""
    if spec.kind == "bool":
        flags.DEFINE_flag(flags.Flag(_BoolParser(), flags.ArgumentSerializer(), spec.name,
                                     spec.default, spec.help, boolean=True))
    elif spec.kind == "enum":
        flags.DEFINE_enum(spec.name, spec.default, list(spec.choices), spec.help)
    else:
        define = {"int": flags.DEFINE_integer, "float": flags.DEFINE_float,
                  "str": flags.DEFINE_string}[spec.kind]
        define(spec.name, spec.default, spec.help)


for _spec in FLAG_SPECS:
    _define(_spec)


def default_values(**overrides) -> dict:
    """The flags' defaults (None for auto), updated with `overrides`: a Config's
    worth of values for code that does not parse a command line (bench, sweeps)."""
    values = {name: FLAGS[name].default for name in config_fields()}
    unknown = set(overrides) - set(values)
    if unknown:
        raise KeyError(f"unknown flags {sorted(unknown)}")
    return {**values, **overrides}


def flag_values() -> tuple[dict, set[str]]:
    """The parsed absl flags that make a Config, and the names given on the command
    line (call after absl parsed argv)."""
    names = config_fields()
    return ({name: FLAGS[name].value for name in names},
            {name for name in names if FLAGS[name].present})


# --- checks of flag names, values and command lines for code that builds main.py's command
# lines (sweeps/spec.py): only this module reads FLAGS, and nothing here changes it
def flag_names() -> set[str]:
    """Every flag name main.py accepts (absl's own, --flagfile for one, included)."""
    return set(FLAGS)


def check_flag_value(name: str, text: str) -> str | None:
    """The parser's error for `--name=text`, or None when the flag's parser takes it."""
    try:
        FLAGS[name].parser.parse(text)
    except Exception as e:  # absl raises ValueError or flags.Error subclasses
        return str(e)
    return None


def _parsed_copy(args: list[str]):
    """`["main.py", *args]` parsed as `parse_command_line` parses it, into a copy of
    FLAGS at its defaults (the global flags stay as they are): (the copy, the
    problems)."""
    import copy

    parsed = copy.deepcopy(FLAGS)
    parsed.unparse_flags()  # the defaults, whatever FLAGS holds now
    return parsed, parse_command_line(["main.py", *args], parsed)


def check_command_line(args: list[str]) -> tuple[list[str], set[str]]:
    """Parse `["main.py", *args]` into a copy of FLAGS (the global flags stay as they are).

    Returns (problems, the flag names given): absl's parse errors, one per bad argument,
    and the arguments that are not flags; the good arguments' names.
    """
    parsed, problems = _parsed_copy(args)
    return problems, {name for name in parsed if parsed[name].present}


def command_line_values(args: list[str]) -> tuple[dict, set[str], list[str]]:
    """What `main.py ARGS` would run with, parsed into a copy of FLAGS: the values that
    make a Config, the names given, and the problems (`check_command_line`'s)."""
    parsed, problems = _parsed_copy(args)
    names = config_fields()
    return ({name: parsed[name].value for name in names},
            {name for name in names if parsed[name].present}, problems)


def _argument_groups(args: list[str]) -> list[list[str]]:
    """`args` as absl reads them: `--name value` (a flag that is not boolean, without
    `=`) is one group of two, every other argument a group of its own."""
    groups, i = [], 0
    while i < len(args):
        arg = args[i]
        name = arg.lstrip("-")
        if (arg.startswith("-") and "=" not in arg and name in FLAGS
                and not FLAGS[name].boolean and i + 1 < len(args)):
            groups.append(args[i:i + 2])
            i += 2
        else:
            groups.append([arg])
            i += 1
    return groups


def parse_command_line(argv: list[str], into: flags.FlagValues = FLAGS) -> list[str]:
    """Parse `argv` (sys.argv) into `into` (FLAGS), every argument on its own, so that
    one bad argument hides no other: the good ones are parsed, and every problem is
    returned, one message each (an unknown flag, a value its parser refuses, stray
    arguments)."""
    problems, stray = [], []
    for group in _argument_groups(argv[1:]):
        if group == ["--"]:
            continue
        if not group[0].startswith("-") or group[0] == "-":
            stray.append(group[0])
            continue
        try:
            into([argv[0], *group])
        except flags.Error as e:
            problems.append(str(e))
    into.mark_as_parsed()
    if stray:
        problems.append(f"unexpected arguments {stray}; flags look like --name=value (quote a "
                        "value that has spaces: --replay_parameters='[...]')")
    return problems
