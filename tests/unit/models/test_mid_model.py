"""The built-in mid-size model `adarl/mid-math`: a local byte-level BPE tokenizer with a chat
template, and a 20-50M-parameter Qwen2 built once and cached."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from transformers import AutoConfig

from adarl.config.model import MID_MATH, MID_MATH_MAX_POSITIONS, ModelConfig
from adarl.models.bpe import END_OF_TEXT, IM_END, IM_START, build_bpe_tokenizer
from adarl.models.loading import (
    load_policy,
    load_tokenizer,
    model_max_positions,
    resolve_model_path,
)


def test_bpe_tokenizer_is_deterministic_and_byte_level() -> None:
    first, second = build_bpe_tokenizer(), build_bpe_tokenizer()
    assert first.backend_tokenizer.to_str() == second.backend_tokenizer.to_str()
    # Byte-level: any text round-trips, including characters the corpus never had.
    text = "Résumé: ∫₀¹ x² dx = 1/3 ✓ \\boxed{\\frac{1}{3}}\n\ttabs  and  spaces 日本"
    ids = first.encode(text, add_special_tokens=False)
    assert first.decode(ids) == text
    assert first.unk_token_id is None and first.bos_token_id is None
    # Merges were learned: common words are single tokens, not bytes.
    assert len(first.encode(" step", add_special_tokens=False)) == 1
    specials = first.convert_tokens_to_ids([END_OF_TEXT, IM_START, IM_END])
    assert first.eos_token_id == specials[0] and len(set(specials)) == 3


def test_chat_template_is_chatml() -> None:
    tokenizer = build_bpe_tokenizer()
    rendered = tokenizer.apply_chat_template(
        [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}],
        tokenize=False,
        add_generation_prompt=True,
    )
    assert rendered == (
        "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n"
    )
    ids = tokenizer.encode(rendered, add_special_tokens=False)
    assert ids.count(tokenizer.convert_tokens_to_ids(IM_START)) == 3  # specials stay whole


@pytest.fixture(scope="module")
def mid_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cache = os.environ.get("ADARL_CACHE_DIR") or tmp_path_factory.mktemp("cache")
    return Path(resolve_model_path(MID_MATH, cache_dir=cache))


def test_mid_model_is_a_cached_qwen2_of_20_to_50m_parameters(mid_dir: Path) -> None:
    info = json.loads((mid_dir / "adarl_build.json").read_text())
    assert 20e6 <= info["parameters"] <= 50e6
    config = AutoConfig.from_pretrained(mid_dir)
    assert config.architectures == ["Qwen2ForCausalLM"]
    assert config.max_position_embeddings == MID_MATH_MAX_POSITIONS
    assert config.vocab_size == len(build_bpe_tokenizer())
    policy = load_policy(str(mid_dir))
    assert sum(p.numel() for p in policy.model.parameters()) == info["parameters"]
    # Cached: resolving again returns the same directory without rebuilding it.
    stamp = (mid_dir / "model.safetensors").stat().st_mtime_ns
    assert Path(resolve_model_path(MID_MATH, cache_dir=mid_dir.parent.parent)) == mid_dir
    assert (mid_dir / "model.safetensors").stat().st_mtime_ns == stamp


def test_tokenizer_by_name_equals_the_saved_one(mid_dir: Path) -> None:
    """The run checks its data with the tokenizer rebuilt by name (no model build); the engines
    load the saved copy: they must be the same tokenizer."""
    by_name, saved = load_tokenizer(MID_MATH), load_tokenizer(str(mid_dir))
    assert by_name.backend_tokenizer.to_str() == saved.backend_tokenizer.to_str()
    assert by_name.chat_template == saved.chat_template
    assert (by_name.eos_token_id, by_name.pad_token_id) == (saved.eos_token_id, saved.pad_token_id)


def test_model_max_positions_without_loading_weights(mid_dir: Path) -> None:
    assert model_max_positions(ModelConfig(name_or_path=MID_MATH)) == MID_MATH_MAX_POSITIONS
    assert model_max_positions(ModelConfig()) == 256  # the tiny model's recipe
    assert model_max_positions(ModelConfig(name_or_path=str(mid_dir))) == MID_MATH_MAX_POSITIONS
