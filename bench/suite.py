"""The benchmark suite: a declared list of rows, a record per run kept in the
repository, and the results pages generated from the records.

    python -m bench.suite list                       # the rows, and the seeds recorded
    python -m bench.suite run ROW [--seeds=100,101]  # one main.py run per seed, in turn
    python -m bench.suite report [--check]           # docs/results.md, the README table

A row is a task: an env, the flags beyond the defaults (the agent among them), a
budget in frames, its seeds, its return thresholds (the first `main` one is the one
the pages lead with) and a peer's figure with its source. `run` runs each seed
through the real entry point (`bench.learning.run_seed`: `python main.py --env=...
--seed=S --environment_max_steps=...`) and writes its record,
`bench/results/<row>/seed<S>.json` (`bench/records.py`); the seeds default to the
row's that have no record yet. A run must fit a session: each row's budget is one
seed's run of at most about two hours on 2 cores; more seeds are more runs.

Records from an older commit stay valid until a change alters that row's numbers
(the serial mode's bit-for-bit tests say which changes do); the page names the
commits each row's records come from. Counting: frames = env steps x frameskip
(4 on Atari, 1 elsewhere).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shlex
import sys
import tempfile

from bench.learning import frames_per_step, run_seed
from bench.records import git_state, load_records, make_record, save_record


@dataclasses.dataclass(frozen=True)
class Peer:
    """A published figure for the same task: who, what it measures, where it is."""
    name: str  # e.g. "CleanRL ppo_atari.py"
    figure: str  # e.g. "20.36 ± 0.20 at 40M frames (3 seeds)"
    source: str  # a URL or repository path


@dataclasses.dataclass(frozen=True)
class Row:
    name: str  # its folder under bench/results/
    section: str  # the results page's section (one per task)
    label: str  # the row within its section (the agent and what differs)
    env: str
    flags: tuple[str, ...]  # main.py flags beyond the defaults
    budget_frames: int
    seeds: tuple[int, ...]
    thresholds: tuple[float, ...]
    main: float  # the threshold the pages lead with (one of `thresholds`)
    peer: Peer | None = None
    window: int = 100  # episodes in the running mean
    headline: bool = True  # a row of the README's table
    # env steps at which the page gives the training mean and the evaluation's mean
    milestones: tuple[int, ...] = ()

    def env_steps(self) -> int:
        return self.budget_frames // frames_per_step(self.env, list(self.flags))

    def command(self, seed: int | str = "S") -> str:
        """The shell command of one seed's run."""
        return shlex.join(["python", "main.py", f"--env={self.env}", f"--seed={seed}",
                           f"--environment_max_steps={self.env_steps()}", *self.flags])


def _seeds(first: int, count: int) -> tuple[int, ...]:
    return tuple(range(first, first + count))


POPGYM = ("--agent=ppo", "--lr=1e-3", "--r_f_steps=64", "--batch_size=16")
WHEELER = (
    "--num_policies=2", "--worker_count=2",
    '--policy_overrides=[{"agent": "sac"}, {"agent": "ppo", "hidden_size": 256, '
    '"mlp_activation": "relu", "normalize_input": false}]',
    "--share_experience",
    '--weight_sync={"from": 0, "to": [1], "every_updates": 1000, "exclude": ["action_", '
    '"policy."], "rename": {"torso.": "policy_torso."}}')
CLEANRL_PPO = "https://docs.cleanrl.dev/rl-algorithms/ppo/"
ZOO = "https://github.com/DLR-RM/rl-baselines3-zoo/blob/master/benchmark.md"
GYMNAX = "https://github.com/RobertTLange/gymnax"
# the off-policy rows' figures at 300k env steps, means of 10 seeds' evaluation returns
# ± their standard deviation (ddof 0), read from the raw curves: Tianshou's SAC (MuJoCo
# v3; the CSVs live only at this commit), the TD3 paper's own curves (MuJoCo v1), and
# the SAC runs released with SimbaV2 (v4, dojeon-ai/SimbaV2 results/baseline/sac.csv;
# its nearest point, 299,988 steps)
TIANSHOU = ("https://github.com/thu-ml/tianshou/tree/39acf2094d96268d92ebb54dcbfc3de76d702567/"
            "examples/mujoco/benchmark")
