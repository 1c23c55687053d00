"""The benchmark suite: a run through main.py writes its record; the pages are what the
records give (and stale pages fail here, as docs/flags.md's do in test_docs)."""

from __future__ import annotations

import dataclasses
import json
import os

import pytest

import bench.records as records
from bench import report
from bench.suite import ROWS, Row, run
from tests.pair_runs import DEADLINE_S, deadline

TINY = Row("tiny", "CartPole", "ppo, a tiny budget", "CartPole-v1",
           ("--agent=ppo", "--serial", "--eval_interval=2000", "--learner_threads=1",
            "--status_interval=30"), 4000, (1,), (15.0, 1000.0), 15.0)


def test_a_run_of_a_row_writes_its_record(tmp_path, monkeypatch):
    monkeypatch.setattr(records, "RESULTS", str(tmp_path / "records"))
    with open(tmp_path / "log.txt", "w") as log, deadline(DEADLINE_S):
        assert run(TINY, [3], str(tmp_path / "runs"), log) == 0
    (saved,) = records.load_records(str(tmp_path / "records"))["tiny"]
    with open(tmp_path / "records" / "tiny" / "seed3.json") as f:
        assert json.load(f) == saved
    assert saved["seed"] == 3 and saved["row"] == "tiny"
    assert len(saved["commit"]) == 40 and isinstance(saved["dirty"], bool)
    assert saved["cores"] == os.cpu_count() and saved["cpu"] and saved["torch"]
    assert saved["flags"]["agent"] == "ppo" and saved["flags"]["seed"] == 3
    assert saved["command"] == TINY.command(3)
    assert saved["env_steps"] >= 4000 and saved["fps"] > 0
    curve = saved["curve"]
    assert 0 < len(curve["frames"]) <= records.CURVE_POINTS
    assert curve["frames"] == sorted(curve["frames"])
    assert len(curve["mean"]) == len(curve["frames"]) == len(curve["wall_s"])
    assert saved["final_mean"] == [m for m in curve["mean"] if m is not None][-1]
    assert saved["reached"]["1000.0"] is None  # CartPole's returns stop at 500
    hit = saved["reached"]["15.0"]
    assert hit is not None and hit["frames"] == hit["env_steps"] <= saved["env_steps"]
    assert len(saved["eval"]["mean"]) == 2  # at 2,000 and 4,000 env steps
    learner = saved["learner"]  # learner.csv's lag and KL, a point per update here
    assert saved["updates"] == learner["updates"][-1] > 0
    assert learner["updates"] == sorted(learner["updates"]) and learner["updates"][0] == 1
    assert len(learner["kl"]) == len(learner["policy_lag_mean"]) == len(learner["frames"])
    assert all(k is not None and k >= 0 for k in learner["kl"])


def test_a_run_stopped_before_its_budget_leaves_no_record(tmp_path, monkeypatch):
    monkeypatch.setattr(records, "RESULTS", str(tmp_path / "records"))
    early = dataclasses.replace(TINY, flags=(*TINY.flags, "--stop_at_return=15"))
    with open(tmp_path / "log.txt", "w") as log, deadline(DEADLINE_S):
        assert run(early, [3], str(tmp_path / "runs"), log) == 1
    assert records.load_records(str(tmp_path / "records")) == {}


def test_a_run_of_two_policies_is_recorded_with_policy_0s_figures(tmp_path, monkeypatch):
    """The budget is the run's, both policies' env steps together; the record leads with
    policy 0's share (a run of Wheeler's pair was once refused as stopped early)."""
    monkeypatch.setattr(records, "RESULTS", str(tmp_path / "records"))
    pair = dataclasses.replace(TINY, name="pair", flags=(*TINY.flags, "--num_policies=2",
                                                        "--worker_count=2"))
    with open(tmp_path / "log.txt", "w") as log, deadline(DEADLINE_S):
        assert run(pair, [3], str(tmp_path / "runs"), log) == 0
    (saved,) = records.load_records(str(tmp_path / "records"))["pair"]
    assert len(saved["policies"]) == 2
    assert saved["env_steps"] == saved["policies"][0]["env_steps"] < 4000
    assert sum(p["env_steps"] for p in saved["policies"]) >= 4000


