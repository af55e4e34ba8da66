"""What the session refuses while building, before any actor or model starts."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from adarl.launch import CONFIG_DIR, load_config
from adarl.session import TrainingSession


def test_a_task_smaller_than_a_step_is_refused_with_the_fix(tmp_path: Path) -> None:
    """Issue 9.5: refused at build time naming the key and the fix, not at step 1 with a
    duplicate-id error."""
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        raw = compose(
            config_name="config",
            overrides=[
                "+experiment=grpo",
                "task.arithmetic.num_train_prompts=5",
                "allocator.prompts_per_step=8",
            ],
        )
    with pytest.raises(ValueError) as refused:
        TrainingSession(load_config(raw), run_dir=tmp_path).__enter__()
    message = str(refused.value)
    assert "5 training prompts but allocator.prompts_per_step=8" in message
    assert "lower allocator.prompts_per_step to at most 5 or add prompts" in message
    assert list(tmp_path.iterdir()) == []  # nothing was started or written


def test_a_context_longer_than_the_models_is_refused_before_any_actor(tmp_path: Path) -> None:
    """vLLM refuses it too, but inside the engine's actor once the learners have loaded: the
    GPU presets' 3,072 tokens on a model of 256 positions is named at build time instead."""
    from adarl.config.model import TinyModelConfig
    from adarl.models.tiny import build_tiny_qwen2
    from adarl.models.tokenizer import build_char_tokenizer

    model_dir = tmp_path / "model"
    tokenizer = build_char_tokenizer()
    build_tiny_qwen2(TinyModelConfig(max_position_embeddings=256), tokenizer).save_pretrained(
        model_dir
    )
    tokenizer.save_pretrained(model_dir)
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        raw = compose(
            config_name="config",
            overrides=[
                "+experiment=qwen2_5_math_1_5b_grpo",
                f"model.name_or_path={model_dir}",
                "task=arithmetic",
            ],
        )
    run_dir = tmp_path / "run"
    with pytest.raises(ValueError) as refused:
        TrainingSession(load_config(raw), run_dir=run_dir).__enter__()
    message = str(refused.value)
    assert "rollout.max_model_len=3072 is longer than the model's 256 positions" in message
    assert "set rollout.max_model_len to at most 256" in message
    assert not run_dir.exists()  # nothing was started or written
