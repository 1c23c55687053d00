"""tests/pairs.py's covering runs with Ray actors: every agent with `--backend=ray` and
--caching (and two learners, a resume and test mode once), all on one local Ray
instance, through main.py's entry (tests/pair_runs.py). A run that hangs fails at its
deadline."""

from __future__ import annotations

import logging

import pytest

from tests.pair_runs import DEADLINE_S, check_covering_run, deadline
from tests.pairs import RUNS


@pytest.fixture(scope="module")
def ray_instance():
    """A local Ray instance that every run of the module joins (their actor pools leave
    it running): one start-up of 3-8 s instead of one a run."""
    import ray

    from workers.ray_actor import init_ray

    started = init_ray("", 2, logging.getLogger(__name__))
    yield
    if started:
        ray.shutdown()


@pytest.mark.parametrize("run", [r for r in RUNS if r.kind == "ray"], ids=lambda r: r.name)
def test_a_covering_run_with_ray_actors(run, tmp_path, ray_instance):
    with deadline(DEADLINE_S):
        check_covering_run(run, str(tmp_path))


def test_vizdoom_with_ray_actors(tmp_path, ray_instance):
    from tests.test_vizdoom import train

    train(str(tmp_path / "results"), env="VizdoomHealthGatheringSupreme-v1", backend="ray",
          eval_interval=0)
