"""Which features compose: the declarations behind docs/pairs.md and its tests.

Three lists, and the cells derived from them:

- `FEATURES`: each feature, the flags that turn it on (`Feature.on`), or the step
  that is it (a resume, a resume that changes N or the replay, test mode, --render);
- `RUNS`: the covering runs, each an agent on an env with a set of features and the
  steps train, resume, test; tests/test_pairs_runs.py and test_pairs_ray.py play each
  through main.py's entry and check that every feature it claims shows in what the run
  wrote (tests/pair_runs.py);
- `REFUSALS`: the pairs main.py refuses (exit 2 before anything is written), with what
  the message must say; tests/test_pairs_refused.py runs each.

A cell is "works" when a run has both (an agent's column: the run's agent and the
feature), "refused" when REFUSALS has the pair, or one of a feature's `needs` with
the other, and "n.a." for a pair no run can hold (`NOT_APPLICABLE`). `cells()` raises
if a cell is none of these or two of them: a new feature or agent needs a run or a
refusal before the page can be generated (docs/gen_pairs.py). Pure Python: no torch.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping

from agents.registry import AGENTS, off_policy
from replay.config import CUSTOM_DEFAULTS

OFF_POLICY = tuple(a for a in AGENTS if off_policy(a))

# the envs the runs use: (action kind, input kind)
ENVS = {"CartPole-v1": ("discrete", "vector"), "Pendulum-v1": ("box", "vector"),
        "MinAtar/Breakout-v1": ("discrete", "pixels")}
# what a resume may change to be one "with another N": the envs and the learners
N_FLAGS = ("worker_count", "envs_per_worker", "learner_count")
REPLAY_FEATURES = ("standard", "elite", "attentive")
REPLAY_ENTRIES = {"queue": {"type": "queue", "capacity": 1},
                  "standard": {"type": "standard", "capacity": 32},
                  "elite": {"type": "custom", "capacity": 32, "sample_strategy": "elite_sampling"},
                  "attentive": {"type": "custom", "capacity": 32,
                                "sample_strategy": "attentive_sampling"}}
# sample ratios for a mix of n entries that compose any batch of 4 rollouts
RATIOS = {1: (1.0,), 2: (0.5, 0.5), 3: (0.5, 0.25, 0.25), 4: (0.25, 0.25, 0.25, 0.25)}


def mix(*kinds: str) -> str:
    """--replay_parameters for the REPLAY_ENTRIES `kinds` (the queue too: named)."""
    return json.dumps([{**REPLAY_ENTRIES[k], "sample_ratio": r}
                       for k, r in zip(kinds, RATIOS[len(kinds)], strict=True)])


@dataclasses.dataclass(frozen=True)
class Feature:
    """A row of the tables. `on`: the flags that turn it on (for a step: none);
    `names`: what a refusal's message must name for it (its flag; none for a kind of
    env: the message names the env); `needs`: the features it cannot be on without."""

    name: str
    label: str
    names: tuple[str, ...]
    on: Mapping = dataclasses.field(default_factory=dict)
    needs: tuple[str, ...] = ()


POLICIES = {"num_policies": 2, "worker_count": 2}
FEATURES = (
    Feature("lstm", "`--use_lstm`", ("--use_lstm",), {"use_lstm": True}),
    Feature("box", "Box actions (Pendulum-v1)", (), {"env": "Pendulum-v1"}),
    Feature("discrete", "Discrete actions (CartPole-v1, MinAtar)", (), {"env": "CartPole-v1"}),
    Feature("pixels", "pixel inputs (MinAtar/Breakout-v1)", (), {"env": "MinAtar/Breakout-v1"}),
    Feature("vector", "vector inputs (CartPole-v1, Pendulum-v1)", (), {"env": "CartPole-v1"}),
    Feature("serial", "`--serial`", ("--serial",), {"serial": True}),
    Feature("ray", "`--backend=ray`", ("--backend",), {"backend": "ray"}),
    Feature("caching", "`--caching`", ("--caching",), {"caching": True}),
    Feature("learners", "`--learner_count=2`", ("--learner_count",),
            {"learner_count": 2, "worker_count": 2}),
    Feature("policies", "`--num_policies=2`", ("--num_policies",), POLICIES),
    Feature("share", "`--share_experience`", ("--share_experience",),
            {"share_experience": True}, needs=("policies", "standard")),
    Feature("weight_sync", "`--weight_sync`", ("--weight_sync",),
            {"weight_sync": '{"from": 0, "to": [1], "every_updates": 2}'},
            needs=("policies",)),
    Feature("pbt", "`--with_pbt`", ("--with_pbt",),
            {"with_pbt": True, "pbt_period_env_steps": 64, "pbt_replace_fraction": 0.5,
             "pbt_mutation_rate": 1.0, "pbt_replace_reward_gap": 0.0}, needs=("policies",)),
    Feature("resume", "resume (`--op_mode=train_w_load`)", ("--op_mode",)),
    Feature("checkpoint_replay", "`--checkpoint_replay`", ("--checkpoint_replay",),
            {"checkpoint_replay": True}),
    Feature("resume_n", "a resume with another N (`--worker_count`, `--envs_per_worker`, "
            "`--learner_count`)", ("--envs_per_worker",), needs=("resume",)),
    Feature("resume_replay", "a resume with another replay (`--replay_parameters`)",
            ("--replay_parameters",), needs=("resume",)),
    Feature("bf16", "`--precision=bf16`", ("--precision",), {"precision": "bf16"}),
    Feature("standard", "the standard replay", ("--replay_parameters",)),
    Feature("elite", "the elite replay", ("--replay_parameters",)),
    Feature("attentive", "the attentive replay", ("--replay_parameters",)),
    Feature("test", "test mode (`--op_mode=test`)", ("--op_mode",)),
    Feature("render", "`--render`", ("--render",), needs=("test",)),
)
BY_NAME = {f.name: f for f in FEATURES}
FEATURES_ORDER = tuple(BY_NAME)
# pairs no run can hold: one env has one kind of action and of input
NOT_APPLICABLE = {frozenset(p) for p in (("box", "discrete"), ("pixels", "vector"))}


def on(*names: str, queue: bool = True) -> dict:
    """The flags that turn on the features `names`; the replay features make one mix,
    after a queue entry unless `queue` is False (the off-policy agents have none)."""
    flags: dict = {}
    for name in names:
        flags.update(BY_NAME[name].on)
    replays = [n for n in REPLAY_FEATURES if n in names]
    if replays:
        flags["replay_parameters"] = mix(*(["queue"] if queue else []), *replays)
    return flags


@dataclasses.dataclass(frozen=True)
class Run:
    """A covering run: `agent` on `env` with the train step's `flags` (the tiny budget
    is tests/pair_runs.py's), then a resume with the flags `resume` changes (None:
    no resume), then test mode with the flags `test` (None: none)."""

    name: str
    agent: str
    env: str
    flags: Mapping
    resume: Mapping | None = None
    test: Mapping | None = None

    @property
    def kind(self) -> str:
        """How it runs: "ray" (Ray actors: tests/test_pairs_ray.py), "processes" (learner
        or actor processes) or "serial" (everything in the test's process)."""
        if self.flags.get("backend") == "ray":
            return "ray"
        return "serial" if self.flags.get("serial") and \
            self.flags.get("learner_count", 1) == 1 else "processes"

    def step_flags(self) -> list[dict]:
        """Each training step's flags: the train step's, and the resume's if any."""
        train = {"agent": self.agent, "env": self.env, **self.flags}
        return [train] if self.resume is None else [train, {**train, **self.resume}]


def flag_features(flags: Mapping) -> set[str]:
    """The features a training step's `flags` turn on."""
    found = set(ENVS[flags["env"]])
    found |= {name for name, test in (
        ("lstm", flags.get("use_lstm")), ("serial", flags.get("serial")),
        ("ray", flags.get("backend") == "ray"), ("caching", flags.get("caching")),
        ("learners", flags.get("learner_count", 1) > 1),
        ("policies", flags.get("num_policies", 1) > 1),
        ("share", flags.get("share_experience")), ("weight_sync", flags.get("weight_sync")),
        ("pbt", flags.get("with_pbt")), ("checkpoint_replay", flags.get("checkpoint_replay")),
        ("bf16", flags.get("precision") == "bf16")) if test}
    return found | replay_features(flags.get("replay_parameters"))


def replay_features(replay_parameters: str | None) -> set[str]:
    """The replay features of a --replay_parameters mix (None: the queue alone)."""
    found = set()
    for entry in json.loads(replay_parameters or "[]"):
        if entry["type"] == "standard":
            found.add("standard")
        elif entry["type"] == "custom":
            strategy = entry.get("sample_strategy", CUSTOM_DEFAULTS["sample_strategy"])
            found |= {"elite_sampling": {"elite"}, "attentive_sampling": {"attentive"}}.get(
                strategy, set())
    return found


def run_features(run: Run) -> frozenset[str]:
    """Every feature `run` exercises: its steps' flags, and the steps themselves."""
    steps = run.step_flags()
    found = set().union(*map(flag_features, steps))
    if run.resume is not None:
        found.add("resume")
        train, resumed = steps
        if any(resumed.get(k, 1) != train.get(k, 1) for k in N_FLAGS):
            found.add("resume_n")
        if resumed.get("replay_parameters") != train.get("replay_parameters"):
            found.add("resume_replay")
    if run.test is not None:
        found |= {"test", "render"} if run.test.get("render") else {"test"}
    return frozenset(found)


# --- the covering runs ---------------------------------------------------------------------
# everything at once where it may be: every pair of the in-process features is in one of
# ALL's runs on each env; the runs of processes pair every agent with Ray and --caching
# and each on-policy agent with two learners, and meet the other features in ray-impala,
# learners-impala and caching-policies
SEVERAL = ("policies", "share", "weight_sync", "pbt")
REPLAYS = ("checkpoint_replay", *REPLAY_FEATURES)
ALL = ("serial", "lstm", "bf16", *SEVERAL, *REPLAYS)
# a resume with more envs and another mix; test mode playing two recorded games
RESUME = {"envs_per_worker": 3, "replay_parameters": mix("queue", "standard")}
RESUME_OFF_POLICY = {"worker_count": 4, "replay_parameters": mix("standard")}
PLAY = {"test_episode_count": 2, "render": True}
PLAY_ONE = {"test_episode_count": 1, "render": True}  # Pendulum's games are 200 steps
OFF_POLICY_ALL = ("serial", *SEVERAL, *REPLAYS)

RUNS = (
    # serial: every agent with every in-process feature, on pixels or Box actions
    Run("impala-minatar", "impala", "MinAtar/Breakout-v1", on(*ALL), RESUME, PLAY),
    Run("impala-pendulum", "impala", "Pendulum-v1", on("serial")),
    Run("ppo-pendulum", "ppo", "Pendulum-v1", on(*ALL), RESUME, PLAY_ONE),
    Run("ppo-minatar", "ppo", "MinAtar/Breakout-v1", on("serial")),
    Run("truly_ppo-minatar", "truly_ppo", "MinAtar/Breakout-v1", on(*ALL), RESUME, PLAY),
    Run("truly_ppo-pendulum", "truly_ppo", "Pendulum-v1", on("serial")),
    Run("impact-pendulum", "impact", "Pendulum-v1", on(*ALL), RESUME, PLAY_ONE),
    Run("impact-minatar", "impact", "MinAtar/Breakout-v1", on("serial")),
    *(Run(f"{a}-pendulum", a, "Pendulum-v1", on(*OFF_POLICY_ALL, queue=False),
          RESUME_OFF_POLICY, PLAY_ONE) for a in OFF_POLICY),
    # Ray actors (with --caching) for every agent; two learners beside them once
    Run("ray-impala", "impala", "MinAtar/Breakout-v1",
        on("ray", "caching", "lstm", "bf16", *REPLAYS), RESUME, PLAY),
    Run("ray-ppo", "ppo", "Pendulum-v1", on("ray", "caching", "learners")),
    *(Run(f"ray-{a}", a, "CartPole-v1", on("ray", "caching")) for a in ("truly_ppo", "impact")),
    *(Run(f"ray-{a}", a, "Pendulum-v1", on("ray", "caching", "standard", queue=False))
      for a in OFF_POLICY),
    # two serial learners for the other on-policy agents
    Run("learners-impala", "impala", "MinAtar/Breakout-v1",
        on("serial", "learners", "lstm", "bf16", *REPLAYS), RESUME, PLAY),
    *(Run(f"learners-{a}", a, "CartPole-v1", on("serial", "learners"))
      for a in ("truly_ppo", "impact")),
    # local actor processes with --caching for several policies
    Run("caching-policies", "impala", "CartPole-v1", on("caching", *SEVERAL, "standard")),
)


# --- what main.py refuses --------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Refusal:
    """The pair (`pair`: an agent or a feature, and a feature) that main.py refuses with
    exit 2; `says`: what the message must hold besides both flags' names (an agent's
    name stands for its flag); `flags`: what the refused command needs besides the two
    features' own flags (`on`)."""

    pair: tuple[str, str]
    says: tuple[str, ...] = ()
    flags: Mapping = dataclasses.field(default_factory=dict)


REFUSALS = {frozenset(r.pair): r for r in (
    *(r for a in OFF_POLICY for r in (
        Refusal((a, "lstm"), ("has no recurrent version",)),
        Refusal((a, "discrete"), ("acts in box action spaces",)),
        # MinAtar's actions are discrete: no env has pixels and Box actions (below)
        Refusal((a, "pixels"), ("acts in box action spaces",)),
        Refusal((a, "learners"), ("trains on one learner",)),
        Refusal((a, "bf16"), ("trains in float32 only",)))),
    Refusal(("serial", "ray"), ("the actors run inline",)),
    Refusal(("serial", "caching"), ("fixed order",)),
    Refusal(("ray", "policies"), ("local actor processes",)),
    Refusal(("learners", "policies"), ("one learner each",)),
    # pixel inputs come from the Atari and MinAtar families, whose actions are discrete;
    # gymnasium's one pixel env with Box actions is refused for its image observations
    Refusal(("pixels", "box"), ("--env", "observation space", "is not supported"),
            {"env": "CarRacing-v3"}),
)}


def needs(name: str) -> set[str]:
    """`name` and every feature it needs, transitively (an agent needs nothing)."""
    found = {name}
    for need in BY_NAME[name].needs if name in BY_NAME else ():
        found |= needs(need)
    return found


def refusal(a: str, b: str) -> Refusal | None:
    """What refuses the pair (a, b), an agent or a feature and a feature: their own
    refusal, or that of what they need."""
    for x in sorted(needs(a)):
        for y in sorted(needs(b)):
            if frozenset((x, y)) in REFUSALS:
                return REFUSALS[frozenset((x, y))]
    return None


def refused_command(a: str, b: str) -> dict:
    """The flags of a command that turns on the pair (a, b) and what it needs, which
    `refusal(a, b)` refuses (the agent: `a` where it is one, else impala)."""
    agent = a if a in AGENTS else "impala"
    names = needs(a) | needs(b)
    return {"agent": agent, "env": "Pendulum-v1" if agent in OFF_POLICY else "CartPole-v1",
            **on(*(n for n in FEATURES_ORDER if n in names), queue=agent not in OFF_POLICY),
            **refusal(a, b).flags}


def message_names(a: str, b: str) -> tuple[str, ...]:
    """What the message refusing (a, b) must hold: the flags of the pair the refusal is
    declared for (a feature that needs another is refused by that one's message), an
    agent's name standing for --agent and the env's id for --env, and the refusal's
    `says`."""
    r = refusal(a, b)
    env = refused_command(a, b)["env"]
    names = [n for x in r.pair
             for n in ((x,) if x in AGENTS else BY_NAME[x].names or (env,))]
    return tuple(dict.fromkeys((*names, *r.says)))


@dataclasses.dataclass(frozen=True)
class Cell:
    """A cell of a table: "works" (with the runs that hold the pair), "refused" (with
    the refusal) or "n.a."."""

    state: str
    runs: tuple[str, ...] = ()
    refusal: Refusal | None = None


def _cell(a: str, b: str, covering: list[str]) -> Cell | str:
    """The cell of (a, b), or why there is none (two states, or none)."""
    r = refusal(a, b)
    na = frozenset((a, b)) in NOT_APPLICABLE or a == b
    states = [s for s, held in (("works", covering), ("refused", r), ("n.a.", na)) if held]
    if len(states) != 1:
        return f"({a}, {b}): {' and '.join(states) or 'neither a run nor a refusal'}" + (
            f" (runs {', '.join(covering)})" if covering else "")
    return Cell(states[0], tuple(covering), r)


def cells() -> tuple[dict[tuple[str, str], Cell], dict[tuple[str, str], Cell]]:
    """(agent table, feature table): (agent, feature) -> Cell and (feature, feature) ->
    Cell, both orders. Raises ValueError naming every cell that is not exactly one of
    works, refused and n.a."""
    features = {r.name: run_features(r) for r in RUNS}
    found: dict[tuple[str, str], Cell | str] = {}
    for a in AGENTS:
        for f in FEATURES_ORDER:
            found[a, f] = _cell(a, f, [r.name for r in RUNS
                                       if r.agent == a and f in features[r.name]])
    for f in FEATURES_ORDER:
        for g in FEATURES_ORDER:
            found[f, g] = _cell(f, g, [] if f == g else
                                [r.name for r in RUNS if {f, g} <= features[r.name]])
    problems = sorted({c for c in found.values() if isinstance(c, str)})
    if problems:
        raise ValueError("cells that are not exactly one of works, refused and n.a.:\n  "
                         + "\n  ".join(problems))
    return ({k: c for k, c in found.items() if k[0] in AGENTS},
            {k: c for k, c in found.items() if k[0] not in AGENTS})
