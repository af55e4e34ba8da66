"""Policies: the built-in tiny model factory (built and warm-started locally, cached) and the
standard Hugging Face loading path used for every other model."""

from adarl.models.loading import (
    Policy,
    build_policy,
    default_cache_dir,
    load_policy,
    load_tokenizer,
    resolve_model_config,
    resolve_model_path,
)
from adarl.models.tokenizer import build_char_tokenizer, load_char_tokenizer

__all__ = [
    "Policy",
    "build_char_tokenizer",
    "build_policy",
    "default_cache_dir",
    "load_char_tokenizer",
    "load_policy",
    "load_tokenizer",
    "resolve_model_config",
    "resolve_model_path",
]
