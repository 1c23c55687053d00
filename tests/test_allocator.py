"""training/allocator.py: a learner's process reuses the blocks it frees instead of
faulting them in again, the processes it starts keep glibc's defaults, and a user's
own setting stands. Each case runs in a fresh interpreter (a process's malloc
settings cannot be undone)."""

import json
import os
import platform
import subprocess
import sys

import pytest

from tests.conftest import ROOT

NAMES = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's mallopt")

# `how`: none (glibc's defaults), call (keep_freed_memory), driver (build a CartPole
# run's driver, as a learner's process does) or serial_driver (the same with --serial,
# whose actors step in this process). Then it allocates, writes and
# frees a 64 MiB block (above the 32 MiB that glibc's own mmap threshold rises to) 12
# times, and prints the page faults of the last 10 and the environment a child sees.
PROBE = """
import ctypes, ctypes.util, json, os, resource, subprocess, sys, tempfile
sys.path.insert(0, {root!r})
libc = ctypes.CDLL(ctypes.util.find_library("c"))
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, (ctypes.c_size_t,)
libc.free.argtypes = (ctypes.c_void_p,)
taken = None
if {how!r} == "call":
    from training.allocator import keep_freed_memory
    taken = keep_freed_memory()
elif {how!r} in ("driver", "serial_driver"):
    from option_flags import default_values
    from training.config import make_config
    from training.factory import build_driver
    from training.plan import make_plan
    from training.run_dir import RunDir
    from wrappers.envs import env_info
    cfg, _ = make_config(default_values(env="CartPole-v1", serial={how!r} == "serial_driver",
                                        eval_interval=0, worker_count=1))
    info = env_info(cfg.env, cfg.env_options())
    with tempfile.TemporaryDirectory() as tmp:
        run = RunDir(tmp, cfg.env, cfg.to_dict(), echo=False)
        build_driver(cfg, make_plan(cfg, info), run).close()
        run.close()
faults = []
for _ in range(12):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    block = libc.malloc(2**26)
    ctypes.memset(block, 1, 2**26)
    libc.free(block)
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
child = subprocess.run([sys.executable, "-c", "import os, json; print(json.dumps("
                        "{{n: os.environ.get(n) for n in {names!r}}}))"],
                       capture_output=True, text=True, check=True, timeout=60).stdout
print(json.dumps({{"taken": taken, "faults": sum(faults[2:]), "child": json.loads(child)}}))
"""


def probe(how: str, user: dict[str, str] | None = None) -> dict:
    env = {**{k: v for k, v in os.environ.items() if k not in NAMES}, **(user or {})}
    out = subprocess.run([sys.executable, "-c", PROBE.format(root=ROOT, how=how, names=NAMES)],
                         capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.splitlines()[-1])


def test_a_learners_process_reuses_freed_blocks_and_its_children_keep_the_defaults():
    pages = 64 * 2**20 // os.sysconf("SC_PAGE_SIZE")
    default, called, driver, serial = map(probe, ("none", "call", "driver", "serial_driver"))
    assert default["faults"] >= 5 * pages  # glibc's defaults: every block faults again
    assert serial["faults"] >= 5 * pages  # the serial mode's actors keep them
    assert called["taken"] is True
    assert called["faults"] < pages and driver["faults"] < pages  # the same block, reused
    for out in (default, called, driver, serial):  # the environment is not touched
        assert out["child"] == dict.fromkeys(NAMES)


def test_a_users_own_threshold_stands():
    pages = 64 * 2**20 // os.sysconf("SC_PAGE_SIZE")
    mine = {"MALLOC_MMAP_THRESHOLD_": str(4 * 2**20)}
    out = probe("call", mine)
    assert out["taken"] is False
    assert out["faults"] >= 5 * pages  # 4 MiB: every 64 MiB block is mmapped, as asked
    assert out["child"] == {**dict.fromkeys(NAMES), **mine}
