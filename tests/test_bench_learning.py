"""bench/learning.py's figures from run directories written by hand: thresholds on
the running mean, the final mean over its own window, and the seed counts."""

import io
import json
import textwrap

import bench.learning
from bench.learning import aggregate, run_seed, seed_result


def write_run(path, returns, steps_per_episode=100):
    path.mkdir()
    rows = ["env_steps,frames,episode_return,episode_length,wall_time"]
    rows += [f"{steps_per_episode * (i + 1)},{steps_per_episode * (i + 1)},{r},{int(r)},{i}.0"
             for i, r in enumerate(returns)]
    (path / "episodes.csv").write_text("\n".join(rows) + "\n")
    (path / "summary.json").write_text(json.dumps(
        {"frames": 100 * len(returns), "env_steps": 100 * len(returns),
         "wall_time_s": float(len(returns)), "fps_mean": 100.0}))
    (path / "flags.json").write_text(json.dumps(
        {"agent": "impala", "lr": 1e-3, "lr_end_value": 0.0, "environment_max_steps": 1}))
    return str(path)


def test_thresholds_use_the_window_and_the_final_mean_its_own(tmp_path):
    # solved over a window of 20 after 40 episodes, then fell back to 200
    held = write_run(tmp_path / "held", [100.0] * 20 + [500.0] * 100)
    fell = write_run(tmp_path / "fell", [100.0] * 20 + [500.0] * 40 + [200.0] * 60)
    a = seed_result(held, (475.0,), window=20, final_window=100)
    b = seed_result(fell, (475.0,), window=20, final_window=100)
    # episode 39 (env step 3900) closes the first window of 20 at 475 or more:
    # one 100 and 19 x 500 make 480
    assert a["reached"]["475.0"]["env_steps"] == 3900
    assert b["reached"]["475.0"]["env_steps"] == 3900
    assert a["final_mean"] == 500.0
    assert b["final_mean"] == (40 * 500.0 + 60 * 200.0) / 100 == 320.0
    # every window of 100 holds all 40 x 500; the last swaps the 100s for 200s
    assert b["best_mean"] == 320.0
    out = aggregate([{"seed": 0, **a}, {"seed": 1, **b}], (475.0,))
    assert out["reached"]["475.0"]["seeds_reached"] == 2
    assert out["final_at_least"] == {"475.0": 1}


def test_run_seed_takes_the_run_directory_its_run_names(tmp_path, monkeypatch):
    # a stand-in main.py that, like a second bench writing into the same results
    # directory, makes a neighbour's run directory beside its own
    (tmp_path / "main.py").write_text(textwrap.dedent("""
        import os, sys
        results = [a.split("=", 1)[1] for a in sys.argv if a.startswith("--results_dir=")][0]
        os.makedirs(os.path.join(results, "Other-v0_1"))
        ours = os.path.join(results, "Task-v0_2")
        os.makedirs(ours)
        print("12:00:00 run directory " + ours + ": Task-v0, 2 actors x 8 envs")
    """))
    monkeypatch.setattr(bench.learning, "ROOT", str(tmp_path))
    results = tmp_path / "results"
    results.mkdir()
    log = io.StringIO()
    status, run_dir = run_seed("Task-v0", 0, 100, str(results), [], log)
    assert status == 0
    assert run_dir == str(results / "Task-v0_2")
    assert "run directory" in log.getvalue()