TD3_CURVES = "https://github.com/sfujim/TD3/tree/master/learning_curves"
OFF_POLICY_MILESTONES = (100_000, 200_000, 300_000)
# peers' figures as their sources give them: CleanRL's are the mean over 3 seeds of
# the last 100 training episodes; rl-baselines3-zoo's one run's evaluation; gymnax's
# one PPO checkpoint on its JAX port of MinAtar

# The seed platform's claim (elite sampling beats uniform replay) at its own scale:
# impala with its Atari defaults, 1M env steps, the seed's mix (queue 0.5 + a replay of
# 1000 rollouts at 0.5) with uniform or elite sampling (ln_norm, strategy 3, lambda 6,
# alpha annealing 2.0: replay/presets.py), and the queue alone; one more arm, one seed,
# measures what `--caching` (batches prepared ahead in a thread) does to elite's cost
ELITE_CLAIM = {"Breakout": ("BreakoutNoFrameskip-v4", (5.0, 10.0, 20.0), 10.0),
               "Seaquest": ("SeaquestNoFrameskip-v4", (100.0, 200.0, 400.0), 200.0)}
# arm: (what it is, its flags, its seeds)
ELITE_ARMS = {"standard": ("uniform replay", ("--replays=standard",), _seeds(100, 3)),
              "elite3": ("elite sampling", ("--replays=elite3",), _seeds(100, 3)),
              "queue": ("no replay", ("--replays=queue",), _seeds(100, 3)),
              "elite3_caching": ("elite sampling, batches prepared ahead",
                                 ("--replays=elite3", "--caching"), _seeds(100, 1))}
COST_ARMS = ("elite3_caching",)  # measured for their cost only: not in the statistics


def _elite_claim_rows() -> list[Row]:
    return [Row(f"{game.lower()}_impala_{arm}", f"Elite vs uniform replay: {game}",
                f"impala, {what} ({' '.join(flags)})", env, ("--agent=impala", *flags),
                4_000_000, seeds, thresholds, main, headline=False)
            for game, (env, thresholds, main) in ELITE_CLAIM.items()
            for arm, (what, flags, seeds) in ELITE_ARMS.items()]


