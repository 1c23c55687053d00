"""Sweep specs: parse and check a grid/list/seeds/base sweep, expand it into runs, name them.

`build_spec` checks everything before anything starts (bad JSON, unknown keys, empty grids
or lists, flags main.py does not have, values its flag parsers refuse, duplicate runs,
--results_dir) and returns the expanded runs or the list of problems; `flag_text` is how a
sweep value is written as main.py's flag text. main.py's flags are checked through
option_flags.py's flag_names, check_flag_value and check_command_line (absl's FLAGS are
never read here). Used by multi_train.py; see its docstring.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
import sys
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository root
SPEC_KEYS = ("grid", "list", "seeds", "base")
MAX_NAME = 100


def flag_text(value: Any) -> str:
    """A sweep value as main.py's flag text: true/false, numbers, strings, JSON for the rest."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float | str):
        return str(value)
    return json.dumps(value, separators=(",", ":"))


# --- the sweep spec --------------------------------------------------------------------
def expand(grid: dict[str, list] | None, runs: list[dict] | None,
           seeds: list[int] | None) -> list[dict[str, Any]]:
    """Every run's values: grid combinations x list entries x seeds, seed outermost.

    With no grid (or no list, or no seeds) that factor is left out; with none of them
    there is one run with no values of its own.
    """
    grid = grid or {}
    combos = [dict(zip(grid, values, strict=True))
              for values in itertools.product(*grid.values())]
    entries = runs if runs else [{}]
    out = []
    for seed in seeds if seeds else [None]:
        for combo in combos:
            for entry in entries:
                params = {**combo, **entry}
                if seed is not None:
                    params["seed"] = seed
                out.append(params)
    return out


def run_name(params: dict[str, Any]) -> str:
    """A file-system-safe folder name from a run's values: lr=0.001,batch_size=8,seed=0."""
    if not params:
        return "base"
    text = ",".join(f"{k}={'auto' if v is None else flag_text(v)}" for k, v in params.items())
    name = re.sub(r"[^A-Za-z0-9._=,+-]+", "-", text)
    if len(name) > MAX_NAME:
        name = f"{name[:MAX_NAME - 9]}_{digest(params)}"
    return name


def digest(obj: Any, n: int = 8) -> str:
    """The first `n` hex digits of the SHA-1 of `obj` as sorted JSON."""
    return hashlib.sha1(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:n]


def _option_flags():
    """option_flags.py, which defines main.py's flags (imported here, when a sweep is
    checked, so that reading a sweep directory or plotting does not import it)."""
    if ROOT not in sys.path:
        sys.path.insert(0, ROOT)
    import option_flags

    return option_flags


def _check_flag(flag_names: set[str], where: str, name: Any,
                problems: list[str]) -> str | None:
    if not isinstance(name, str) or not name.strip("-"):
        problems.append(f"{where}: flag names are strings, got {name!r}")
        return None
    name = name.lstrip("-")
    if name not in flag_names:
        problems.append(f"{where}: main.py has no flag --{name} (see python main.py --help)")
        return None
    if name == "results_dir":
        problems.append(f"{where}: --results_dir is set per run by multi_train; "
                        "use --sweep_dir")
        return None
    return name


def _check_value(where: str, name: str, value: Any, problems: list[str]) -> None:
    if value is None:
        return
    text = flag_text(value)
    error = _option_flags().check_flag_value(name, text)
    if error is not None:
        problems.append(f"{where}: --{name}={text}: {error}")


def _parse_seeds(raw: Any, where: str, problems: list[str]) -> list[int] | None:
    if isinstance(raw, str):
        text = raw.strip()
        try:
            raw = json.loads(text) if text.startswith("[") else [
                int(s) for s in text.split(",") if s.strip()]
        except ValueError:
            problems.append(f"{where}: seeds are integers like 0,1,2 or [0, 1, 2], got {text!r}")
            return None
    if isinstance(raw, int) and not isinstance(raw, bool):
        raw = [raw]
    if (not isinstance(raw, list) or not raw
            or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in raw)):
        problems.append(f"{where}: seeds must be a non-empty list of integers >= 0, got {raw!r}")
        return None
    if len(set(raw)) != len(raw):
        problems.append(f"{where}: duplicate seeds in {raw}")
        return None
    return raw


