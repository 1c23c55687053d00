import os
import subprocess
import sys

import psutil
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _environ(env: dict[str, str] | None) -> dict[str, str] | None:
    """This process's environment with `env` added (None: inherit it as it is)."""
    return None if env is None else {**os.environ, **env}


def run_main(*args: str, timeout: float = 600,
             env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run the real entry point in a subprocess; `env`: variables added to ours."""
    return subprocess.run(
        [sys.executable, os.path.join(ROOT, "main.py"), *args],
        cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=_environ(env),
    )


_started: list[subprocess.Popen] = []


def start_main(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    """main.py with `args`, its output piped; `env`: variables added to this process's."""
    proc = subprocess.Popen([sys.executable, os.path.join(ROOT, "main.py"), *args], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=_environ(env))
    _started.append(proc)
    return proc


@pytest.fixture(autouse=True)
def no_run_outlives_its_test():
    """A failed test can leave its run going (a long budget, on the CI's 2 cores): kill
    each run this test started, with every process under it, once the test is over."""
    yield
    while _started:
        proc = _started.pop()
        if proc.poll() is None:
            try:
                tree = psutil.Process(proc.pid).children(recursive=True)
            except psutil.NoSuchProcess:
                tree = []
            proc.kill()
            for p in tree:
                try:
                    p.kill()
                except psutil.NoSuchProcess:
                    pass
            psutil.wait_procs(tree, timeout=10)
            proc.communicate(timeout=30)


@pytest.fixture
def results(tmp_path):
    path = tmp_path / "results"
    return str(path)


# The modules that take longest (their tests' seconds summed, `make test`'s workers with
# `--durations=0`, a 2-core AMD EPYC), longest first. `make test` hands whole modules to
# its two workers in collection order (`--dist loadfile --no-loadscope-reorder`): started
# first, they end before the short ones, and neither worker is left alone at the end
# with a long module (xdist's own order, the most tests first, started the Ray modules
# last).
LONGEST_FIRST = (
    "test_learning.py",  # 117
    "test_lifecycle.py",  # 59
    "test_ray_cluster.py",  # 50
    "test_pairs_ray.py",  # 40
    "test_ray.py",  # 34
    "test_data_parallel.py",  # 32
    "test_torchrun.py",  # 32
    "test_sweeps.py",  # 28
    "test_data_parallel_runs.py",  # 27
    "test_off_policy_runs.py",  # 26
    "test_cli.py",  # 25
    "test_pairs_runs.py",  # 21
    "test_off_policy_learning.py",  # 20
    "test_policies.py",  # 16
)


def pytest_collection_modifyitems(items):
    """The modules of LONGEST_FIRST first, in its order; the rest after, as collected."""
    here = {name for name in os.listdir(os.path.dirname(__file__)) if name.startswith("test_")}
    assert set(LONGEST_FIRST) <= here, f"LONGEST_FIRST names no file {set(LONGEST_FIRST) - here}"
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # a stable sort
