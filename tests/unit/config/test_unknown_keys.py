"""No key is silently ignored (issue 48.2): a key no config schema reads fails, with or without
Hydra's `+`, naming the closest valid keys; so does a preset a config group does not hold."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from adarl.config.keys import (
    UnknownKeyError,
    check_key,
    check_override_keys,
    suggestions,
)
from adarl.launch import CONFIG_DIR, load_config


def _compose(*overrides: str):
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        return compose(config_name="config", overrides=list(overrides))


@pytest.mark.parametrize(
    ("override", "unknown", "meant"),
    [
        # a typo of a leaf
        ("learner.learning_rat=1e-6", "learner.learning_rat", "learner.learning_rate"),
        # Hydra's own hint for the typo: appended, it used to train at the default rate
        ("+learner.lr=1e-6", "learner.lr", "learner.learning_rate"),
        ("++learner.lr=1e-6", "learner.lr", "learner.learning_rate"),
        # nested: a leaf two records down, and a record name misspelled above a valid leaf
        ("allocator.group.advantag=grpo", "allocator.group.advantag", "allocator.group.advantage"),
        ("lerner.learning_rate=1e-6", "lerner.learning_rate", "learner.learning_rate"),
        # inside a list of records
        (
            "+task.arithmetic.levels.0.wieght=2",
            "task.arithmetic.levels.0.wieght",
            "task.arithmetic.levels.0.weight",
        ),
    ],
)
def test_an_unknown_key_on_the_command_line_names_the_key_meant(
    override: str, unknown: str, meant: str
) -> None:
    with pytest.raises(UnknownKeyError) as refused:
        check_override_keys([override], config_dir=CONFIG_DIR)
    message = str(refused.value)
    assert message.startswith(f"unknown key {unknown} (in {override}): no config field reads it")
    assert f"did you mean {meant}" in message


def test_the_same_leaf_in_another_area_is_offered() -> None:
    assert suggestions("trainer.max_new_tokens")[-2:] == [
        "rollout.max_new_tokens",
        "eval.max_new_tokens",
    ]


def test_a_key_appended_past_the_command_line_check_is_refused_once_composed() -> None:
    """What `+key` adds to the composed config is checked too (adarl.evaluate composes overrides
    itself): before this, OmegaConf set `lr` as a plain attribute of LearnerConfig and the run
    trained at learner.learning_rate's default."""
    with pytest.raises(UnknownKeyError, match=r"unknown key learner\.lr: .*learner\.learning_rate"):
        load_config(_compose("+experiment=grpo_anchored", "+learner.lr=1e-6"))
    with pytest.raises(UnknownKeyError, match=r"learner\.loss\.kl_cof.*learner\.loss\.kl_coef"):
        load_config(_compose("+learner.loss.kl_cof=0.1"))


def test_valid_keys_pass_and_open_fields_take_any_key() -> None:
    check_override_keys(
        [
            "learner.learning_rate=1e-6",
            "+allocator.rollouts_per_step=512",  # a key whose default is null, appended
            "+task.reasoning_gym.config.max_animals=3",  # a generator's own keys: open
            "task.arithmetic.levels.0.weight=2",
            "task=jsonl",
            "+experiment=grpo",
            "hints=off",
            "hydra.run.dir=/tmp/x",
            "~logger.tags",
        ],
        config_dir=CONFIG_DIR,
    )
    config = load_config(_compose("+experiment=grpo", "learner.learning_rate=1e-6"))
    assert config.learner.learning_rate == 1e-6


def test_a_preset_a_group_does_not_hold_names_the_close_ones() -> None:
    with pytest.raises(UnknownKeyError) as refused:
        check_override_keys(["task=jsnl"], config_dir=CONFIG_DIR)
    assert "adarl/conf/task/ holds no preset 'jsnl'; did you mean task=jsonl" in str(refused.value)
    with pytest.raises(UnknownKeyError, match="did you mean experiment=grpo_anchored"):
        check_override_keys(["+experiment=grpo_anchord"], config_dir=CONFIG_DIR)


def test_check_key_knows_leaves_records_and_nothing_below_a_leaf() -> None:
    check_key("learner.loss")
    with pytest.raises(UnknownKeyError):
        check_key("learner.learning_rate.value")


@pytest.mark.parametrize("override", ["+learner.lr=1e-6", "learner.lr=1e-6", "task=jsnl"])
def test_the_launcher_refuses_it_in_one_line_with_exit_status_2(
    override: str, tmp_path: Path
) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "adarl.launch", override, f"hydra.run.dir={tmp_path / 'run'}"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("adarl: invalid config: ") and "did you mean" in line
    assert not (tmp_path / "run").exists()  # nothing started
