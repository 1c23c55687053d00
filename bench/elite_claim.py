"""The seed platform's claim, elite sampling against uniform replay, at its own scale:
the records of the suite's elite-claim rows (bench/suite.py: impala on Breakout and
Seaquest, 1M env steps, `--replays=standard`, `elite3` or `queue`), summarised.

    python -m bench.elite_claim      # the summary as JSON
    python -m bench.suite report     # also writes its section of docs/replays.md
                                     # and a curve per game (docs/curves/elite_<game>.png)

From each record (a run of one arm, game and seed):

* `auc`: the mean of the mean-100 curve over the budget, on a grid of 200 frames
  (the record's downsampled curve; before the first 100 games are in, the first
  mean-100), human-normalised: (auc - random) / (human - random), with the random and
  human scores of the DQN paper (Mnih et al., 2015), as rliable's Atari figures are;
  a run without a mean-100 is left out;
* `updates_per_s`, `env_steps_per_s`: the run's updates and env steps over its wall
  time;
* the policy lag and the KL between the acting and the learning policy on the
  sampled batches (learner.csv, kept in the record), averaged per quarter of the
  budget, with the mean-100's gain over that quarter.

rliable (Agarwal et al., 2021) gives per game and over all game-seeds of an arm (the
seeds every compared arm of every game has: scores [seeds, games]) the interquartile
mean of the normalised auc with a 95% stratified-bootstrap interval, and the
probability that elite sampling's auc beats uniform replay's, averaged over the games
(a fixed bootstrap seed, so the page repeats). With 3 seeds an interval is wide, and
P = 1.00 [1.00, 1.00] means only that every elite run beat every uniform one.

The final mean-100, human-normalised, gets the same IQM and P as a secondary measure.
The verdict (on the auc), from 3 seeds per arm on: reproduced when P's interval lies above 0.5,
not reproduced when it lies below, inconclusive when it holds 0.5, saying whether the
IQM intervals overlap. The cost arms (bench/suite.py `COST_ARMS`: elite sampling with
`--caching`) give their updates/s and env steps/s against uniform replay's, and stay
out of the statistics.
"""

from __future__ import annotations

import json
import os

import numpy as np

from bench.records import load_records, with_section
from bench.suite import COST_ARMS, ELITE_ARMS, ELITE_CLAIM, ROWS

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPLAYS_MD = os.path.join(ROOT, "docs", "replays.md")
BEGIN, END = "<!-- elite-claim:begin -->", "<!-- elite-claim:end -->"
GRID = 200
# (random, human) scores: the DQN paper's (Mnih et al., 2015, Extended Data Table 2)
HUMAN = {"Breakout": (1.7, 30.5), "Seaquest": (68.4, 42054.7)}
QUARTERS = 4
SEEDS_FOR_A_VERDICT = 3


def row_name(game: str, arm: str) -> str:
    return f"{game.lower()}_impala_{arm}"


def _series(x: list, y: list) -> tuple[np.ndarray, np.ndarray]:
    """(x, y) as floats without the points whose y is null."""
    y = np.array([np.nan if v is None else v for v in y], dtype=float)
    x = np.array(x, dtype=float)
    return x[~np.isnan(y)], y[~np.isnan(y)]


def auc(record: dict, budget: int) -> float:
    """The mean of the record's mean-100 over frames 0..budget (see the module
    docstring); NaN without a mean."""
    x, y = _series(record["curve"]["frames"], record["curve"]["mean"])
    if not len(x):
        return float("nan")
    grid = np.linspace(0, budget, GRID)
    return float(np.interp(grid, x, y, left=y[0], right=y[-1]).mean())


def quarters(record: dict, budget: int) -> list[dict]:
    """Per quarter of the budget: the mean policy lag and KL, and the mean-100's gain."""
    learner = record.get("learner") or {}
    mx, my = _series(record["curve"]["frames"], record["curve"]["mean"])
    out = []
    for q in range(QUARTERS):
        lo, hi = budget * q / QUARTERS, budget * (q + 1) / QUARTERS
        part = {}
        for name in ("policy_lag_mean", "kl"):
            x, y = _series(learner.get("frames", []), learner.get(name, []))
            inside = y[(x > lo) & (x <= hi)]
            part[name] = float(inside.mean()) if len(inside) else None
        part["gain"] = float(np.interp(hi, mx, my) - np.interp(lo, mx, my)) if len(mx) else None
        out.append(part)
    return out


