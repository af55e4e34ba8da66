"""The embedded tiny policy warm-started on the configured task, whatever it is (files, HF
`datasets`, reasoning-gym); the built-in arithmetic task keeps its own recipe
(adarl/models/loading.py, adarl/models/hint_warm_start.py).

**Data.** Only the training split: (prompt as the policy sees it, response) pairs, the response
being the example's answer (or its reference solution with `model.tiny.sft_response=worked`).
The prompt is the example's prompt plus `task.instruction_suffix`, the text the codec renders
after `<bos>` (adarl/rollout/codec.py). Held-out prompts are never read here: the caller passes
the prompt source's examples, and `probe` prompts are training prompts too.

**Vocabulary.** Every character of the training prompts, responses, reference solutions and the
instruction suffix (`build_task_char_tokenizer`); a character seen only in held-out prompts
encodes as `<unk>`.

**Recipe (light, so that RL has room).** `probe_prompts` training prompts (the smallest hashes of
their ids) are held aside from the supervised pairs. Training runs in batches of
`sft_batch_size` at `sft_learning_rate` (linear warm-up over 20 steps, then constant), and every
`sft_check_every_steps` steps the policy samples each probe prompt `PROBE_SAMPLES` times at
temperature 1; it stops at the first check where the probe's pass rate (exact match with the
reference response) reaches `sft_stop_pass_rate`, or at `sft_max_steps`. The probe prompts were
never trained on, so the rate estimates the held-out pass rate the run will start from, on any
task, without reading a held-out prompt.

**Cache key.** A hash of every pair, the probe and the vocabulary (the task's content) with the
tiny model's settings (the recipe): changing one training row rebuilds the model.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from transformers import PreTrainedTokenizerBase, Qwen2ForCausalLM

from adarl.types import TaskExample

Pair = tuple[str, str]
PROBE_PROMPTS = 128  # training prompts held aside from the supervised pairs (at most half)
PROBE_SAMPLES = 4  # samples per probe prompt at each check
CHECK_EVERY_STEPS = 25
WARMUP_STEPS = 20
RECIPE_VERSION = 1  # bump when the procedure below changes in a way the config does not capture


@dataclass(frozen=True)
class TaskWarmStartData:
    """What the warm start of a task trains on, and what identifies it."""

    pairs: tuple[Pair, ...]  # supervised (prompt, response) pairs
    probe: tuple[Pair, ...]  # held-aside training prompts for the stopping rule
    characters: str  # the vocabulary's characters
    fingerprint: str  # hash of all of the above
    pair_ids: tuple[str, ...] = ()  # the prompt id of each pair
    probe_ids: tuple[str, ...] = ()  # the prompt id of each probe prompt

    @property
    def longest_pair_tokens(self) -> int:
        """<bos> + prompt + response + <eos> of the longest pair (one token per character)."""
        return max(len(p) + len(r) for p, r in (*self.pairs, *self.probe)) + 2


def response_of(example: TaskExample, *, worked: bool) -> str:
    """What the policy is taught to write: the answer, or the reference solution with `worked`."""
    if not worked:
        return example.answer
    if not example.reference_solution:
        raise ValueError(
            f"model.tiny.sft_response=worked teaches the reference solution, but prompt "
            f"{example.prompt_id!r} has none; map task.fields.reference_solution or use "
            "model.tiny.sft_response=answer"
        )
    return example.reference_solution


def task_warm_start_data(
    train_examples: Sequence[TaskExample],
    *,
    instruction_suffix: str = "",
    worked: bool = False,
    probe_prompts: int = 128,
) -> TaskWarmStartData:
    """The warm-start pairs and probe of a task's training split (module docstring)."""
    if not train_examples:
        raise ValueError("the task has no training prompts to warm the tiny model up on")
    # The probe: at most half the split, so that small tasks still train on most of it.
    size = min(probe_prompts, len(train_examples) // 2)
    order = sorted(train_examples, key=lambda e: hashlib.sha256(e.prompt_id.encode()).hexdigest())
    probe_ids = {e.prompt_id for e in order[:size]}
    pairs, probe, pair_ids, probe_order = [], [], [], []
    for example in train_examples:
        pair = (example.prompt + instruction_suffix, response_of(example, worked=worked))
        held = example.prompt_id in probe_ids
        (probe if held else pairs).append(pair)
        (probe_order if held else pair_ids).append(example.prompt_id)
    texts = [instruction_suffix]
    for example in train_examples:
        texts += [example.prompt, example.answer, example.reference_solution or ""]
    characters = "".join(sorted(set("".join(texts))))
    digest = hashlib.sha256(f"task-warm-start/{RECIPE_VERSION}".encode())
    for name, rows in (("pairs", pairs), ("probe", probe)):
        digest.update(f"\0{name}:{len(rows)}".encode())
        for prompt, response in rows:
            digest.update(f"\0{prompt}\0{response}".encode())
    digest.update(f"\0vocab:{characters}".encode())
    return TaskWarmStartData(
        pairs=tuple(pairs),
        probe=tuple(probe),
        characters=characters,
        fingerprint="task:" + digest.hexdigest()[:16],
        pair_ids=tuple(pair_ids),
        probe_ids=tuple(probe_order),
    )


@dataclass(frozen=True)
class TaskWarmStartStats:
    steps: int  # optimiser steps taken
    examples: int  # supervised pairs
    probe_prompts: int
    stopped_by: str  # "pass_rate" (the probe reached the target) or "max_steps"
    initial_loss: float
    final_loss: float  # mean answer-token NLL over the last 10% of steps
    probe_pass_rate: float  # at the last check
    seconds: float
    # (step, probe pass rate) at every check: how the light warm start got where it stopped.
    checks: list[tuple[int, float]] = field(default_factory=list)

    @property
    def minutes(self) -> float:
        return self.seconds / 60.0


def probe_pass_rate(
    model: Qwen2ForCausalLM,
    tokenizer: PreTrainedTokenizerBase,
    probe: Sequence[Pair],
    *,
    samples: int = PROBE_SAMPLES,
    seed: int = 0,
    batch_size: int = 256,
) -> float:
    """Share of `samples` temperature-1 samples per probe prompt that write its response
    exactly (then `<eos>`)."""
    if not probe:
        return math.nan
    was_training = model.training
    model.eval()
    longest = max(len(tokenizer.encode(r, add_special_tokens=False)) for _, r in probe) + 1
    rows = [pair for pair in probe for _ in range(samples)]
    generator_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    hits = 0
    try:
        for start in range(0, len(rows), batch_size):
            chunk = rows[start : start + batch_size]
            encoded = [tokenizer(prompt)["input_ids"] for prompt, _ in chunk]
            width = max(len(ids) for ids in encoded)
            pad = tokenizer.pad_token_id
            input_ids = torch.tensor([[pad] * (width - len(i)) + i for i in encoded])
            mask = torch.tensor([[0] * (width - len(i)) + [1] * len(i) for i in encoded])
            with torch.no_grad():
                out = model.generate(
                    input_ids=input_ids,
                    attention_mask=mask,
                    do_sample=True,
                    temperature=1.0,
                    top_k=0,
                    top_p=1.0,
                    max_new_tokens=longest,
                    eos_token_id=tokenizer.eos_token_id,
                    pad_token_id=pad,
                )
            for row, (_, response) in zip(out[:, width:].tolist(), chunk, strict=True):
                end = row.index(tokenizer.eos_token_id) if tokenizer.eos_token_id in row else None
                text = tokenizer.decode(row[:end], skip_special_tokens=True)
                hits += end is not None and text == response
    finally:
        torch.random.set_rng_state(generator_state)
        model.train(was_training)
    return hits / len(rows)


def warm_start_to_pass_rate(
    model: Qwen2ForCausalLM,
    tokenizer: PreTrainedTokenizerBase,
    data: TaskWarmStartData,
    *,
    stop_pass_rate: float,
    max_steps: int,
    check_every_steps: int,
    batch_size: int,
    learning_rate: float,
    weight_decay: float,
    seed: int,
) -> TaskWarmStartStats:
    """Supervised training on `data.pairs` until the probe's pass rate reaches `stop_pass_rate`
    or `max_steps` (module docstring, "Recipe")."""
    from adarl.models.tiny import _answer_loss, _Batches, _encode_checked, _tail_mean

    batches = _Batches(_encode_checked(model, tokenizer, data.pairs), batch_size, seed=seed)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=learning_rate, weight_decay=weight_decay, betas=(0.9, 0.98)
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min(1.0, (step + 1) / WARMUP_STEPS)
    )
    losses: list[float] = []
    checks: list[tuple[int, float]] = []
    rate, stopped_by, step = math.nan, "max_steps", 0
    start = time.perf_counter()
    model.train()
    while step < max_steps:
        loss = _answer_loss(model, batches.next(), tokenizer.pad_token_id)
        losses.append(loss.item())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        step += 1
        if step % check_every_steps == 0 or step == max_steps:
            rate = probe_pass_rate(model, tokenizer, data.probe, seed=seed + step)
            checks.append((step, rate))
            if rate >= stop_pass_rate:
                stopped_by = "pass_rate"
                break
    model.eval()
    return TaskWarmStartStats(
        steps=step,
        examples=len(data.pairs),
        probe_prompts=len(data.probe),
        stopped_by=stopped_by,
        initial_loss=losses[0] if losses else math.nan,
        final_loss=_tail_mean(losses),
        probe_pass_rate=rate,
        seconds=time.perf_counter() - start,
        checks=checks,
    )