def test_downsample_keeps_the_ends_and_at_most_the_points():
    assert list(records.downsample(5, 10)) == [0, 1, 2, 3, 4]
    keep = records.downsample(10_000, 200)
    assert len(keep) <= 200 and keep[0] == 0 and keep[-1] == 9_999


def _record(seed: int, final: float, at: int | None) -> dict:
    return {"row": "cartpole_ppo", "seed": seed, "commit": "a" * 40, "dirty": False,
            "cpu": "Some CPU", "cores": 2, "torch": "2.13.0", "wall_s": 600.0,
            "final_mean": final, "reached": {
                "200.0": {"frames": 1000, "env_steps": 1000, "wall_s": 1.0},
                "475.0": at and {"frames": at, "env_steps": at, "wall_s": 2.0}},
            "curve": {"frames": [0, 500_000], "env_steps": [0, 500_000],
                      "mean": [None, final], "wall_s": [0.0, 600.0]}}


def test_the_tables_count_misses_as_never():
    recs = [_record(1, 480.0, 200_000), _record(2, 300.0, None), _record(3, 490.0, 300_000)]
    assert report.reached(recs, 475.0, "env steps") == (2, "300k [200k-300k] (2/3)")
    assert report.reached(recs[:2], 475.0, "env steps") == (1, "— (1/2)")
    page = report.render_results({"cartpole_ppo": recs})
    line = next(x for x in page.splitlines() if x.startswith("| ppo |"))
    assert "300k [200k-300k] (2/3)" in line and "480 [300-490]" in line
    assert "10 min (Some CPU, 2 cores)" in line
    assert "commit aaaaaaaaaa" in page


def test_every_row_is_declared_whole():
    for row in ROWS.values():
        assert row.main in row.thresholds, row.name
        assert row.seeds and min(row.seeds) >= 100, row.name  # fresh seeds
        assert row.env_steps() * 4 >= row.budget_frames, row.name


def test_the_pages_are_what_the_records_give():
    assert report.write_pages(check=True) == 0, \
        "docs/results.md or README.md is stale: run `python -m bench.suite report`"


def test_the_check_finds_a_stale_page(tmp_path, monkeypatch):
    stale = tmp_path / "results.md"
    stale.write_text("# Results\n")
    monkeypatch.setattr(report, "RESULTS_MD", str(stale))
    assert report.write_pages(check=True) == 1
    with pytest.raises(ValueError, match="markers"):
        report._readme_with("no markers", "table")


def _claim_run(seed: int, level: float, kl: float) -> dict:
    """A run whose mean-100 climbs linearly to `level` over Breakout's 4M frames, with a
    constant `kl` and policy lag 2."""
    frames = list(range(0, 4_000_001, 400_000))
    return {"seed": seed, "final_mean": level, "wall_s": 1000.0, "env_steps": 1_000_000,
            "updates": 5000,
            "curve": {"frames": frames, "mean": [None] + [level * f / 4e6 for f in frames[1:]]},
            "learner": {"frames": frames, "updates": frames, "kl": [kl] * len(frames),
                        "policy_lag_mean": [2.0] * len(frames)}}