def _seeded(scores: dict, func, reps: int):
    """rliable's `get_interval_estimates` with a fixed bootstrap: its stratified
    bootstraps draw from numpy's global generator whatever `random_state` says, so it
    is seeded here, and restored after."""
    from rliable import library as rly

    state = np.random.get_state()
    np.random.seed(0)
    try:
        return rly.get_interval_estimates(scores, func, reps=reps,
                                          random_state=np.random.RandomState(0))
    finally:
        np.random.set_state(state)


def _iqm_intervals(scores: dict[str, np.ndarray], reps: int) -> dict[str, dict]:
    """rliable's IQM and 95% CI (`reps` bootstrap samples) of each arm's scores
    [seeds, games]."""
    from rliable import metrics

    def iqm(x):
        return np.array([metrics.aggregate_iqm(x)])

    point, ci = _seeded(scores, iqm, reps)
    return {a: {"iqm": round(float(point[a][0]), 3),
                "ci95": [round(float(ci[a][0, 0]), 3), round(float(ci[a][1, 0]), 3)]}
            for a in scores}


def _improvement(x: np.ndarray, y: np.ndarray, reps: int) -> dict:
    """P(x > y) averaged over the games (the columns), with its 95% CI (rliable)."""
    from rliable import metrics

    point, ci = _seeded({"pair": (x, y)}, metrics.probability_of_improvement, reps)
    low, high = np.ravel(ci["pair"])
    return {"p": round(float(point["pair"]), 3), "ci95": [round(float(low), 3),
                                                          round(float(high), 3)]}


def summarise(records: dict[str, list[dict]], reps: int = 2000) -> dict:
    """The claim's figures from the records (see the module docstring); games and
    arms without records are left out, seeds in every arm of a game enter rliable
    (`reps` bootstrap samples)."""
    out: dict = {"games": {}}
    pooled: dict[str, list[np.ndarray]] = {}
    for game in ELITE_CLAIM:
        runs = {arm: records.get(row_name(game, arm), []) for arm in ELITE_ARMS}
        runs = {arm: rs for arm, rs in runs.items() if rs}
        if not runs:
            continue
        budget = ROWS[row_name(game, next(iter(runs)))].budget_frames
        raw = {arm: {r["seed"]: auc(r, budget) for r in rs} for arm, rs in runs.items()}
        raw = {arm: {s: v for s, v in by_seed.items() if not np.isnan(v)}
               for arm, by_seed in raw.items()}
        random, human = HUMAN[game]
        compared = [arm for arm in raw if arm not in COST_ARMS]
        seeds = sorted(set.intersection(*(set(raw[a]) for a in compared))) if compared else []
        norm = {arm: _normalised(raw[arm], seeds, random, human) for arm in compared}
        entry = {"seeds": seeds, "arms": {}}
        for arm, rs in runs.items():
            entry["arms"][arm] = {
                "runs": len(rs), "auc": [round(raw[arm][r["seed"]], 3) for r in rs
                                         if r["seed"] in raw[arm]],
                "final": [r["final_mean"] for r in rs],
                "updates_per_s": _median(r["updates"] / r["wall_s"] for r in rs
                                         if r.get("updates")),
                "env_steps_per_s": float(np.median([r["env_steps"] / r["wall_s"] for r in rs])),
                "cpus": sorted({r.get("cpu", "?") for r in rs}),
                "quarters": [{k: _median(q[k] for q in qs) for k in qs[0]}
                             for qs in zip(*(quarters(r, budget) for r in rs), strict=True)]}
        if seeds:
            entry["iqm"] = _iqm_intervals(norm, reps)
            if {"elite3", "standard"} <= set(norm):
                entry["p_elite_over_uniform"] = _improvement(norm["elite3"], norm["standard"],
                                                             reps)
            for arm, scores in norm.items():
                pooled.setdefault(arm, []).append(scores)
            entry["final"] = _final_stats(runs, seeds, random, human, reps)
        out["games"][game] = entry
    if len(pooled.get("standard", [])) == len(out["games"]) > 1:  # every game: pool them
        n = min(len(s) for parts in pooled.values() for s in parts)
        flat = {arm: np.concatenate([s[:n] for s in parts], axis=1)  # [seeds, games]
                for arm, parts in pooled.items() if len(parts) == len(out["games"])}
        out["all"] = {"iqm": _iqm_intervals(flat, reps), "seeds_per_game": n}
        if {"elite3", "standard"} <= set(flat):
            out["all"]["p_elite_over_uniform"] = _improvement(flat["elite3"],
                                                              flat["standard"], reps)
    return out


