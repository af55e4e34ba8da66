"""The built-in tiny policy: a small `Qwen2ForCausalLM` built and warm-started locally, then cached.

Qwen2 is used because both vLLM builds (CPU and CUDA) and transformers load it, so the tiny model
exercises exactly the code paths a real model does. Embeddings are untied (vLLM's weight reload
then sees every tensor under its own name, and an `lm_head` edit does not move the embeddings).

The warm start is plain supervised fine-tuning on (prompt, answer) pairs of a task's train split:
the sequence is `<bos> prompt answer <eos>` and the loss covers only `answer <eos>`. It is short on
purpose: the goal is a base policy with a spread of pass rates for RL to improve, not a solved task.
Auxiliary sets (`AuxiliaryPairs`) are trained alongside with their own loss term. The built-in
arithmetic model learns the two hint formats (adarl/models/hint_warm_start.py): a share of its task
pairs is shown with a hint, and the hint mode (writing hints from a reference solution) is an
auxiliary set.

The cache key is a hash of everything that determines the weights (architecture, warm-start
settings, tokenizer vocabulary and a fingerprint of the training data's recipe), so changing the
task's data invalidates the cache without anyone remembering to.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import math
import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from transformers import (
    PreTrainedTokenizerBase,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2ForCausalLM,
)

from adarl.config.model import TinyModelConfig
from adarl.models.tokenizer import build_char_tokenizer

# Bump when the build procedure changes in a way the config does not capture.
BUILD_FORMAT_VERSION = 2  # 2: auxiliary sets (the hint mode) trained alongside
BUILD_INFO_FILE = "adarl_build.json"


@dataclass(frozen=True)
class WarmStartStats:
    steps: int
    examples: int
    initial_loss: float
    final_loss: float  # mean answer-token NLL of the task pairs over the last 10% of steps
    seconds: float
    # Per auxiliary set trained alongside: pairs used, pairs left out for being longer than the
    # model, final loss (as `final_loss`).
    auxiliary: dict[str, dict[str, float]] = field(default_factory=dict)


@dataclass(frozen=True)
class AuxiliaryPairs:
    """Extra (prompt, answer) pairs trained alongside a warm start's task pairs, `batch_size`
    of them per step with their own loss term (the hint formats:
    adarl/models/hint_warm_start.py)."""

    name: str
    pairs: Sequence[tuple[str, str]]
    batch_size: int

    def __post_init__(self) -> None:
        if self.batch_size < 1 or not self.pairs:
            raise ValueError(
                f"auxiliary warm-start set {self.name!r}: needs batch_size >= 1 (got "
                f"{self.batch_size}) and at least one pair (got {len(self.pairs)})"
            )


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


def save_quietly(
    model: Qwen2ForCausalLM, tokenizer: PreTrainedTokenizerBase, directory: Path
) -> None:
    """`save_pretrained` of both without transformers' "Writing model shards" bar: a model built
    on the spot is written on the driver, whose console holds adarl's own lines."""
    from transformers.utils import logging as hf_logging

    shown = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        model.save_pretrained(directory)
        tokenizer.save_pretrained(directory)
    finally:
        if shown:
            hf_logging.enable_progress_bar()


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
    auxiliary: Sequence[AuxiliaryPairs] = (),
    length_buckets: bool = False,
) -> WarmStartStats:
    """Supervised training on `pairs` (prompt, answer); loss on the answer and `<eos>` only.

    Each `auxiliary` set (e.g. the hint formats, adarl/models/hint_warm_start.py) is trained
    alongside: every step adds the mean answer loss of `batch_size` of its pairs to the task
    pairs' loss. The task pairs are drawn in the same order with or without them.

    `length_buckets`: each batch holds pairs of similar length (`_Batches`), so a batch pads to
    little more than its pairs' own length: the same pairs once per epoch, in another grouping
    (for tasks whose lengths vary several-fold, e.g. the worked task: 3x faster there)."""
    if steps > 0 and not pairs:
        raise ValueError("warm start got no (prompt, answer) pairs; check the task's train split")
    encoded = _encode_checked(model, tokenizer, pairs)
    # An auxiliary pair longer than the model is left out (a short test model simply sees fewer
    # hint rows); a set left empty is skipped. Both are counted in the returned stats.
    aux_rows = [
        [pair for pair in encode_sft_pairs(tokenizer, aux.pairs) if _fits(model, pair)]
        for aux in auxiliary
    ]
    aux_batches = [
        _Batches(rows, aux.batch_size, seed=seed + 1 + i) if rows else None
        for i, (aux, rows) in enumerate(zip(auxiliary, aux_rows, strict=True))
    ]
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
    batches = _Batches(encoded, batch_size, seed=seed, length_buckets=length_buckets)
    losses: list[float] = []
    aux_losses: list[list[float]] = [[] for _ in auxiliary]
    model.train()
    start = time.perf_counter()
    for _ in range(steps):
        loss = _answer_loss(model, batches.next(), tokenizer.pad_token_id)
        losses.append(loss.item())
        for aux, history in zip(aux_batches, aux_losses, strict=True):
            if aux is None:
                continue
            aux_loss = _answer_loss(model, aux.next(), tokenizer.pad_token_id)
            history.append(aux_loss.item())
            loss = loss + aux_loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
    model.eval()
    return WarmStartStats(
        steps=steps,
        examples=len(pairs),
        initial_loss=losses[0] if losses else math.nan,
        final_loss=_tail_mean(losses),
        seconds=time.perf_counter() - start,
        auxiliary={
            aux.name: {
                "examples": len(rows),
                "too_long": len(aux.pairs) - len(rows),
                "final_loss": _tail_mean(history),
            }
            for aux, rows, history in zip(auxiliary, aux_rows, aux_losses, strict=True)
        },
    )


