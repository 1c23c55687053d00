"""The refused cells of docs/pairs.md through main.py's entry (exit 2, the message naming
both flags, nothing written), the table's completeness, and the page generated from
tests/pairs.py so that it cannot go stale."""

from __future__ import annotations

import importlib.util
import os

import pytest

from tests import pairs
from tests.conftest import ROOT
from tests.pair_runs import BUDGET, BY_AGENT, DEADLINE_S, STEPS, deadline, invoke


def _gen_pairs():
    """docs/gen_pairs.py as a module (docs/ is no package)."""
    spec = importlib.util.spec_from_file_location(
        "gen_pairs", os.path.join(ROOT, "docs", "gen_pairs.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def refused_cells() -> list[tuple[str, str]]:
    """Every refused cell once: (agent, feature) and (feature, feature) in FEATURES'
    order."""
    agents, features = pairs.cells()
    order = pairs.FEATURES_ORDER
    return [k for k, c in agents.items() if c.state == "refused"] + [
        (f, g) for (f, g), c in features.items()
        if c.state == "refused" and order.index(f) < order.index(g)]


@pytest.mark.parametrize("pair", refused_cells(), ids="-".join)
def test_a_refused_pair_exits_2_naming_both_flags(pair, tmp_path):
    flags = pairs.refused_command(*pair)
    results = tmp_path / "results"
    # a tiny budget: were the pair accepted, the run would end at once and the test fail
    with deadline(DEADLINE_S):
        status, err = invoke(**{**BUDGET, **BY_AGENT[flags["agent"]], **flags},
                             environment_max_steps=STEPS, results_dir=str(results))
    assert status == 2, err[-2000:]
    # this pair's refusal alone: a problem of the bad-flags list, or preflight's one line
    problems = [line for line in err.splitlines() if line.startswith("  ")] or \
        [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(problems) == 1, err
    for said in pairs.message_names(*pair):
        assert said in problems[0], (said, problems[0])
    assert not results.exists()


def test_every_feature_and_agent_has_a_row_or_column_and_every_run_a_use():
    agents, features = pairs.cells()
    assert {a for a, _ in agents} == set(pairs.AGENTS)
    assert {f for f, _ in features} == set(pairs.FEATURES_ORDER)
    used = {r for c in [*agents.values(), *features.values()] for r in c.runs[:1]}
    assert used == {r.name for r in pairs.RUNS}, "a covering run no cell names"


def test_a_cell_without_a_run_or_with_a_run_and_a_refusal_is_an_error(monkeypatch):
    """What keeps the table free of unknown cells: drop the only run of ray with the
    off-policy agents, or refuse a pair a run has, and the page cannot be generated."""
    runs = pairs.RUNS
    monkeypatch.setattr(pairs, "RUNS", tuple(r for r in runs if r.name != "ray-sac"))
    with pytest.raises(ValueError, match=r"\(sac, ray\): neither a run nor a refusal"):
        pairs.cells()
    assert _gen_pairs().main(["--check"]) == 1
    monkeypatch.setattr(pairs, "RUNS", runs)
    monkeypatch.setitem(pairs.REFUSALS, frozenset(("ray", "caching")),
                        pairs.Refusal(("ray", "caching")))
    with pytest.raises(ValueError, match=r"\(ray, caching\): works and refused"):
        pairs.cells()


def test_pairs_page_is_generated_from_the_declarations():
    with open(os.path.join(ROOT, "docs", "pairs.md"), encoding="utf-8") as f:
        on_disk = f.read()
    assert on_disk == _gen_pairs().render(), \
        "docs/pairs.md is stale: run `python docs/gen_pairs.py` (or `make docs`)"


def test_gen_pairs_check_exits_1_on_a_stale_file(tmp_path):
    stale = tmp_path / "pairs.md"
    stale.write_text("# not the generated page\n")
    assert _gen_pairs().main(["--check", f"--output={stale}"]) == 1
    assert _gen_pairs().main([f"--output={stale}"]) == 0
    assert _gen_pairs().main(["--check", f"--output={stale}"]) == 0
