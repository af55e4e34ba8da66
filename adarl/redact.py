"""Keep secrets out of what a run writes: config.yaml, metrics, completions, console lines, W&B.

Two rules, applied wherever a config, an environment or free text leaves the process:

* a config entry whose *name* says it is a secret (`api_key`, `wandb_key`, `hf_token`,
  `secret`, `password`, `credentials`, ...) has its string value replaced by `REDACTED`;
  tokenizer entries such as `eos_token` / `pad_token` and counts such as `max_new_tokens` are
  not secrets and are kept;
* the *value* of every environment variable named like a secret (`WANDB_API_KEY`, `HF_TOKEN`,
  `AWS_SECRET_ACCESS_KEY`, ...; values of at least `MIN_SECRET_CHARS` characters) is replaced by
  `REDACTED` wherever it appears inside any string.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

REDACTED = "<redacted>"
MIN_SECRET_CHARS = 8  # shorter values ("1", "true") would blank out ordinary text

_SECRET_WORDS = r"(?:api[_-]?key|apikey|key|token|secret|password|passwd|passphrase|credentials?)"
_SECRET_NAME = re.compile(
    rf"(?:^|[_.\-]){_SECRET_WORDS}$|secret|passw(?:or)?d|credential", re.IGNORECASE
)
# Tokenizer special tokens are named like secrets but are plain text.
_NOT_SECRET_NAME = re.compile(
    r"(?:^|[_.\-])(?:eos|bos|pad|unk|sep|cls|mask|stop|special|start|end)[_-]?token$",
    re.IGNORECASE,
)


def is_secret_name(name: str) -> bool:
    """True for names such as `api_key`, `WANDB_API_KEY`, `hf_token`, `db_password`."""
    return bool(_SECRET_NAME.search(name)) and not _NOT_SECRET_NAME.search(name)


def secret_values(environ: Mapping[str, str] | None = None) -> list[str]:
    """Values of the secret-named variables of `environ` (default: this process's), longest
    first so that a secret containing another is replaced whole."""
    env = os.environ if environ is None else environ
    values = {v for k, v in env.items() if is_secret_name(k) and len(v) >= MIN_SECRET_CHARS}
    return sorted(values, key=len, reverse=True)


def redact_text(text: str, *, environ: Mapping[str, str] | None = None) -> str:
    """`text` with every secret environment value replaced by `REDACTED`."""
    for value in secret_values(environ):
        text = text.replace(value, REDACTED)
    return text


def redact_config(value: Any, *, environ: Mapping[str, str] | None = None) -> Any:
    """A copy of a plain config tree (dicts, lists, scalars) with secrets replaced: string
    values under secret names, and secret environment values inside any string."""
    secrets = secret_values(environ)

    def walk(node: Any) -> Any:
        if isinstance(node, Mapping):
            return {
                key: REDACTED
                if isinstance(item, str) and item and is_secret_name(str(key))
                else walk(item)
                for key, item in node.items()
            }
        if isinstance(node, list | tuple):
            return type(node)(walk(item) for item in node)
        if isinstance(node, str):
            for secret in secrets:
                node = node.replace(secret, REDACTED)
            return node
        return node

    return walk(value)
