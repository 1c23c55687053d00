"""tests/pairs.py's covering runs without Ray: every agent with every feature that runs
in one process (`--serial`), two learners for the on-policy agents, several policies
on local actor processes with --caching; through main.py's entry, each step checked and
each feature's trace found (tests/pair_runs.py). A run that hangs fails at its
deadline. The Ray runs are in test_pairs_ray.py (the two files share the workers)."""

from __future__ import annotations

import pytest

from tests.pair_runs import DEADLINE_S, check_covering_run, deadline
from tests.pairs import RUNS


@pytest.mark.parametrize("run", [r for r in RUNS if r.kind != "ray"], ids=lambda r: r.name)
def test_a_covering_run(run, tmp_path):
    with deadline(DEADLINE_S):
        check_covering_run(run, str(tmp_path))
