"""One default (issue 48.4): a bare `python -m adarl.launch` runs `make run`'s experiment,
`DEFAULT_EXPERIMENT`, named in one place; the docs that name the default name that one, and the
experiments table lists every experiment."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from adarl.config import DEFAULT_EXPERIMENT
from adarl.launch import CONFIG_DIR, load_config, with_default_experiment

ROOT = Path(__file__).resolve().parents[3]
EXPERIMENTS = sorted(p.stem for p in (Path(CONFIG_DIR) / "experiment").glob("*.yaml"))
# A line that says which experiment is the default: "the embedded default (`+experiment=X`)",
# "`X` (`make run`)", "make run ... (X)". Lines about an earlier default say "then" or "before".
DEFAULT_CLAIMS = (
    re.compile(r"embedded default[^\n]{0,80}?\+experiment=(\w+)"),
    re.compile(r"default of `?make run`?[^\n]{0,80}?\+experiment=(\w+)"),
    re.compile(r"`(\w+)` \(`make run`\)"),
    re.compile(r"^make run .*\((\w+)\)"),
    re.compile(r"\+experiment=(\w+)\s+# the embedded default"),
)
HISTORICAL = re.compile(r"\b(then|before|issues? \d|was the default|previous)\b")


def test_a_bare_launch_runs_the_default_experiment() -> None:
    assert DEFAULT_EXPERIMENT in EXPERIMENTS
    assert with_default_experiment([]) == [f"+experiment={DEFAULT_EXPERIMENT}"]
    assert with_default_experiment(["task=jsonl"]) == [
        "task=jsonl",
        f"+experiment={DEFAULT_EXPERIMENT}",
    ]
    # Another experiment replaces it; `experiment=X` (Hydra would refuse it) reads as `+`.
    assert with_default_experiment(["+experiment=grpo"]) == ["+experiment=grpo"]
    assert with_default_experiment(["experiment=grpo", "seed=1"]) == ["+experiment=grpo", "seed=1"]
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        cfg = compose(config_name="config", overrides=with_default_experiment([]))
    assert load_config(cfg).name == DEFAULT_EXPERIMENT


def test_make_run_names_no_experiment_of_its_own() -> None:
    """`make run` is the bare launch: the default lives in adarl/config/__init__.py only."""
    makefile = (ROOT / "Makefile").read_text()
    (recipe,) = re.findall(r"^run: .*\n\t(.*)$", makefile, flags=re.MULTILINE)
    assert "-m adarl.launch $(ARGS)" in recipe and "experiment" not in recipe
    dockerfile = (ROOT / "docker" / "Dockerfile.cpu").read_text()
    assert "experiment" not in dockerfile.rsplit("CMD", 1)[1]


def _claims() -> list[tuple[str, int, str, str]]:
    """(file, line number, line, experiment named as the default) in the docs and presets."""
    # docs/benchmarks.md and the learning records hold measured runs under the names they ran
    # with (the benchmarks' "embedded default" part is Seq-Balance's): they are records, not
    # statements of today's default.
    docs = [p for p in sorted((ROOT / "docs").glob("*.md")) if p.stem != "benchmarks"]
    files = [ROOT / "README.md", *(p for p in docs if not p.stem.startswith("learning_"))]
    files += sorted((Path(CONFIG_DIR) / "experiment").glob("*.yaml"))
    found = []
    for path in files:
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            for pattern in DEFAULT_CLAIMS:
                for name in pattern.findall(line):
                    found.append((str(path.relative_to(ROOT)), number, line, name))
    return found


def test_every_doc_that_names_the_default_names_it_right() -> None:
    claims = _claims()
    assert any(path == "README.md" for path, *_ in claims)  # the pattern sees the README's
    wrong = [
        f"{path}:{number}: {line.strip()}"
        for path, number, line, name in claims
        if name != DEFAULT_EXPERIMENT and not HISTORICAL.search(line)
    ]
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("preset", EXPERIMENTS)
def test_no_other_preset_calls_itself_the_default(preset: str) -> None:
    header = (Path(CONFIG_DIR) / "experiment" / f"{preset}.yaml").read_text().split("\n\n")[0]
    says_default = re.search(r"default of `?make run`?|adarl's default|embedded default", header)
    if preset == DEFAULT_EXPERIMENT:
        assert says_default, header
    else:
        assert not says_default or HISTORICAL.search(says_default.string), header


def test_the_experiments_table_lists_every_experiment() -> None:
    text = (ROOT / "docs" / "configuration.md").read_text()
    (row,) = [line for line in text.splitlines() if line.startswith("| `experiment` |")]
    listed = set(re.findall(r"`(\w+)`", row)) - {"experiment"}
    assert listed == set(EXPERIMENTS), set(EXPERIMENTS) ^ listed
    assert f"`{DEFAULT_EXPERIMENT}` (the default" in row


def test_help_says_how_to_run_what_runs_and_how_to_look_at_a_run() -> None:
    # What `python -m adarl.launch --help` prints above the groups and the config Hydra lists
    # (those are the default experiment's: the launcher adds it to --help's overrides too).
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        cfg = compose(
            config_name="config", overrides=with_default_experiment([]), return_hydra_config=True
        )
    header = cfg.hydra.help.header
    assert header.startswith("python -m adarl.launch [experiment=NAME]")
    for named in ("make run ARGS=", "docs/configuration.md", "python -m adarl.report RUN_DIR"):
        assert named in header, named
    assert "--hydra-help" in cfg.hydra.help.footer