def test_the_elite_claim_summary_ranks_the_arms_and_tells_the_quarters(tmp_path):
    from bench import elite_claim

    recs = {"breakout_impala_standard": [_claim_run(s, 10.0 + s, 0.01) for s in (1, 2, 3)],
            "breakout_impala_elite3": [_claim_run(s, 20.0 + s, 0.02) for s in (1, 2, 3)],
            "breakout_impala_queue": [_claim_run(s, 5.0 + s, 0.03) for s in (1, 2)],
            "breakout_impala_elite3_caching": [_claim_run(1, 21.0, 0.02)]}
    recs["breakout_impala_elite3_caching"][0]["updates"] = 6000  # 1.2x standard's
    summary = elite_claim.summarise(recs, reps=100)
    game = summary["games"]["Breakout"]
    # the cost arm, one seed, neither narrows the seeds nor enters the statistics
    assert game["seeds"] == [1, 2] and set(summary["games"]) == {"Breakout"}
    assert "elite3_caching" in game["arms"] and "elite3_caching" not in game["iqm"]
    iqm = {arm: x["iqm"] for arm, x in game["iqm"].items()}
    assert iqm["elite3"] > iqm["standard"] > iqm["queue"] >= 0.0 and iqm["elite3"] <= 1.0
    assert game["p_elite_over_uniform"]["p"] == 1.0  # every elite run above every uniform
    # the area of a line from 0 to 11 (its first mean stands for the start): about 11 / 2
    assert game["arms"]["standard"]["auc"][0] == pytest.approx(5.5 + 0.2, abs=0.2)
    first, last = game["arms"]["elite3"]["quarters"][0], game["arms"]["elite3"]["quarters"][-1]
    assert first["kl"] == pytest.approx(0.02) and last["policy_lag_mean"] == 2.0
    # the median seed's (22) from its first mean (at 400k) to the quarter's end
    assert first["gain"] == pytest.approx(22.0 * (0.25 - 0.1))
    assert last["gain"] == pytest.approx(22.0 / 4)
    assert game["arms"]["standard"]["updates_per_s"] == 5.0
    page = elite_claim.render(summary)
    assert "| `elite3` | 3 |" in page and "| `elite3_caching` | 1 |" in page
    assert "No verdict yet (2 of 3 seeds per arm)" in page  # the queue arm has 2 seeds
    assert "P(elite3 > standard) 1.00 [1.00, 1.00]" in page
    # the finals (seeds 1, 2): elite3 21 and 22 against 11 and 12, normalised
    final = game["final"]["iqm"]
    assert final["elite3"]["iqm"] == pytest.approx((21.5 - 1.7) / (30.5 - 1.7), abs=1e-3)
    assert "On the final mean-100 (a secondary measure, human-normalised): IQM `elite3` 0.69" \
        in page
    assert "`elite3_caching` 1.20x its updates/s and 1.00x its env steps/s" in page
    # every quarter's KL is the same: the first is the highest; elite's gain is larger
    assert ("quarter 1, where uniform's KL is highest (0.01; elite's 0.02): "
            "gain 3.3 with elite, 1.8 with uniform") in page
    assert "All game-seeds" not in page  # one game only
    elite_claim.plot("Breakout", recs, str(tmp_path / "b.png"))
    assert (tmp_path / "b.png").stat().st_size > 1000
    with pytest.raises(ValueError, match="markers"):
        elite_claim.page_with("no markers", "section")


def test_the_elite_claim_verdict_follows_the_interval_of_p():
    from bench import elite_claim

    def stats(low, high):
        return {"iqm": {"elite3": {"iqm": 0.6, "ci95": [0.5, 0.7]},
                        "standard": {"iqm": 0.4, "ci95": [0.3, 0.45]}},
                "p_elite_over_uniform": {"p": (low + high) / 2, "ci95": [low, high]}}

    assert "**Reproduced**" in elite_claim.verdict(stats(0.6, 1.0), 3)
    assert "do not overlap" in elite_claim.verdict(stats(0.6, 1.0), 3)
    assert "**Not reproduced, uniform replay is ahead**" in elite_claim.verdict(
        stats(0.0, 0.4), 5)
    assert "**Inconclusive**" in elite_claim.verdict(stats(0.3, 0.9), 3)
    assert elite_claim.verdict(stats(0.6, 1.0), 2).startswith("No verdict yet (2 of 3")
    assert elite_claim.verdict({"iqm": {}}, 3) == ""


def test_the_elite_claim_pools_the_games_as_tasks():
    from bench import elite_claim

    # elite loses on Breakout and wins on Seaquest: over the games, P(elite > uniform)
    # is the mean of the games' (0 and 1), not that of runs mixed across games (0.75)
    recs = {"breakout_impala_standard": [_claim_run(1, 20.0, 0.01)],
            "breakout_impala_elite3": [_claim_run(1, 17.0, 0.01)],
            "seaquest_impala_standard": [_claim_run(1, 16_000.0, 0.01)],
            "seaquest_impala_elite3": [_claim_run(1, 72_000.0, 0.01)]}
    summary = elite_claim.summarise(recs, reps=100)
    games = summary["games"]
    assert games["Breakout"]["p_elite_over_uniform"]["p"] == 0.0
    assert games["Seaquest"]["p_elite_over_uniform"]["p"] == 1.0
    norm = {g: {a: x["iqm"] for a, x in games[g]["iqm"].items()} for g in games}
    assert norm["Seaquest"]["standard"] < norm["Breakout"]["elite3"] \
        < norm["Breakout"]["standard"] < norm["Seaquest"]["elite3"]  # where mixing differs
    assert summary["all"]["p_elite_over_uniform"]["p"] == 0.5
    assert "All game-seeds" in elite_claim.render(summary)


