"""The built-in tiny policy: a small `Qwen2ForCausalLM` built and warm-started locally, then cached.

Qwen2 is used because both vLLM builds (CPU and CUDA) and transformers load it, so the tiny model
exercises exactly the code paths a real model does. Embeddings are untied (vLLM's weight reload
then sees every tensor under its own name, and an `lm_head` edit does not move the embeddings).

The warm start is plain supervised fine-tuning on (prompt, answer) pairs of a task's train split:
the sequence is `<bos> prompt answer <eos>` and the loss covers only `answer <eos>`. It is short on
purpose: the goal is a base policy with a spread of pass rates for RL to improve, not a solved task.

The cache key is a hash of everything that determines the weights (architecture, warm-start
settings, tokenizer vocabulary and a fingerprint of the training data's recipe), so changing the
task's data invalidates the cache without anyone remembering to.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from transformers import PreTrainedTokenizerBase, Qwen2Config, Qwen2ForCausalLM

from adarl.config.model import TinyModelConfig
from adarl.models.tokenizer import build_char_tokenizer

# Bump when the build procedure changes in a way the config does not capture.
BUILD_FORMAT_VERSION = 1
BUILD_INFO_FILE = "adarl_build.json"


@dataclass(frozen=True)
class WarmStartStats:
    steps: int
    examples: int
    initial_loss: float
    final_loss: float  # mean answer-token NLL over the last 10% of steps
    seconds: float


def build_tiny_qwen2(
    config: TinyModelConfig, tokenizer: PreTrainedTokenizerBase
) -> Qwen2ForCausalLM:
    """A randomly initialised Qwen2 sized by `config` with `tokenizer`'s vocabulary."""
    qwen_config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=config.hidden_size,
        intermediate_size=config.intermediate_size,
        num_hidden_layers=config.num_hidden_layers,
        num_attention_heads=config.num_attention_heads,
        num_key_value_heads=config.num_key_value_heads,
        max_position_embeddings=config.max_position_embeddings,
        tie_word_embeddings=False,
        rope_theta=10000.0,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    generator_state = torch.random.get_rng_state()
    torch.manual_seed(config.init_seed)
    try:
        model = Qwen2ForCausalLM(qwen_config)
    finally:
        torch.random.set_rng_state(generator_state)
    return model.to(torch.float32)


def encode_sft_pairs(
    tokenizer: PreTrainedTokenizerBase, pairs: Sequence[tuple[str, str]]
) -> list[tuple[list[int], list[int]]]:
    """(prompt ids with `<bos>`, answer ids with `<eos>`) per pair."""
    if tokenizer.eos_token_id is None:
        raise ValueError("warm start needs a tokenizer with an eos token")
    encoded = []
    for prompt, answer in pairs:
        prompt_ids = tokenizer(prompt)["input_ids"]
        answer_ids = [*tokenizer.encode(answer, add_special_tokens=False), tokenizer.eos_token_id]
        encoded.append((prompt_ids, answer_ids))
    return encoded