# Fresh seeds (from 100): no earlier figure used them.
ROWS: dict[str, Row] = {r.name: r for r in (
    Row("pong_ppo", "Pong", "ppo (the Atari defaults)", "PongNoFrameskip-v4", (),
        2_500_000, _seeds(100, 8), (-15.0, 0.0, 18.0), 18.0,
        Peer("CleanRL ppo_atari.py", "20.36 ± 0.20 at 40M frames", CLEANRL_PPO)),
    Row("breakout_ppo", "Breakout", "ppo (the Atari defaults)", "BreakoutNoFrameskip-v4", (),
        5_000_000, _seeds(100, 3), (10.0, 50.0, 100.0), 50.0,
        Peer("CleanRL ppo_atari.py", "414.66 ± 28.09 at 40M frames", CLEANRL_PPO)),
    Row("minatar_breakout", "MinAtar", "Breakout, impala (the MinAtar defaults)",
        "MinAtar/Breakout-v1", (), 1_000_000, _seeds(100, 3), (2.0, 5.0, 10.0), 5.0,
        Peer("gymnax PPO", "28 at 10M env steps", GYMNAX)),
    Row("minatar_asterix", "MinAtar", "Asterix, impala (the MinAtar defaults)",
        "MinAtar/Asterix-v1", (), 2_000_000, _seeds(100, 3), (2.0, 5.0, 10.0), 5.0,
        Peer("gymnax PPO", "15 at 10M env steps", GYMNAX), headline=False),
    Row("minatar_space_invaders", "MinAtar", "SpaceInvaders, impala (the MinAtar defaults)",
        "MinAtar/SpaceInvaders-v1", (), 2_000_000, _seeds(100, 3), (5.0, 20.0, 40.0), 20.0,
        Peer("gymnax PPO", "131 at 10M env steps", GYMNAX), headline=False),
    Row("minatar_breakout_2_learners", "Several learners",
        "Breakout, impala, 2 learners of batch 4 (one of batch 8: the MinAtar row)",
        "MinAtar/Breakout-v1", ("--learner_count=2", "--batch_size=4"), 1_000_000,
        _seeds(100, 3), (2.0, 5.0, 10.0), 5.0, headline=False),
    Row("cartpole_impala", "CartPole", "impala (the vector defaults)", "CartPole-v1", (),
        500_000, _seeds(100, 10), (200.0, 475.0), 475.0),
    Row("cartpole_ppo", "CartPole", "ppo", "CartPole-v1", ("--agent=ppo",),
        500_000, _seeds(100, 10), (200.0, 475.0), 475.0,
        Peer("CleanRL ppo.py", "490.04 ± 6.12 at 500k env steps", CLEANRL_PPO),
        headline=False),
    Row("lunar_lander_continuous_ppo", "LunarLander (continuous)", "ppo (the Box2D defaults)",
        "LunarLanderContinuous-v3", ("--agent=ppo",), 1_000_000, _seeds(100, 3),
        (0.0, 100.0, 200.0), 200.0,
        Peer("rl-baselines3-zoo PPO", "270.86 ± 32.07 at 1M env steps (v2, evaluation)",
             ZOO)),
    Row("popgym_repeat_previous_lstm", "Memory (popgym)", "RepeatPreviousEasy, ppo + LSTM",
        "popgym:popgym-RepeatPreviousEasy-v0", (*POPGYM, "--use_lstm"), 200_000,
        _seeds(100, 3), (-0.25, 0.0, 0.5), 0.5),
    Row("popgym_repeat_previous_ff", "Memory (popgym)",
        "RepeatPreviousEasy, ppo feed-forward", "popgym:popgym-RepeatPreviousEasy-v0",
        POPGYM, 200_000, _seeds(100, 3), (-0.25, 0.0, 0.5), 0.5, headline=False),
    Row("wheeler_pair", "Several policies: Wheeler's pair",
        "sac target + ppo explorer (weight sync, shared experience)",
        "LunarLanderContinuous-v3", WHEELER, 100_000, _seeds(100, 3), (-100.0, 0.0, 100.0),
        0.0),
    # ViZDoom: Sample Factory's settings (the vizdoom family's auto values)
    Row("vizdoom_basic", "ViZDoom", "Basic, ppo + LSTM (the ViZDoom defaults)",
        "VizdoomBasic-v1", (), 2_000_000, _seeds(100, 3), (0.0, 50.0, 80.0), 50.0),
    Row("vizdoom_defend_center", "ViZDoom", "DefendCenter, ppo + LSTM (the ViZDoom defaults)",
        "VizdoomDefendCenter-v1", (), 5_000_000, _seeds(100, 3), (5.0, 10.0, 20.0), 10.0,
        Peer("Sample Factory 2.0 APPO (a model card)", "25.00 ± 0.00, budget not stated",
             "https://huggingface.co/edbeeching/doom_defend_the_center_2222")),
    Row("vizdoom_health_gathering_supreme", "ViZDoom",
        "HealthGatheringSupreme, ppo + LSTM (the ViZDoom defaults)",
        "VizdoomHealthGatheringSupreme-v1", (), 5_000_000, _seeds(100, 3),
        (500.0, 1000.0, 1500.0), 1000.0, headline=False),
    # the off-policy agents where a run fits 2 cores: 300k env steps, an evaluation
    # every 25k (the page gives both means at 100k, 200k and 300k); the last threshold
    # is the better published SAC figure at 300k (the TD3 paper's for td3)
    Row("half_cheetah_sac", "Off-policy (MuJoCo)", "HalfCheetah, sac", "HalfCheetah-v5",
        ("--agent=sac", "--eval_interval=25000"), 300_000, _seeds(100, 3),
        (3000.0, 6000.0, 9059.0), 9059.0,
        Peer("Tianshou SAC (v3, 10 seeds)", "9,059 ± 1,051 at 300k env steps (evaluation; "
             "SimbaV2's SAC runs, v4: 8,593 ± 964)", TIANSHOU), milestones=OFF_POLICY_MILESTONES),
    Row("hopper_td3", "Off-policy (MuJoCo)", "Hopper, td3", "Hopper-v5",
        ("--agent=td3", "--eval_interval=25000"), 300_000, _seeds(100, 3),
        (1000.0, 2000.0, 2410.0), 2410.0,
        Peer("TD3 paper's curves (v1, 10 seeds)", "2,410 ± 900 at 300k env steps (evaluation)",
             TD3_CURVES), headline=False, milestones=OFF_POLICY_MILESTONES),
    Row("walker2d_sac", "Off-policy (MuJoCo)", "Walker2d, sac", "Walker2d-v5",
        ("--agent=sac", "--eval_interval=25000"), 300_000, _seeds(100, 3),
        (1000.0, 2000.0, 3387.0), 3387.0,
        Peer("Tianshou SAC (v3, 10 seeds)", "3,387 ± 1,182 at 300k env steps (evaluation; "
             "SimbaV2's SAC runs, v4: 2,470 ± 1,571)", TIANSHOU), headline=False,
        milestones=OFF_POLICY_MILESTONES),
    *_elite_claim_rows(),
)}


