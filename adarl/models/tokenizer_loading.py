"""`load_tokenizer`: a policy's tokenizer by model name or directory, without building a model.

A built-in's tokenizer is rebuilt by name (deterministic: identical to its saved copy), so data
can be checked before any model exists; any other comes from its files. What the rollout engines
load: they stand on this module, not on the built-in models' recipes (adarl/models/loading.py),
which read the tasks and the hint formats.
"""

from __future__ import annotations

import json
from pathlib import Path

from transformers import AutoTokenizer, PreTrainedTokenizerBase, PreTrainedTokenizerFast

from adarl.config.model import BUILTIN_MODELS, MID_MATH
from adarl.models.bpe import build_bpe_tokenizer
from adarl.models.tokenizer import build_char_tokenizer

# Tokenizer classes that mean "the plain fast tokenizer in tokenizer.json": load those with the
# fast class itself, because AutoTokenizer next to a model config swaps in the model family's
# tokenizer class (for Qwen2 it re-normalises text and drops spaces).
_PLAIN_FAST_TOKENIZER_CLASSES = {"PreTrainedTokenizerFast", "TokenizersBackend"}


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
