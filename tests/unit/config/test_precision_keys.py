"""Precision is said by `learner.precision` and `rollout.dtype`; `model.dtype` no longer exists.

`model.dtype` was read by nothing on the training path (issue 9.2): the structured schema must
now reject it at composition, and the two keys that do set precision must reach their configs.
"""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException

from adarl.config import AdarlConfig
from adarl.launch import CONFIG_DIR, load_config

# A real model refuses the tiny model's lengths and learning rate (adarl/config/real_model.py).
REAL_MODEL = [
    "model.name_or_path=/models/some-model",
    "rollout.max_new_tokens=1024",
    "rollout.max_model_len=2048",
    "eval.max_new_tokens=1024",
    "learner.learning_rate=1e-6",
]


def _compose(*overrides: str) -> AdarlConfig:
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        cfg = compose(config_name="config", overrides=list(overrides))
    return load_config(cfg)


@pytest.mark.parametrize("model_group", ["tiny_arithmetic", "hf"])
def test_model_dtype_is_an_unknown_key(model_group: str) -> None:
    overrides = [f"model={model_group}", "model.name_or_path=/models/some-model"]
    with pytest.raises(ConfigCompositionException, match=r"model\.dtype"):
        _compose(*overrides, "model.dtype=bfloat16")


def test_hf_model_takes_precision_from_learner_and_rollout() -> None:
    # Composing model=hf also proves its YAML sets no dtype (an unknown YAML key fails).
    config = _compose(
        "model=hf",
        *REAL_MODEL,
        "learner.precision=bf16",
        "rollout.dtype=bfloat16",
    )
    assert not hasattr(config.model, "dtype")
    assert (config.learner.precision, config.rollout.dtype) == ("bf16", "bfloat16")
    # model=hf alone changes no precision: CPU-safe defaults until the user says otherwise.
    default = _compose("model=hf", *REAL_MODEL)
    assert (default.learner.precision, default.rollout.dtype) == ("fp32", "float32")
