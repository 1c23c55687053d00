import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_main(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run the real entry point in a subprocess."""
    return subprocess.run(
        [sys.executable, os.path.join(ROOT, "main.py"), *args],
        cwd=ROOT, capture_output=True, text=True, timeout=timeout,
    )


@pytest.fixture
def results(tmp_path):
    path = tmp_path / "results"
    return str(path)