class _Batches:
    """Batches of `size` from `rows` in seeded random order, a fresh permutation per epoch.

    With `length_buckets`, each epoch's permutation is cut into windows of `BUCKET_BATCHES`
    batches, each window sorted by length and cut into batches, and the batches shuffled: a
    batch's pairs are close in length (little padding) and every pair is still seen once per
    epoch."""

    BUCKET_BATCHES = 32

    def __init__(
        self,
        rows: list[tuple[list[int], list[int]]],
        size: int,
        *,
        seed: int,
        length_buckets: bool = False,
    ) -> None:
        self._rows, self._size, self._buckets = rows, size, length_buckets
        self._generator = torch.Generator().manual_seed(seed)
        self._order = self._epoch()
        self._cursor = 0

    def _epoch(self) -> torch.Tensor:
        order = torch.randperm(len(self._rows), generator=self._generator)
        if not self._buckets:
            return order
        window = self._size * self.BUCKET_BATCHES
        batches: list[torch.Tensor] = []
        for start in range(0, len(order), window):
            chunk = order[start : start + window].tolist()
            chunk.sort(key=lambda i: len(self._rows[i][0]) + len(self._rows[i][1]))
            batches += [
                torch.tensor(chunk[i : i + self._size]) for i in range(0, len(chunk), self._size)
            ]
        full = [b for b in batches if len(b) == self._size]  # a short tail waits for next epoch
        shuffled = torch.randperm(len(full), generator=self._generator).tolist()
        return torch.cat([full[i] for i in shuffled]) if full else order

    def next(self) -> list[tuple[list[int], list[int]]]:
        if self._cursor + self._size > len(self._order):
            self._order = self._epoch()
            self._cursor = 0
        batch = [self._rows[int(i)] for i in self._order[self._cursor : self._cursor + self._size]]
        self._cursor += self._size
        return batch


def _answer_loss(
    model: Qwen2ForCausalLM, batch: Sequence[tuple[list[int], list[int]]], pad_token_id: int
) -> torch.Tensor:
    input_ids, attention_mask, labels = _collate(batch, pad_token_id)
    return model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss


