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
from adarl.errors import InputError
from adarl.models.bpe import build_bpe_tokenizer
from adarl.models.tokenizer import build_char_tokenizer

# Files of which a model directory's tokenizer has at least one.
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")
# What `model.name_or_path` must be, for the messages below.
_MODEL_FIX = (
    "set model.name_or_path to a Hugging Face model directory (config.json, the weights and the "
    "tokenizer files), a hub name this machine can download, or a built-in "
    f"({', '.join(BUILTIN_MODELS)})"
)


def model_path_problem(name_or_path: str) -> str | None:
    """Why `name_or_path` cannot be a policy (one line naming `model.name_or_path` and the fix),
    or None: a built-in, a model directory with its config and tokenizer, or a hub name (which
    `from_pretrained` resolves). A name that is no directory is a hub name only in the hub's
    form, `name` or `org/name`; a path (`/models/x`, `./x`, `~/x`, `a/b/c`) that does not exist
    is a missing directory."""
    if name_or_path in BUILTIN_MODELS:
        return None
    path = Path(name_or_path).expanduser()
    key = f"model.name_or_path={name_or_path}"
    if path.is_dir():
        if not (path / "config.json").is_file():
            return f"{key}: {path} has no config.json, so it is not a model directory; {_MODEL_FIX}"
        if not any((path / name).is_file() for name in _TOKENIZER_FILES):
            return (
                f"{key}: {path} has no tokenizer (none of {', '.join(_TOKENIZER_FILES)}): copy "
                "the model's tokenizer files into it (save_pretrained writes them)"
            )
        return None
    hub_form = (
        not name_or_path.startswith(("/", ".", "~"))
        and len(name_or_path.split("/")) <= 2
        and all(part for part in name_or_path.split("/"))
    )
    if hub_form:
        return None
    return f"{key}: no such directory; {_MODEL_FIX}"


def check_model_path(name_or_path: str) -> None:
    """Raise `InputError` with `model_path_problem`'s line."""
    problem = model_path_problem(name_or_path)
    if problem is not None:
        raise InputError(problem)


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
    check_model_path(name_or_path)
    path = name_or_path
    tokenizer_config = Path(path) / "tokenizer_config.json"
    if tokenizer_config.is_file():
        saved_class = json.loads(tokenizer_config.read_text()).get("tokenizer_class")
        if saved_class in _PLAIN_FAST_TOKENIZER_CLASSES:
            return PreTrainedTokenizerFast.from_pretrained(path)
    try:
        return AutoTokenizer.from_pretrained(path)
    except OSError as error:  # a hub name that cannot be had here (no network, no such repo)
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise InputError(
            f"model.name_or_path={name_or_path}: its tokenizer cannot be loaded ({first}); "
            f"{_MODEL_FIX}"
        ) from error