def run(row: Row, seeds: list[int], results_dir: str, log) -> int:
    """Each seed's run of `row`, in turn, and its record; 1 at the first failed run."""
    os.makedirs(results_dir, exist_ok=True)
    for seed in seeds:
        tree = git_state()
        status, run_dir = run_seed(row.env, seed, row.env_steps(), results_dir,
                                   list(row.flags), log)
        if status != 0 or run_dir is None:
            print(json.dumps({"row": row.name, "seed": seed, "run_dir": run_dir,
                              "error": f"main.py exited {status}"}))
            return 1
        with open(os.path.join(run_dir, "summary.json")) as f:
            done = json.load(f)["env_steps"]  # the run's, every policy's together
        if done < row.env_steps():  # stopped early (a signal): no record
            print(json.dumps({"row": row.name, "seed": seed, "run_dir": run_dir,
                              "error": f"the run stopped at {done} env steps "
                                       f"of {row.env_steps()}: not recorded"}))
            return 1
        record = make_record(row, seed, run_dir, row.command(seed), tree)
        path = save_record(record)
        print(json.dumps({"row": row.name, "seed": seed, "record": path,
                          "final_mean": record["final_mean"],
                          "reached": record["reached"], "fps": record["fps"],
                          "wall_s": record["wall_s"]}))
    return 0


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("list", help="the rows and their recorded seeds")
    r = sub.add_parser("run", help="run seeds of a row and record them")
    r.add_argument("row", choices=sorted(ROWS))
    r.add_argument("--seeds", help="comma-separated (default: the row's not yet recorded)")
    r.add_argument("--results_dir", help="where the run directories go (default: a "
                   "temporary directory under results/)")
    r.add_argument("--log", help="file for the runs' output (default: stderr)")
    g = sub.add_parser("report", help="write the pages from the records")
    g.add_argument("--check", action="store_true",
                   help="exit 1 if a page differs from what the records give")
    args = p.parse_args(argv)
    if args.cmd == "list":
        records = load_records()
        for row in ROWS.values():
            done = [rec["seed"] for rec in records.get(row.name, [])]
            print(f"{row.name:32s} {row.budget_frames:>11,} frames  seeds "
                  f"{','.join(map(str, row.seeds))}  recorded {done or 'none'}")
        return 0
    if args.cmd == "report":
        from bench.report import write_pages

        return write_pages(check=args.check)
    row = ROWS[args.row]
    done = {rec["seed"] for rec in load_records().get(row.name, [])}
    seeds = [int(s) for s in args.seeds.split(",")] if args.seeds else \
        [s for s in row.seeds if s not in done]
    results_dir = os.path.abspath(args.results_dir or tempfile.mkdtemp(
        prefix=f"suite_{row.name}_", dir=os.makedirs("results", exist_ok=True) or "results"))
    log = open(args.log, "a") if args.log else sys.stderr
    return run(row, seeds, results_dir, log)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