def parse_json(text: str, where: str, problems: list[str]) -> Any:
    """`text` as JSON; None, with a problem for `where`, when it is not valid JSON."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        problems.append(f"{where}: not valid JSON ({e})")
        return None


def build_spec(file_spec: dict | None, grid: Any, runs_list: Any, seeds: Any,
               cli_base: list[str]) -> tuple[dict, list[str]]:
    """Check a sweep, given as a file's object and/or command-line pieces (None: absent).

    Returns ({"base": [...], "runs": [{"name", "params"}, ...], "varied": [...]}, problems).
    """
    problems: list[str] = []
    spec = dict(file_spec or {})
    if grid is not None:
        spec["grid"] = grid
    if runs_list is not None:
        spec["list"] = runs_list
    if seeds is not None:
        spec["seeds"] = seeds
    unknown = sorted(set(spec) - set(SPEC_KEYS))
    if unknown:
        problems.append(f"sweep: unknown keys {unknown}; a sweep has {list(SPEC_KEYS)}")
    flag_names = _option_flags().flag_names()

    g = spec.get("grid")
    clean_grid: dict[str, list] = {}
    if g is not None:
        if not isinstance(g, dict) or not g:
            problems.append(f"grid: must be a non-empty object of flag: [values], got {g!r}")
        else:
            for key, values in g.items():
                name = _check_flag(flag_names, f"grid.{key}", key, problems)
                if not isinstance(values, list) or not values:
                    problems.append(f"grid.{key}: must be a non-empty list of values, "
                                    f"got {values!r}")
                    continue
                if name is None:
                    continue
                for v in values:
                    _check_value(f"grid.{key}", name, v, problems)
                texts = [None if v is None else flag_text(v) for v in values]
                if len(set(texts)) != len(texts):
                    problems.append(f"grid.{key}: duplicate values in {values!r}")
                if name in clean_grid:
                    problems.append(f"grid.{key}: --{name} is named twice")
                clean_grid[name] = values

    lst = spec.get("list")
    clean_list: list[dict] = []
    if lst is not None:
        if not isinstance(lst, list) or not lst:
            problems.append(f"list: must be a non-empty list of objects, got {lst!r}")
        else:
            for i, entry in enumerate(lst):
                if not isinstance(entry, dict):
                    problems.append(f"list[{i}]: must be an object of flag: value, got {entry!r}")
                    continue
                clean = {}
                for key, v in entry.items():
                    name = _check_flag(flag_names, f"list[{i}].{key}", key, problems)
                    if name is None:
                        continue
                    _check_value(f"list[{i}].{key}", name, v, problems)
                    if name in clean_grid:
                        problems.append(f"list[{i}].{key}: --{name} is in the grid too; "
                                        "grid and list entries are combined, so they must "
                                        "name different flags")
                    clean[name] = v
                clean_list.append(clean)

    clean_seeds = None
    if spec.get("seeds") is not None:
        clean_seeds = _parse_seeds(spec["seeds"], "seeds", problems)
        if clean_seeds and ("seed" in clean_grid or any("seed" in e for e in clean_list)):
            problems.append("seeds: --seed is also in the grid or the list; give it once")

    base = spec.get("base", [])
    if not isinstance(base, list) or not all(isinstance(a, str) for a in base):
        problems.append(f"base: must be a list of flags like \"--env=CartPole-v1\", got {base!r}")
        base = []
    base = [*base, *cli_base]
    _check_base(base, problems)

    if problems:
        return {}, problems
    params_list = expand(clean_grid, clean_list, clean_seeds)
    seen: dict[str, dict] = {}
    for params in params_list:
        key = json.dumps({k: None if v is None else flag_text(v) for k, v in params.items()},
                         sort_keys=True)
        if key in seen:
            problems.append(f"sweep: the run {params} appears twice")
        seen[key] = params
    names = [run_name(p) for p in params_list]
    for i, name in enumerate(names):  # different values that read the same once made safe
        if names.count(name) > 1:
            names[i] = f"{name}_{digest(params_list[i])}"
    varied = []
    for params in params_list:
        varied += [k for k in params if k != "seed" and k not in varied]
    runs = [{"name": n, "params": p} for n, p in zip(names, params_list, strict=True)]
    return {"base": base, "runs": runs, "varied": varied}, problems


def _check_base(base: list[str], problems: list[str]) -> None:
    """Base flags must parse as main.py's flags, and leave --results_dir to multi_train."""
    if not base:
        return
    errors, given = _option_flags().check_command_line(base)
    problems.extend(f"base flags (for main.py): {e}" for e in errors)
    if "results_dir" in given:
        problems.append("base flags (for main.py): --results_dir is set per run by "
                        "multi_train; use --sweep_dir")