def _collate(
    batch: Sequence[tuple[list[int], list[int]]], pad_token_id: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded ids, attention mask and labels (-100 outside the answer)."""
    length = max(len(p) + len(a) for p, a in batch)
    input_ids = torch.full((len(batch), length), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((len(batch), length), dtype=torch.long)
    labels = torch.full((len(batch), length), -100, dtype=torch.long)
    for row, (prompt, answer) in enumerate(batch):
        n_p, n_a = len(prompt), len(answer)
        input_ids[row, : n_p + n_a] = torch.tensor(prompt + answer)
        attention_mask[row, : n_p + n_a] = 1
        labels[row, n_p : n_p + n_a] = torch.tensor(answer)
    return input_ids, attention_mask, labels


def warm_start(
    model: Qwen2ForCausalLM,
    tokenizer: PreTrainedTokenizerBase,
    pairs: Sequence[tuple[str, str]],
    *,
    steps: int,
    batch_size: int,
    learning_rate: float,
    weight_decay: float,
    seed: int,
) -> WarmStartStats:
    """Supervised training on `pairs` (prompt, answer); loss on the answer and `<eos>` only."""
    if steps > 0 and not pairs:
        raise ValueError("warm start got no (prompt, answer) pairs; check the task's train split")
    encoded = encode_sft_pairs(tokenizer, pairs)
    too_long = [i for i, (p, a) in enumerate(encoded) if len(p) + len(a) > _max_positions(model)]
    if too_long:
        raise ValueError(
            f"warm start: {len(too_long)} pairs exceed the model's max_position_embeddings "
            f"({_max_positions(model)}), e.g. pair {too_long[0]}: {pairs[too_long[0]]!r}; "
            "raise model.tiny.max_position_embeddings or shorten the task"
        )
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=learning_rate, weight_decay=weight_decay, betas=(0.9, 0.98)
    )
    warmup_steps = max(1, steps // 20)

    def lr_factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        progress = (step - warmup_steps) / max(1, steps - warmup_steps)
        return 0.05 + 0.95 * 0.5 * (1.0 + math.cos(math.pi * progress))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor)
    generator = torch.Generator().manual_seed(seed)
    order = torch.randperm(len(encoded), generator=generator)
    cursor = 0
    losses: list[float] = []
    model.train()
    start = time.perf_counter()
    for _ in range(steps):
        if cursor + batch_size > len(order):  # a fresh permutation per epoch
            order, cursor = torch.randperm(len(encoded), generator=generator), 0
        batch = [encoded[int(i)] for i in order[cursor : cursor + batch_size]]
        cursor += batch_size
        input_ids, attention_mask, labels = _collate(batch, tokenizer.pad_token_id)
        loss = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        losses.append(loss.item())
    model.eval()
    tail = losses[-max(1, steps // 10) :] if losses else [math.nan]
    return WarmStartStats(
        steps=steps,
        examples=len(pairs),
        initial_loss=losses[0] if losses else math.nan,
        final_loss=sum(tail) / len(tail),
        seconds=time.perf_counter() - start,
    )


def _max_positions(model: Qwen2ForCausalLM) -> int:
    return int(model.config.max_position_embeddings)


def tiny_model_fingerprint(
    config: TinyModelConfig, tokenizer: PreTrainedTokenizerBase, data_fingerprint: str
) -> str:
    """Hash of everything that determines the built weights (the cache key)."""
    settings = asdict(config)
    settings.pop("sft_num_threads")  # affects speed, not the recipe
    payload = {
        "format": BUILD_FORMAT_VERSION,
        "architecture": "Qwen2ForCausalLM",
        "config": settings,
        "vocab": sorted(tokenizer.get_vocab().items()),
        "data": data_fingerprint,
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


def build_tiny_model_dir(
    config: TinyModelConfig,
    *,
    train_pairs: Callable[[], Sequence[tuple[str, str]]],
    data_fingerprint: str,
    cache_root: Path,
    name: str,
) -> Path:
    """The cached model directory for `config` and the warm-start data, built first if absent.

    `train_pairs` makes the (prompt, answer) pairs and is called only when building;
    `data_fingerprint` must change whenever they would (it is part of the cache key).

    Built into a private temporary directory and renamed into place, so a reader never sees a
    half-written model and concurrent builders (several actors, parallel tests) are safe: the
    first rename wins and the others discard their identical copy.
    """
    tokenizer = build_char_tokenizer()
    key = tiny_model_fingerprint(config, tokenizer, data_fingerprint)
    models_dir = cache_root / "models"
    final = models_dir / key
    if (final / BUILD_INFO_FILE).is_file():
        return final
    models_dir.mkdir(parents=True, exist_ok=True)
    tmp = models_dir / f".tmp-{key}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        previous_threads = torch.get_num_threads()
        torch.set_num_threads(config.sft_num_threads)
        try:
            model = build_tiny_qwen2(config, tokenizer)
            stats = warm_start(
                model,
                tokenizer,
                train_pairs(),
                steps=config.sft_steps,
                batch_size=config.sft_batch_size,
                learning_rate=config.sft_learning_rate,
                weight_decay=config.sft_weight_decay,
                seed=config.sft_seed,
            )
        finally:
            torch.set_num_threads(previous_threads)
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        info = {
            "name": name,
            "fingerprint": key,
            "data_fingerprint": data_fingerprint,
            "config": asdict(config),
            "warm_start": asdict(stats),
            "parameters": sum(p.numel() for p in model.parameters()),
            "torch": torch.__version__,
        }
        # Written last: its presence marks a complete build.
        (tmp / BUILD_INFO_FILE).write_text(json.dumps(info, indent=2) + "\n")
        try:
            tmp.rename(final)
        except OSError:
            if not (final / BUILD_INFO_FILE).is_file():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return final


def read_build_info(model_dir: str | Path) -> dict | None:
    """The build record of a tiny model directory (None for other models)."""
    path = Path(model_dir) / BUILD_INFO_FILE
    return json.loads(path.read_text()) if path.is_file() else None