def _tail_mean(losses: list[float]) -> float:
    """Mean over the last 10% of steps."""
    tail = losses[-max(1, len(losses) // 10) :] if losses else [math.nan]
    return sum(tail) / len(tail)


def _fits(model: Qwen2ForCausalLM, pair: tuple[list[int], list[int]]) -> bool:
    return len(pair[0]) + len(pair[1]) <= _max_positions(model)


def _encode_checked(
    model: Qwen2ForCausalLM, tokenizer: PreTrainedTokenizerBase, pairs: Sequence[tuple[str, str]]
) -> list[tuple[list[int], list[int]]]:
    encoded = encode_sft_pairs(tokenizer, pairs)
    too_long = [i for i, pair in enumerate(encoded) if not _fits(model, pair)]
    if too_long:
        raise ValueError(
            f"warm start: {len(too_long)} pairs exceed the model's max_position_embeddings "
            f"({_max_positions(model)}), e.g. pair {too_long[0]}: {pairs[too_long[0]]!r}; "
            "raise model.tiny.max_position_embeddings or shorten the task"
        )
    return encoded


def _max_positions(model: Qwen2ForCausalLM) -> int:
    return int(model.config.max_position_embeddings)


def tiny_model_fingerprint(
    config: TinyModelConfig,
    tokenizer: PreTrainedTokenizerBase,
    data_fingerprint: str,
    *,
    ignore_keys: Sequence[str] = (),
) -> str:
    """Hash of everything that determines the built weights (the cache key); `ignore_keys`
    are settings the build does not read (e.g. the task recipe's keys for the built-in task)."""
    settings = asdict(config)
    settings.pop("sft_num_threads")  # affects speed, not the recipe
    for key in ignore_keys:
        settings.pop(key)
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
    train_pairs: Callable[[], Sequence[tuple[str, str]]] | None = None,
    data_fingerprint: str,
    cache_root: Path,
    name: str,
    auxiliary: Callable[[], Sequence[AuxiliaryPairs]] | None = None,
    tokenizer: PreTrainedTokenizerFast | None = None,
    train: Callable[[Qwen2ForCausalLM, PreTrainedTokenizerBase], Any] | None = None,
    ignore_keys: Sequence[str] = (),
) -> Path:
    """The cached model directory for `config` and the warm-start data, built first if absent.

    `train_pairs` makes the (prompt, answer) pairs and `auxiliary` the sets trained alongside
    them (`warm_start`); both are called only when building. `data_fingerprint` must change
    whenever either would (it is part of the cache key). `tokenizer`: the vocabulary (default:
    the built-in character tokenizer). `train`: instead of `warm_start` on `train_pairs`, a
    function that trains the fresh model and returns its stats (a dataclass), e.g. the task warm
    start of adarl/models/task_warm_start.py. `ignore_keys`: `config` keys that do not shape this
    build, left out of the cache key.

    Built into a private temporary directory and renamed into place, so a reader never sees a
    half-written model and concurrent builders (several actors, parallel tests) are safe: the
    first rename wins and the others discard their identical copy.
    """
    if (train is None) == (train_pairs is None):
        raise ValueError("build_tiny_model_dir: give exactly one of train_pairs and train")
    tokenizer = tokenizer or build_char_tokenizer()
    key = tiny_model_fingerprint(config, tokenizer, data_fingerprint, ignore_keys=ignore_keys)
    models_dir = cache_root / "models"
    final = models_dir / key
    if (final / BUILD_INFO_FILE).is_file():
        return final
    models_dir.mkdir(parents=True, exist_ok=True)
    with _build_lock(models_dir / f".lock-{key}"):
        if (final / BUILD_INFO_FILE).is_file():  # another builder finished while this one waited
            return final
        return _build(
            final,
            config=config,
            key=key,
            name=name,
            data_fingerprint=data_fingerprint,
            tokenizer=tokenizer,
            train=train,
            train_pairs=train_pairs,
            auxiliary=auxiliary,
        )


@contextlib.contextmanager
def _build_lock(path: Path) -> Iterator[None]:
    """One builder of a model at a time on this machine (an advisory file lock): the others wait
    and then find it built, instead of training the same warm start again. Across machines the
    rename below still keeps a half-written model out of sight."""
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _build(
    final: Path,
    *,
    config: TinyModelConfig,
    key: str,
    name: str,
    data_fingerprint: str,
    tokenizer: PreTrainedTokenizerFast,
    train: Callable[[Qwen2ForCausalLM, PreTrainedTokenizerBase], Any] | None,
    train_pairs: Callable[[], Sequence[tuple[str, str]]] | None,
    auxiliary: Callable[[], Sequence[AuxiliaryPairs]] | None,
) -> Path:
    tmp = final.parent / f".tmp-{key}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        previous_threads = torch.get_num_threads()
        torch.set_num_threads(config.sft_num_threads)
        try:
            model = build_tiny_qwen2(config, tokenizer)
            if train is not None:
                stats = train(model, tokenizer)
            else:
                assert train_pairs is not None
                stats = warm_start(
                    model,
                    tokenizer,
                    train_pairs(),
                    auxiliary=auxiliary() if auxiliary is not None else (),
                    steps=config.sft_steps,
                    batch_size=config.sft_batch_size,
                    learning_rate=config.sft_learning_rate,
                    weight_decay=config.sft_weight_decay,
                    seed=config.sft_seed,
                    length_buckets=config.sft_length_buckets,
                )
        finally:
            torch.set_num_threads(previous_threads)
        save_quietly(model, tokenizer, tmp)
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
