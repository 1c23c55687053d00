"""The documentation: the flags reference is what docs/gen_flags.py generates from the
flag declarations (so it cannot go stale), the MkDocs site builds with --strict, and
every command of the README's quick start runs on a tiny budget and exits 0."""

import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys

import pytest

from tests.conftest import ROOT
from tests.pair_runs import run_inline

README = os.path.join(ROOT, "README.md")

# added to (or replacing) each quick-start command's flags: one actor stepped inline, no
# evaluation worker, one learner thread, a budget of a few updates
SMOKE = {"--environment_max_steps": "2000", "--worker_count": "1", "--eval_interval": "0",
         "--learner_threads": "1"}
# ViZDoom's defaults take 1024 env steps an update through an LSTM of 512
VIZDOOM_SMOKE = {"--environment_max_steps": "256", "--r_f_steps": "16", "--batch_size": "4",
                 "--envs_per_worker": "4", "--lstm_size": "64"}
# Atari's ppo defaults take 1024 env steps an update of 16 Nature-CNN minibatches
ATARI_SMOKE = {"--environment_max_steps": "400", "--r_f_steps": "10", "--batch_size": "4",
               "--envs_per_worker": "2"}


def _gen_flags():
    """docs/gen_flags.py as a module (docs/ is no package)."""
    path = os.path.join(ROOT, "docs", "gen_flags.py")
    spec = importlib.util.spec_from_file_location("gen_flags", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_flags_reference_is_generated_from_the_declarations():
    with open(os.path.join(ROOT, "docs", "flags.md"), encoding="utf-8") as f:
        on_disk = f.read()
    assert on_disk == _gen_flags().render(), \
        "docs/flags.md is stale: run `python docs/gen_flags.py` (or `make docs`)"


def test_flags_reference_has_every_flag_once():
    from training.flag_spec import FLAG_SPECS

    text = _gen_flags().render()
    for spec in FLAG_SPECS:
        assert text.count(f"| `--{spec.name}` |") == 1, spec.name


def test_gen_flags_check_exits_1_on_a_stale_file(tmp_path):
    stale = tmp_path / "flags.md"
    stale.write_text("# not the generated page\n")
    assert _gen_flags().main(["--check", f"--output={stale}"]) == 1
    assert _gen_flags().main([f"--output={stale}"]) == 0
    assert _gen_flags().main(["--check", f"--output={stale}"]) == 0


def test_site_builds_strictly(tmp_path):
    site = tmp_path / "site"
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (site / "results" / "index.html").is_file()
    # docs/curves links to bench/curves: the PNGs reach the site without a copy in git
    assert (site / "curves" / "pong_2core_ppo_channels_last_seed0.png").is_file()


def test_readme_is_short():
    with open(README, encoding="utf-8") as f:
        assert len(f.read().splitlines()) <= 250


def quick_start_commands() -> list[list[str]]:
    """main.py's arguments in each command of the README's "Quick start" code blocks."""
    with open(README, encoding="utf-8") as f:
        text = f.read()
    section = text.split("\n## Quick start", 1)[1].split("\n## ", 1)[0]
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", section, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if "main.py" in words[:2]:
                commands.append(words[words.index("main.py") + 1:])
    return commands


def _env(args: list[str]) -> str:
    return next(a.split("=", 1)[1] for a in args if a.startswith("--env="))


def test_quick_start_covers_every_kind_of_env():
    from wrappers.envs import family_of

    commands = quick_start_commands()
    families = {family_of(_env(args)).name for args in commands}
    assert {"atari", "minatar", "vizdoom", "vector"} <= families, families
    assert families & {"mujoco", "half_cheetah"}, families
    assert any("--use_lstm" in args and _env(args).startswith("popgym:") for args in commands)


def _smoke(args: list[str], results: str) -> list[str]:
    from wrappers.envs import family_of

    overrides = dict(SMOKE)
    family = family_of(_env(args)).name
    if family == "atari":
        overrides.update(ATARI_SMOKE)
    if family == "vizdoom":
        overrides.update(VIZDOOM_SMOKE)
    kept = [a for a in args if a.split("=", 1)[0] not in {*overrides, "--serial"}]
    return [*kept, *(f"{k}={v}" for k, v in overrides.items()), "--serial",
            f"--results_dir={results}"]


@pytest.mark.parametrize("args", quick_start_commands(), ids=_env)
def test_quick_start_command_runs(args, tmp_path):
    results = str(tmp_path / "results")
    proc = run_inline(*_smoke(args, results), timeout=180)  # serial: in this process
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (run,) = os.listdir(results)
    with open(os.path.join(results, run, "summary.json")) as f:
        assert json.load(f)["env_steps"] > 0