def _normalised(by_seed: dict[int, float], seeds: list[int], random: float,
                human: float) -> np.ndarray:
    """The scores of `seeds`, human-normalised: [seeds, 1] float."""
    return np.array([[(by_seed[s] - random) / (human - random)] for s in seeds])


def _final_stats(runs: dict[str, list[dict]], seeds: list[int], random: float,
                 human: float, reps: int) -> dict | None:
    """The secondary measure: the human-normalised final mean-100 of elite3 and standard
    over `seeds`, their IQMs and P(elite3 > standard); None without both arms."""
    finals = {arm: {r["seed"]: r["final_mean"] for r in runs.get(arm, [])
                    if r["final_mean"] is not None} for arm in ("elite3", "standard")}
    if not all(s in by_seed for by_seed in finals.values() for s in seeds):
        return None
    scores = {arm: _normalised(by_seed, seeds, random, human)
              for arm, by_seed in finals.items()}
    return {"iqm": _iqm_intervals(scores, reps),
            "p_elite_over_uniform": _improvement(scores["elite3"], scores["standard"], reps)}


def _median(values) -> float | None:
    present = [v for v in values if v is not None]
    return round(float(np.median(present)), 4) if present else None


def _ci(x: dict) -> str:
    return f"{x['iqm']:.2f} [{x['ci95'][0]:.2f}, {x['ci95'][1]:.2f}]"


def _p(x: dict) -> str:
    return f"{x['p']:.2f} [{x['ci95'][0]:.2f}, {x['ci95'][1]:.2f}]"


def verdict(stats: dict, seeds: int) -> str:
    """The claim's verdict from a game's (or all games') `stats` over `seeds` seeds per
    arm: reproduced when the 95% interval of P(elite3 > standard) lies above 0.5, the
    opposite when it lies below, inconclusive when it holds 0.5; none below 3 seeds."""
    if "p_elite_over_uniform" not in stats:
        return ""
    e, u, p = stats["iqm"]["elite3"], stats["iqm"]["standard"], stats["p_elite_over_uniform"]
    overlap = e["ci95"][0] <= u["ci95"][1] and u["ci95"][0] <= e["ci95"][1]
    evidence = (f"the IQM intervals {'overlap' if overlap else 'do not overlap'} "
                f"(`elite3` {_ci(e)}, `standard` {_ci(u)}); P(elite3 > standard) {_p(p)}")
    if seeds < SEEDS_FOR_A_VERDICT:
        return f"No verdict yet ({seeds} of {SEEDS_FOR_A_VERDICT} seeds per arm): {evidence}."
    word = ("Reproduced" if p["ci95"][0] > 0.5 else
            "Not reproduced, uniform replay is ahead" if p["ci95"][1] < 0.5 else
            "Inconclusive")
    return f"Verdict: **{word}** at this scale: {evidence}."


def _final_line(game: dict) -> str:
    """The secondary measure in words (see `_final_stats`)."""
    final = game.get("final")
    if not final:
        return ""
    return ("On the final mean-100 (a secondary measure, human-normalised): IQM `elite3` "
            f"{_ci(final['iqm']['elite3'])}, `standard` {_ci(final['iqm']['standard'])}; "
            f"P(elite3 > standard) {_p(final['p_elite_over_uniform'])}.")


def _num(x: float | None) -> str:
    return "—" if x is None else f"{x:.3g}"


def volatile(arms: dict) -> str:
    """Elite against uniform in the quarters where uniform's KL and policy lag (the
    medians over its seeds) are highest: the mean-100's gain there."""
    if not {"elite3", "standard"} <= set(arms):
        return ""
    uniform, elite = arms["standard"]["quarters"], arms["elite3"]["quarters"]
    parts = []
    for key, what in (("kl", "KL"), ("policy_lag_mean", "policy lag")):
        values = [q[key] for q in uniform]
        if None in values:
            continue
        i = int(np.argmax(values))
        parts.append(f"quarter {i + 1}, where uniform's {what} is highest "
                     f"({_num(values[i])}; elite's {_num(elite[i][key])}): "
                     f"gain {_num(elite[i]['gain'])} with elite, "
                     f"{_num(uniform[i]['gain'])} with uniform")
    return ("Where the policy is most volatile: " + "; ".join(parts) + ".") if parts else ""


