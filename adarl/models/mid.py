"""The built-in mid-size policy `adarl/mid-math`: a ≈26M-parameter Qwen2 built locally, cached.

What it is for: running the real code paths at real lengths on CPU (1,024-token responses through
vLLM's CPU build and the DeepSpeed learner, the chat template, the chunked log-prob head over a
real BPE vocabulary) in CI. It is randomly initialised and not warm-started: it produces text,
not answers, so its rewards are 0 and its purpose is to run, not to learn.

The recipe is fixed (no config keys): a `Qwen2ForCausalLM` with hidden size 512, 8 layers, 8
query and 2 key/value heads (head dim 64), MLP width 1,536, untied embeddings and 4,096 positions
(`MID_MATH_MAX_POSITIONS`), over the byte-level BPE tokenizer of adarl/models/bpe.py (≈2.2k
tokens, ChatML chat template). The cache key hashes the recipe and the tokenizer, so a change to
either builds a new directory; the build is atomic like the tiny model's (adarl/models/tiny.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from pathlib import Path

import torch
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

from adarl.config.model import MID_MATH, MID_MATH_MAX_POSITIONS
from adarl.models.bpe import build_bpe_tokenizer
from adarl.models.tiny import save_quietly

BUILD_FORMAT_VERSION = 1
BUILD_INFO_FILE = "adarl_build.json"
INIT_SEED = 0
ARCHITECTURE: dict[str, int | float | bool] = {
    "hidden_size": 512,
    "intermediate_size": 1536,
    "num_hidden_layers": 8,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "max_position_embeddings": MID_MATH_MAX_POSITIONS,
    "rope_theta": 10000.0,
    "tie_word_embeddings": False,
}


def build_mid_qwen2(tokenizer: PreTrainedTokenizerFast) -> Qwen2ForCausalLM:
    """The randomly initialised mid-size Qwen2 (seeded, float32) over `tokenizer`'s vocabulary."""
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        **ARCHITECTURE,
    )
    state = torch.random.get_rng_state()
    torch.manual_seed(INIT_SEED)
    try:
        model = Qwen2ForCausalLM(config)
    finally:
        torch.random.set_rng_state(state)
    return model.to(torch.float32).eval()


def mid_model_fingerprint(tokenizer: PreTrainedTokenizerFast) -> str:
    """Hash of everything that determines the built directory (the cache key)."""
    payload = {
        "format": BUILD_FORMAT_VERSION,
        "architecture": ARCHITECTURE,
        "init_seed": INIT_SEED,
        "tokenizer": tokenizer.backend_tokenizer.to_str(),
        "chat_template": tokenizer.chat_template,
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


def build_mid_model_dir(cache_root: Path) -> Path:
    """The cached `adarl/mid-math` directory under `cache_root/models`, built first if absent.

    Built in a private temporary directory and renamed into place: a reader never sees half a
    model, and concurrent builders (actors, parallel tests) are safe (the first rename wins)."""
    tokenizer = build_bpe_tokenizer()
    key = mid_model_fingerprint(tokenizer)
    models_dir = cache_root / "models"
    final = models_dir / key
    if (final / BUILD_INFO_FILE).is_file():
        return final
    models_dir.mkdir(parents=True, exist_ok=True)
    tmp = models_dir / f".tmp-{key}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        model = build_mid_qwen2(tokenizer)
        save_quietly(model, tokenizer, tmp)
        info = {
            "name": MID_MATH,
            "fingerprint": key,
            "architecture": ARCHITECTURE,
            "vocab_size": len(tokenizer),
            "parameters": sum(p.numel() for p in model.parameters()),
            "warm_start": None,
            "torch": torch.__version__,
        }
        (tmp / BUILD_INFO_FILE).write_text(json.dumps(info, indent=2) + "\n")  # marks completion
        try:
            tmp.rename(final)
        except OSError:
            if not (final / BUILD_INFO_FILE).is_file():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return final
