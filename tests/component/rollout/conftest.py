"""Shared fixtures of the rollout component tests: one tiny model build per test session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from adarl.config.model import TINY_ARITHMETIC, TinyModelConfig
from adarl.models.loading import resolve_model_path

# A short warm start: the contract tests need a model with non-uniform, prompt-dependent
# outputs that stops with <eos>, not a good one (the full warm start is measured by the bench).
TEST_TINY_MODEL = TinyModelConfig(sft_steps=120)


@pytest.fixture(scope="session")
def tiny_model_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`$ADARL_CACHE_DIR` when set (CI can keep builds), else a directory of this session."""
    configured = os.environ.get("ADARL_CACHE_DIR")
    return Path(configured) if configured else tmp_path_factory.getbasetemp() / "adarl-cache"


@pytest.fixture(scope="session")
def tiny_model_config() -> TinyModelConfig:
    return TEST_TINY_MODEL


@pytest.fixture(scope="session")
def tiny_model_path(tiny_model_cache_dir: Path, tiny_model_config: TinyModelConfig) -> str:
    torch.set_num_threads(1)
    return resolve_model_path(
        TINY_ARITHMETIC, cache_dir=tiny_model_cache_dir, tiny=tiny_model_config
    )
