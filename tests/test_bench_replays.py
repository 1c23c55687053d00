"""`--replays` presets and bench/replays.py's figures: every preset is a valid mix at
the default batch sizes and resumes as itself; the area under the curve, the
per-row medians and the Markdown table from run directories written by hand; a
cell with a cell.json is not run again."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bench import replays as bench
from option_flags import default_values
from replay.presets import PRESETS
from tests.test_bench_learning import write_run
from training.config import make_config, merge_saved


@pytest.mark.parametrize("env", ["MinAtar/Breakout-v1", "CartPole-v1", "PongNoFrameskip-v4"])
@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_is_a_valid_mix_at_the_default_batch_size(env, name):
    cfg, errors = make_config(default_values(env=env, replays=name), given={"replays"})
    assert not errors, errors
    assert cfg.replay_parameters == PRESETS[name] and cfg.replays == name
    ratios = [r.sample_ratio for r in cfg.replay_specs]
    assert sum(ratios) == 1 and ratios[0] == (1.0 if name == "queue" else 0.5)
    assert cfg.replay_specs[0].type == "queue"


def test_a_given_mix_replaces_a_saved_preset_on_resume():
    saved = make_config(default_values(env="CartPole-v1", replays="elite3"),
                        given={"replays"})[0].to_dict()
    mix = '[{"type": "queue", "capacity": 1, "sample_ratio": 1}]'
    values = merge_saved(default_values(env="CartPole-v1", replay_parameters=mix),
                         {"replay_parameters"}, saved)
    cfg, errors = make_config(values, given={"replay_parameters"})
    assert not errors and cfg.replays is None and cfg.replay_parameters == mix
    kept = make_config(merge_saved(default_values(env="CartPole-v1"), set(), saved))[0]
    assert kept.replays == "elite3" and kept.replay_parameters == PRESETS["elite3"]
    # a saved name keeps the JSON saved with it, whatever the preset became since
    older = {**saved, "replay_parameters": mix}
    kept = make_config(merge_saved(default_values(env="CartPole-v1"), set(), older))[0]
    assert kept.replays == "elite3" and kept.replay_parameters == mix


def test_a_new_mix_on_resume_re_derives_ppo_advantage():
    saved = make_config(default_values(env="CartPole-v1", agent="ppo"))[0].to_dict()
    assert saved["ppo_advantage"] == "gae"  # the queue alone
    values = merge_saved(default_values(env="CartPole-v1", replays="standard"), {"replays"},
                         saved)
    assert make_config(values, given={"replays"})[0].ppo_advantage == "vtrace"
    values = merge_saved(default_values(env="CartPole-v1", replays="standard",
                                        ppo_advantage="gae"),
                         {"replays", "ppo_advantage"}, saved)
    assert make_config(values, given={"replays", "ppo_advantage"})[0].ppo_advantage == "gae"


def test_auc_is_the_curve_mean_over_the_budget():
    # episodes end at steps 100..1000 with returns 0..9; before 100 are in, the curve
    # is the mean so far (k / 2 after episode k), and 0 before the first episode
    cols = {"env_steps": np.arange(1, 11) * 100.0, "episode_return": np.arange(10.0),
            "mean": np.full(10, np.nan)}
    assert bench.auc(cols, 1000) == pytest.approx(sum(k / 2 * 100 for k in range(9)) / 1000)
    # a budget past the last episode holds the last value (4.5) to its end
    assert bench.auc(cols, 2000) == pytest.approx((1800 + 4.5 * 1000) / 2000)
    cols["mean"][9] = 7.0  # a window's mean wins where there is one
    assert bench.auc(cols, 2000) == pytest.approx((1800 + 7.0 * 1000) / 2000)


def test_row_medians_and_the_table(tmp_path):
    cells = []
    for seed, returns in enumerate(([1.0] * 150, [3.0] * 150, [2.0] * 50 + [4.0] * 100)):
        run = write_run(tmp_path / f"s{seed}", returns)
        cell = bench.seed_result(run, (2.0, 3.0), 100, 100)
        cell.update(auc=float(seed), updates_per_s=10.0 + seed, replay_ratio=2.0)
        cells.append(cell)
    s = bench.row_summary(cells, (2.0, 3.0))
    # seed 0 never reaches 2: infinitely late; seed 1 at its 100th episode; seed 2 later
    assert s["seeds_reached"] == {"2.0": 2, "3.0": 2}
    assert s["reached"]["2.0"] == cells[2]["reached"]["2.0"]["env_steps"]
    assert (s["auc"], s["updates_per_s"], s["final_mean"]) == (1.0, 11.0, 3.0)
    md = bench.table("breakout", {"queue": s}, (2.0, 3.0))
    assert md.splitlines()[-1].startswith("| queue | ")


def test_a_finished_cell_is_not_run_again_unless_it_ran_otherwise(tmp_path, monkeypatch):
    cell_dir = tmp_path / "breakout" / "elite3" / "seed0"
    cell_dir.mkdir(parents=True)
    run = write_run(cell_dir / "run", [1.0] * 50 + [3.0] * 100)
    (cell_dir / "cell.json").write_text(json.dumps(
        {"row": "elite3", "auc": 1.5, "run_dir": run, "flags": ["--replays=elite3"],
         "lr_schedule": {"environment_max_steps": 1000}, "reached": {"99.0": None}}))
    monkeypatch.setattr(bench, "run_seed", lambda *a: pytest.fail("ran a finished cell"))
    cell = bench.run_cell("breakout", "elite3", ("--replays=elite3",), 0, 1000, str(tmp_path))
    assert cell["auc"] == 1.5
    # its thresholds are today's, from its episodes: 2 is first reached at episode 100
    assert set(cell["reached"]) == {"2.0", "3.0", "4.0"}
    assert cell["reached"]["2.0"]["env_steps"] == 100 * 100
    with pytest.raises(SystemExit, match="another --results_dir"):
        bench.run_cell("breakout", "elite3", ("--replays=elite3",), 0, 2000, str(tmp_path))


def test_rows_carry_their_flags():
    rows = bench.rows("standard", 0.3)
    assert rows["queue"] == ("--replays=queue",)
    assert "--kl_div_threshold=0.3" in rows["standard+kl_mask"]
    assert rows["ppo standard"][:2] == ("--agent=ppo", "--replays=standard")
    assert set(rows["ppo standard"]) ^ set(rows["impact standard"]) == {
        "--agent=ppo", "--agent=impact"}
