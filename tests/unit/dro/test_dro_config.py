"""The `dro` section: validated before anything starts, with the key and the fix named."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir

from adarl.config import AdarlConfig
from adarl.config.dro import DroConfig, DroFilterConfig
from adarl.launch import CONFIG_DIR, load_config


def _compose(*overrides: str) -> AdarlConfig:
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        return load_config(compose(config_name="config", overrides=list(overrides)))


def test_the_dro_experiment_trains_on_r3_with_the_filter() -> None:
    config = _compose("+experiment=dro")
    assert config.dro.reward == "r3" and config.dro.template == "arithmetic_restatement"
    assert config.dro.filter.enabled and config.allocator.sampler == "uniform"
    assert config.allocator.group.advantage == "grpo"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["allocator=seq_balance"], r"dro\.reward=r3 with allocator\.sampler='seq_balance'"),
        (["allocator.group.advantage=raft"], r"allocator\.group\.advantage='raft'"),
        (["dro.filter.drop_fraction=1.0"], r"dro\.filter\.drop_fraction=1\.0 must be in \[0, 1\)"),
        (["dro.weight_shape=cubic"], r"dro\.weight_shape='cubic' is not one of"),
    ],
)
def test_bad_dro_settings_fail_naming_the_key(overrides: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _compose("+experiment=dro", *overrides)


def test_the_restatement_template_is_for_the_arithmetic_task() -> None:
    config = DroConfig(reward="verifier", template="arithmetic_restatement")
    config.filter = DroFilterConfig(enabled=True)
    with pytest.raises(ValueError, match=r"dro\.template=arithmetic_restatement"):
        config.validate_with(sampler="uniform", advantage="grpo", task_source="jsonl")
    # The filter alone keeps the verifier's rewards: any sampler and advantage will do.
    config.validate_with(sampler="seq_balance", advantage="pool", task_source="arithmetic")
