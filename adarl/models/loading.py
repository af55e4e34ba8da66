"""Resolve and load policies: built-in names are built and cached, everything else is plain HF.

`resolve_model_path` is the one place a model name becomes a path: for a built-in it returns the
cached build (building it the first time), for anything else the name unchanged, which the engines
and `load_policy` hand to the standard `from_pretrained` loaders exactly as on a cluster.
Built-ins: `adarl/tiny-arithmetic` (adarl/models/tiny.py) and `adarl/mid-math`
(adarl/models/mid.py). A built-in's tokenizer is rebuilt by name without building the model
(`load_tokenizer`), so the data can be checked before any model exists.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    PreTrainedTokenizerFast,
)

from adarl.config.model import (
    BUILTIN_MODELS,
    MID_MATH,
    TINY_ARITHMETIC,
    ModelConfig,
    TinyModelConfig,
)
from adarl.models.bpe import build_bpe_tokenizer
from adarl.models.mid import build_mid_model_dir
from adarl.models.tiny import AuxiliaryPairs, build_tiny_model_dir
from adarl.models.tokenizer import build_char_tokenizer

CACHE_DIR_ENV = "ADARL_CACHE_DIR"
# Tokenizer classes that mean "the plain fast tokenizer in tokenizer.json": load those with the
# fast class itself, because AutoTokenizer next to a model config swaps in the model family's
# tokenizer class (for Qwen2 it re-normalises text and drops spaces).
_PLAIN_FAST_TOKENIZER_CLASSES = {"PreTrainedTokenizerFast", "TokenizersBackend"}


@dataclass
class Policy:
    """A loaded causal LM, its tokenizer and the path both came from."""

    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    path: str


def default_cache_dir() -> Path:
    """`$ADARL_CACHE_DIR`, else `~/.cache/adarl`."""
    configured = os.environ.get(CACHE_DIR_ENV)
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "adarl"


def _arithmetic_pairs(tiny: TinyModelConfig) -> list[tuple[str, str]]:
    from adarl.models.hint_warm_start import task_pairs_with_hints
    from adarl.tasks.arithmetic import sample_examples

    # One fresh i.i.d. train-split draw per training example: nothing repeats to be memorised.
    # A share of them is shown with a hint (adarl/models/hint_warm_start.py).
    examples = sample_examples("train", tiny.sft_steps * tiny.sft_batch_size, seed=tiny.sft_seed)
    return task_pairs_with_hints(
        examples,
        share=tiny.sft_hinted_share,
        seed=tiny.sft_seed,
        worked=tiny.sft_response == "worked",
    )


def _arithmetic_fingerprint() -> str:
    # The generator's source and default mix stand in for the data: hashing ~40k generated
    # pairs would cost seconds on every load, this costs microseconds and still changes
    # whenever the task's code or levels do (and the hint rows', adarl/models/hint_warm_start.py).
    from adarl.models.hint_warm_start import hint_data_fingerprint
    from adarl.tasks import arithmetic

    digest = hashlib.sha256(inspect.getsource(arithmetic).encode())
    digest.update(repr(arithmetic.DEFAULT_LEVELS).encode())
    return "arithmetic:" + digest.hexdigest()[:16] + "+" + hint_data_fingerprint()


def _arithmetic_hint_mode(tiny: TinyModelConfig) -> list[AuxiliaryPairs]:
    from adarl.models.hint_warm_start import arithmetic_hint_mode_auxiliary

    return arithmetic_hint_mode_auxiliary(tiny.sft_steps, seed=tiny.sft_seed)


def resolve_model_path(
    name_or_path: str,
    *,
    cache_dir: str | Path | None = None,
    tiny: TinyModelConfig | None = None,
) -> str:
    """A path or hub name `from_pretrained` understands; builds (once) and caches built-ins."""
    if name_or_path not in BUILTIN_MODELS:
        return name_or_path
    root = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    if name_or_path == MID_MATH:
        return str(build_mid_model_dir(root))
    if name_or_path != TINY_ARITHMETIC:
        raise AssertionError(f"built-in {name_or_path!r} has no recipe")
    tiny = tiny or TinyModelConfig()
    return str(
        build_tiny_model_dir(
            tiny,
            train_pairs=lambda: _arithmetic_pairs(tiny),
            auxiliary=lambda: _arithmetic_hint_mode(tiny),
            data_fingerprint=_arithmetic_fingerprint(),
            cache_root=root,
            name=name_or_path,
        )
    )


def resolve_model_config(config: ModelConfig) -> str:
    """`resolve_model_path` for a `ModelConfig`."""
    config.validate()
    return resolve_model_path(config.name_or_path, cache_dir=config.cache_dir, tiny=config.tiny)


def load_tokenizer(name_or_path: str) -> PreTrainedTokenizerBase:
    """The tokenizer saved with a model directory or hub name; a built-in's own tokenizer."""
    if name_or_path == MID_MATH:
        return build_bpe_tokenizer()  # deterministic: identical to the saved copy
    if name_or_path in BUILTIN_MODELS:
        return build_char_tokenizer()  # identical to the saved copy; no model build needed
    path = name_or_path
    tokenizer_config = Path(path) / "tokenizer_config.json"
    if tokenizer_config.is_file():
        saved_class = json.loads(tokenizer_config.read_text()).get("tokenizer_class")
        if saved_class in _PLAIN_FAST_TOKENIZER_CLASSES:
            return PreTrainedTokenizerFast.from_pretrained(path)
    return AutoTokenizer.from_pretrained(path)


def model_max_positions(config: ModelConfig) -> int | None:
    """The model's longest sequence (`max_position_embeddings`) without loading its weights:
    from the recipe for built-ins, from its `config.json` otherwise (None if it has none)."""
    if config.builtin_max_positions is not None:
        return config.builtin_max_positions
    hf_config = AutoConfig.from_pretrained(config.name_or_path)
    positions = getattr(hf_config, "max_position_embeddings", None)
    return int(positions) if positions is not None else None


def load_policy(
    name_or_path: str,
    *,
    cache_dir: str | Path | None = None,
    tiny: TinyModelConfig | None = None,
    dtype: str = "float32",
) -> Policy:
    """Load model and tokenizer the way a cluster does (`AutoModelForCausalLM`), in eval mode."""
    path = resolve_model_path(name_or_path, cache_dir=cache_dir, tiny=tiny)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype))
    model.eval()
    return Policy(model=model, tokenizer=load_tokenizer(path), path=path)


def build_policy(config: ModelConfig) -> Policy:
    """`load_policy` for a `ModelConfig`, in float32 (precision is not a model key: the learner
    and the engines set their own, `learner.precision` and `rollout.dtype`)."""
    config.validate()
    return load_policy(config.name_or_path, cache_dir=config.cache_dir, tiny=config.tiny)
