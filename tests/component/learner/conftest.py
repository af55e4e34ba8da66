"""Fixtures of the learner component tests: a tiny policy on disk and a small batch.

Learners here run in-process (one rank; `LearnerGroup(in_process=True)`); each test module
builds the few groups it needs and closes them, since one process holds one process group.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from adarl.config.model import TinyModelConfig
from adarl.learner.synthetic import synthetic_train_batch
from adarl.models.tiny import build_tiny_qwen2
from adarl.models.tokenizer import build_char_tokenizer
from adarl.types import TrainBatch

# Smaller than the built-in tiny model (hidden 128) to keep every step a few milliseconds.
TEST_MODEL = TinyModelConfig(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=64,
    init_seed=0,
)


def save_tiny_policy(path: Path) -> str:
    """A randomly initialised tiny Qwen2 and the char tokenizer, saved as an HF directory."""
    tokenizer = build_char_tokenizer()
    model = build_tiny_qwen2(TEST_MODEL, tokenizer)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


def small_batch(seed: int = 0) -> TrainBatch:
    """3 prompts × 4 samples, lengths 5-16, advantages ±0.5/±0.25/0."""
    return synthetic_train_batch(
        num_prompts=3,
        samples_per_prompt=4,
        prompt_length=(3, 6),
        response_length=(2, 10),
        vocab_size=len(build_char_tokenizer()),
        seed=seed,
    )


@pytest.fixture(scope="session")
def tiny_policy_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    return save_tiny_policy(tmp_path_factory.mktemp("tiny_policy"))


@pytest.fixture(autouse=True, scope="session")
def _one_thread() -> None:
    torch.set_num_threads(1)