def cost(arms: dict) -> str:
    """Each arm's updates/s and env steps/s over uniform replay's (medians of runs)."""
    base = arms.get("standard")
    if not base:
        return ""
    parts = []
    for arm, a in arms.items():
        if arm == "standard":
            continue
        ups = ("—" if a["updates_per_s"] is None or not base["updates_per_s"] else
               f"{a['updates_per_s'] / base['updates_per_s']:.2f}x")
        parts.append(f"`{arm}` {ups} its updates/s and "
                     f"{a['env_steps_per_s'] / base['env_steps_per_s']:.2f}x its env steps/s")
    cpus = sorted({c for a in arms.values() for c in a["cpus"]})
    return (f"Cost against `standard`: {'; '.join(parts)} (on {', '.join(cpus)})."
            if parts else "")


def render(summary: dict) -> str:
    """The generated section of docs/replays.md (between its markers)."""
    if not summary["games"]:
        return ("No run is recorded yet: `python -m bench.suite run breakout_impala_standard "
                "--seeds=100` and the other rows of [Results](results.md).\n")
    lines = []
    for game, g in summary["games"].items():
        lines += [f"**{game}** (seeds in every arm: {', '.join(map(str, g['seeds'])) or 'none'}"
                  f"; [curves](curves/elite_{game.lower()}.png))", "",
                  "| arm | runs | human-normalised auc, IQM [95% CI] | final mean-100 | "
                  "updates/s | env steps/s | KL by quarter | policy lag by quarter | "
                  "gain by quarter |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for arm, a in g["arms"].items():
            iqm = _ci(g["iqm"][arm]) if arm in g.get("iqm", {}) else "—"
            finals = ", ".join(f"{f:.1f}" for f in a["final"] if f is not None)
            by_q = {k: " / ".join("—" if q[k] is None else f"{q[k]:.3g}" for q in a["quarters"])
                    for k in ("kl", "policy_lag_mean", "gain")}
            ups = "—" if a["updates_per_s"] is None else f"{a['updates_per_s']:.2f}"
            lines.append(f"| `{arm}` | {a['runs']} | {iqm} | {finals} | {ups} | "
                         f"{a['env_steps_per_s']:.0f} | "
                         f"{by_q['kl']} | {by_q['policy_lag_mean']} | {by_q['gain']} |")
        lines.append("")
        lines += [f"{text}\n" for text in (verdict(g, len(g["seeds"])), _final_line(g),
                                          volatile(g["arms"]), cost(g["arms"])) if text]
    if "all" in summary:
        a = summary["all"]
        lines += ["**All game-seeds**: human-normalised auc IQM " + "; ".join(
            f"`{arm}` {_ci(x)}" for arm, x in a["iqm"].items()) + "."]
        if "p_elite_over_uniform" in a:
            lines[-1] += " " + verdict(a, a["seeds_per_game"])
        lines.append("")
    return "\n".join(lines)


def plot(game: str, records: dict[str, list[dict]], path: str) -> None:
    """Each seed thin, each arm's median thick, mean-100 against frames."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for (arm, (what, _, _)), colour in zip(ELITE_ARMS.items(), ("C0", "C3", "C7", "C1"),
                                           strict=True):
        rs = records.get(row_name(game, arm), [])
        if not rs:
            continue
        grid = np.linspace(0, ROWS[row_name(game, arm)].budget_frames, GRID)
        curves = []
        for r in rs:
            x, y = _series(r["curve"]["frames"], r["curve"]["mean"])
            ax.plot(x, y, color=colour, lw=0.6, alpha=0.5)
            curves.append(np.interp(grid, x, y, left=np.nan, right=np.nan))
        curves = np.array(curves)
        some = ~np.isnan(curves).all(axis=0)  # grid points where a seed has a mean
        ax.plot(grid[some], np.nanmedian(curves[:, some], axis=0), color=colour, lw=2.2,
                label=f"{arm}: {what} ({len(rs)} seeds)")
    ax.set(xlabel="frames", ylabel="mean return of the last 100 games", title=game)
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def page_with(text: str, section: str) -> str:
    """docs/replays.md's `text` with `section` between the markers."""
    return with_section(text, "docs/replays.md", BEGIN, END, section)


def main() -> int:
    print(json.dumps(summarise(load_records()), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