def test_a_row_of_several_policies_tells_whose_figures_the_table_gives():
    recs = [{"seed": 100, "policies": [{"final_mean": 205.57}, {"final_mean": None}]},
            {"seed": 101, "policies": [{"final_mean": -3.0}, {"final_mean": 21.44}]}]
    (_, note) = report._policies_note(recs)
    assert note.startswith("The table gives policy 0's figures")
    assert note.endswith("seed 100: 205.6, —; seed 101: -3.0, 21.4.")
    assert report._policies_note([{"seed": 1}]) == []


def test_a_row_with_milestones_gives_both_means_at_each():
    def rec(shift: float, evals: list[int]) -> dict:
        return {"seed": 100, "curve": {"env_steps": [0, 90_000, 99_000, 150_000, 300_000],
                                       "mean": [None, 1.0 + shift, 2.0 + shift, 3.0, 9.0]},
                "eval": {"env_steps": evals, "mean": [10.0 + shift, 20.0 + shift, 30.0],
                         "episodes_each": 10}}
    a, b = rec(0.0, [96_000, 103_000, 300_000]), rec(4.0, [100_000, 196_000, 300_000])
    assert report.at_milestone(a, 100_000) == (2.0, 20.0)  # the last point; the nearest
    assert report.at_milestone(b, 100_000) == (6.0, 14.0)
    assert report.at_milestone(a, 200_000) == (3.0, None)  # no evaluation within 5%
    assert report.at_milestone(a, 50) == (None, None)
    # no mean-100 yet at the milestone: the first within 5% after it
    late = {**a, "curve": {"env_steps": [0, 50_000, 100_368, 120_000],
                           "mean": [None, None, 3.5, 4.0]}}
    assert report.at_milestone(late, 100_000)[0] == 3.5
    assert report.at_milestone(late, 60_000)[0] is None
    row = dataclasses.replace(ROWS["half_cheetah_sac"], milestones=(100_000, 200_000))
    table = report._milestones_table(row, [a, b])
    assert table[-2:] == ["| 100k | 4 [2-6] | 17 [14-20] |", "| 200k | 3 [3-3] | 24 (1/2 seeds) |"]
    assert report._milestones_table(ROWS["breakout_ppo"], [a]) == []


def test_the_off_policy_speed_table_gives_each_records_pairs_and_update_alone():
    rec = {"cpu": "Some CPU", "cores": 2, "commit": "a" * 40, "dirty": False, "learner_threads": 1,
           "pairs": [{"ours_sps": 80.0, "cleanrl_sps": 50.0, "ratio": 1.6},
                     {"ours_sps": 70.0, "cleanrl_sps": 56.0, "ratio": 1.25}],
           "update_alone_ms": 10.5, "ours_over_update_alone": 0.79}
    lines = report._off_policy_speed([rec])
    assert lines[-2] == ("| Some CPU, 2 cores | 75 [70-80] | 53 [50-56] | 1.43 [1.25-1.60]x | 2 "
                         "| 10.50 ms (1 thread) | 0.79 | aaaaaaaaaa |")
    assert report._off_policy_speed([])[-2] == "| none yet | | | | | | | |"


def test_the_elite_claim_intervals_ignore_the_global_generator():
    import numpy as np

    from bench import elite_claim

    # rliable's bootstraps draw from numpy's global generator: the page must not
    x, y = np.array([[1.6], [1.5], [1.57]]), np.array([[1.4], [1.47], [1.55]])
    results = []
    for seed in (1, 2):
        np.random.seed(seed)
        results.append((elite_claim._improvement(x, y, 200),
                        elite_claim._iqm_intervals({"a": x, "b": y}, 200)))
        after = np.random.rand()
        np.random.seed(seed)
        assert after == np.random.rand()  # the caller's generator is left as it was
    assert results[0] == results[1]
