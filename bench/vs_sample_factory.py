"""Training frames/s against Sample Factory's on the same machine, back to back, as one
record of the suite (`bench/results/<task>_vs_sample_factory/`).

    python -m bench.vs_sample_factory --sf_python=/path/to/sf-venv/bin/python \
        [--task=pong|defend_center] [--repeats=3]

Sample Factory 2.1.1 runs in a venv of its own (`pip install torch==2.13.0
sample-factory==2.1.1 'gymnasium[atari]' ale-py opencv-python-headless vizdoom==1.3.2`;
the ale-py 0.8.1 its gymnasium takes ships no ROMs: copy `ale_py/roms/pong.bin` from
this project's .venv, whose ale-py ships them, into that venv's `ale_py/roms/`). Its
example for the task (`TASKS`: its Atari example on Pong, its VizDoom example on
DefendCenter with the same Discrete(1 + 3) actions as ours) runs with as many envs
as ours (`--num_workers=W --num_envs_per_worker=E --device=cpu`) for `--seconds`,
then SIGINT; its rate is the last "60 sec" figure of its "Fps is" lines (frames: env
steps x its frameskip of 4, as ours). Then ours: `python -m bench.throughput
--only_train --env=...` (training with the defaults, no evaluator). The two
alternate `--repeats` times; the record holds every pair, the medians and the median
of the pairs' ratios, with the machine (`bench.records.machine`).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from bench.records import ROOT, git_state, machine, save_side_by_side

FPS = re.compile(r"Fps is \(10 sec: [\d.na]+, 60 sec: ([\d.]+|nan)")
# task -> (our env id, Sample Factory's module and env name)
TASKS = {
    "pong": ("PongNoFrameskip-v4", "sf_examples.atari.train_atari", "atari_pong"),
    "defend_center": ("VizdoomDefendCenter-v1", "sf_examples.vizdoom.train_vizdoom",
                      "doom_defend_the_center_flat_actions"),
}


def row_name(task: str) -> str:
    """The task's folder under bench/results/."""
    return f"{task}_vs_sample_factory"


def sample_factory_fps(sf_python: str, task: str, seconds: float, workers: int, envs: int,
                       log) -> float | None:
    """Sample Factory's last 60-second training rate over a run of `seconds`."""
    _, module, env = TASKS[task]
    with tempfile.TemporaryDirectory() as train_dir:
        cmd = [sf_python, "-m", module, f"--env={env}",
               f"--num_workers={workers}", f"--num_envs_per_worker={envs}", "--device=cpu",
               f"--train_dir={train_dir}", "--experiment=vs_sample_factory"]
        print("running:", " ".join(cmd), file=log, flush=True)
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, cwd=train_dir, start_new_session=True,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})  # lines now
        rates: list[float] = []
        deadline = time.monotonic() + seconds
        os.set_blocking(proc.stdout.fileno(), False)
        while proc.poll() is None and time.monotonic() < deadline:
            for line in iter(proc.stdout.readline, ""):
                log.write(line)
                m = FPS.search(line)
                if m and m.group(1) != "nan":
                    rates.append(float(m.group(1)))
            time.sleep(1.0)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    return rates[-1] if rates else None


def our_fps(task: str, steps: int, log) -> tuple[float, dict]:
    """bench.throughput --only_train's train_fps, and its JSON."""
    cmd = [sys.executable, "-m", "bench.throughput", "--only_train", f"--env={TASKS[task][0]}",
           f"--steps={steps}"]
    print("running:", " ".join(cmd), file=log, flush=True)
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=True)
    result = json.loads(out.stdout)
    return result["train_fps"], result


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sf_python", required=True, help="the python of Sample Factory's venv")
    p.add_argument("--task", choices=sorted(TASKS), default="pong")
    p.add_argument("--seconds", type=float, default=190.0, help="each Sample Factory run")
    p.add_argument("--steps", type=int, default=40_000, help="env steps of each of ours")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--log", help="file for the runs' output (default: stderr)")
    args = p.parse_args(argv)
    if not os.path.exists(args.sf_python):
        p.error(f"--sf_python: {args.sf_python} does not exist; give the python of a venv "
                "with sample-factory==2.1.1 (see this module's docstring)")
    log = open(args.log, "a") if args.log else sys.stderr
    pairs = []
    for _ in range(args.repeats):
        ours, detail = our_fps(args.task, args.steps, log)
        theirs = sample_factory_fps(args.sf_python, args.task, args.seconds,
                                    detail["worker_count"],
                                    detail["envs_per_worker"], log)
        if theirs is None:
            print(json.dumps({"error": "Sample Factory printed no 60-second rate"}))
            return 1
        pairs.append({"ours_fps": ours, "sample_factory_fps": theirs,
                      "ratio": round(ours / theirs, 3)})
    commit, dirty = git_state()
    env, module, sf_env = TASKS[args.task]
    row = row_name(args.task)
    record = {"format": 1, "row": row, "commit": commit, "dirty": dirty, **machine(),
              "date": datetime.date.today().isoformat(), "env": env,
              "worker_count": detail["worker_count"],
              "envs_per_worker": detail["envs_per_worker"],
              "command": f"python -m bench.vs_sample_factory --sf_python=SF "
                         f"--task={args.task} --seconds={args.seconds:g} "
                         f"--steps={args.steps} --repeats={args.repeats}",
              "sample_factory": f"2.1.1, {module} --env={sf_env}",
              "pairs": pairs,
              "ours_fps": statistics.median(x["ours_fps"] for x in pairs),
              "sample_factory_fps": statistics.median(x["sample_factory_fps"] for x in pairs),
              "ratio": statistics.median(x["ratio"] for x in pairs)}
    path = save_side_by_side(record)
    print(json.dumps({**record, "record": path}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
