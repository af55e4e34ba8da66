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

**Stop rule: the task, not its prior.** `PROBE_PROMPTS` training prompts (the smallest hashes of
their ids) are held aside from the supervised pairs. Every `CHECK_EVERY_STEPS` steps the policy
samples each of them `PROBE_SAMPLES` times at temperature 1; p̂_i is prompt i's share of samples
that write its response exactly (then `<eos>`). Two policies that ignore the prompt are scored on
the same prompts (adarl/tasks/baselines.py): the best constant answer, the most common answer of
the trained pairs (b_i = 1 if it is prompt i's answer, else 0), and the guesser (b_i = the share
of the pairs' answers of prompt i's level equal to its answer). The policy's lead over a baseline
is the paired mean and standard error over the P probe prompts (`lead_over`):

    d_i = p̂_i − b_i,   lead = mean(d),   SE = sd(d) / √P,

and the warm start stops at the first check where, against both baselines, lead ≥
`sft_stop_lead` and lead ≥ `sft_stop_lead_se` · SE (`clearly_above`). A policy that always writes
the most common answer has d_i = 0 on every prompt, and one that samples the answers' prior has a
lead near 0 against the guesser: neither ever stops it, however high its pass rate (answering '1'
on letter_counting passes 32% of prompts). The probe prompts are never trained on, so the lead
estimates where the run starts on held-out prompts, without reading one. The defaults (5 points
and 3 SE) are the run's own bar for learning (docs/tasks_and_rewards.md): the warm start ends when
its policy already clears it on prompts it has not seen.

**Budget.** At most `model.tiny.sft_max_steps` steps and `model.tiny.sft_max_minutes` minutes. The
minutes become a step budget through the measured cost of a step (`predicted_step_seconds`: it
grows with the model's size and the task's prompt + response length, so a 110-character gcd prompt
gets fewer steps than a 25-character number_sequence one), so that a task gets the same number of
steps, and the same weights, on any machine; a machine slower than the cost model is stopped by
the wall clock instead (`stopped_by="max_minutes"`, and its weights depend on its speed). Both
budgets end with a last check. Training runs in batches of `sft_batch_size` at
`sft_learning_rate` (linear warm-up over `WARMUP_STEPS`, then constant).

**Record.** `TaskWarmStartStats`: steps, minutes, why it stopped, the held-aside accuracy beside
both baselines and the leads at the last check, and every check; kept as `warm_start` in the
model's `adarl_build.json` (`read_task_warm_start`), so a run can tell a policy that learned the
task from one that did not before it spends its budget.

**Cache key.** A hash of every pair, the probe, their answers and levels and the vocabulary (the
task's content) with the tiny model's settings (the recipe): changing one training row rebuilds
the model.
"""

from __future__ import annotations

import hashlib
import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import PreTrainedTokenizerBase, Qwen2ForCausalLM

from adarl.tasks.baselines import Lead, guess_hit_rates, lead_over, most_common_answer
from adarl.types import TaskExample

log = logging.getLogger(__name__)

Pair = tuple[str, str]
PROBE_PROMPTS = 128  # training prompts held aside from the supervised pairs (at most half)
PROBE_SAMPLES = 4  # samples per probe prompt at each check
CHECK_EVERY_STEPS = 25
WARMUP_STEPS = 20
# Bump when the procedure below changes in a way the config does not capture.
RECIPE_VERSION = 2  # 2: stops above the answers' prior (constant answer, guesser), not at a rate
STOPPED_ABOVE_PRIOR = "above_prior"
STOPPED_BY_STEPS = "max_steps"
STOPPED_BY_MINUTES = "max_minutes"


@dataclass(frozen=True)
class TaskWarmStartData:
    """What the warm start of a task trains on, and what identifies it."""

    pairs: tuple[Pair, ...]  # supervised (prompt, response) pairs
    probe: tuple[Pair, ...]  # held-aside training prompts for the stopping rule
    characters: str  # the vocabulary's characters
    fingerprint: str  # hash of all of the above
    pair_ids: tuple[str, ...] = ()  # the prompt id of each pair
    probe_ids: tuple[str, ...] = ()  # the prompt id of each probe prompt
    # The answer and difficulty level of each pair and probe prompt: the baselines' inputs.
    pair_answers: tuple[str, ...] = ()
    pair_levels: tuple[str, ...] = ()
    probe_answers: tuple[str, ...] = ()
    probe_levels: tuple[str, ...] = ()

    def batch_tokens(self, batch_size: int) -> int:
        """Tokens of a typical training batch, padding included: `batch_size` rows as long as the
        pair at the (1 − 1/(batch_size + 1)) quantile of lengths, about the longest of
        `batch_size` random pairs (every row is padded to its batch's longest)."""
        lengths = sorted(len(p) + len(r) + 2 for p, r in self.pairs)
        index = min(len(lengths) - 1, int(len(lengths) * batch_size / (batch_size + 1)))
        return batch_size * lengths[index]


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


def _level(example: TaskExample) -> str:
    return "none" if example.difficulty is None else repr(float(example.difficulty))


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
    trained = [e for e in train_examples if e.prompt_id not in probe_ids]
    held = [e for e in train_examples if e.prompt_id in probe_ids]

    def rows(examples: list[TaskExample]) -> list[Pair]:
        return [(e.prompt + instruction_suffix, response_of(e, worked=worked)) for e in examples]

    pairs, probe = rows(trained), rows(held)
    texts = [instruction_suffix]
    for example in train_examples:
        texts += [example.prompt, example.answer, example.reference_solution or ""]
    characters = "".join(sorted(set("".join(texts))))
    digest = hashlib.sha256(f"task-warm-start/{RECIPE_VERSION}".encode())
    for name, split, examples in (("pairs", pairs, trained), ("probe", probe, held)):
        digest.update(f"\0{name}:{len(split)}".encode())
        for (prompt, response), example in zip(split, examples, strict=True):
            digest.update(f"\0{prompt}\0{response}\0{example.answer}\0{_level(example)}".encode())
    digest.update(f"\0vocab:{characters}".encode())
    return TaskWarmStartData(
        pairs=tuple(pairs),
        probe=tuple(probe),
        characters=characters,
        fingerprint="task:" + digest.hexdigest()[:16],
        pair_ids=tuple(e.prompt_id for e in trained),
        probe_ids=tuple(e.prompt_id for e in held),
        pair_answers=tuple(e.answer for e in trained),
        pair_levels=tuple(_level(e) for e in trained),
        probe_answers=tuple(e.answer for e in held),
        probe_levels=tuple(_level(e) for e in held),
    )


# ---- the stop rule (pure) ----------------------------------------------------------------------


@dataclass(frozen=True)
class ProbeBaselines:
    """What two policies that ignore the prompt score on each probe prompt (module docstring)."""

    best_constant_answer: str  # the most common answer of the trained pairs
    constant_hits: tuple[float, ...]  # [P] 1.0 where it is the probe prompt's answer
    guess_rates: tuple[float, ...]  # [P] the guesser's hit probability

    @property
    def best_constant_accuracy(self) -> float:
        return _mean(self.constant_hits)

    @property
    def guesser_accuracy(self) -> float:
        return _mean(self.guess_rates)


def _mean(values: Sequence[float]) -> float:
    return float(np.mean(values)) if len(values) else math.nan


def probe_baselines(data: TaskWarmStartData) -> ProbeBaselines:
    """The best constant answer and the guesser of `data.pairs`, scored on `data.probe`."""
    if not data.pair_answers:
        raise ValueError("the warm start's baselines need the answers of the trained pairs")
    constant = most_common_answer(data.pair_answers)
    rates = guess_hit_rates(
        data.probe_answers, data.probe_levels, data.pair_answers, data.pair_levels
    )
    return ProbeBaselines(
        best_constant_answer=constant,
        constant_hits=tuple(float(a == constant) for a in data.probe_answers),
        guess_rates=tuple(float(g) for g in rates),
    )


def clearly_above(lead: Lead, *, min_lead: float, min_lead_in_se: float) -> bool:
    """lead ≥ min_lead and lead ≥ min_lead_in_se · SE: above by an amount that matters and
    that the probe's own noise does not explain."""
    return lead.mean >= min_lead and lead.mean >= min_lead_in_se * lead.se


# ---- the budget ------------------------------------------------------------------------------

# The cost model of one warm-start step on one thread, from CPU time measured on the development
# machine (2-core AMD EPYC, AVX2, torch 2.13, 2026-11-28): forward + backward + AdamW of a batch,
# plus its share of the checks. An upper bound there (whole warm starts of the default model took
# 76-94% of it per step), so that on such a machine the step budget, not the wall clock, ends a
# warm start, and its weights do not depend on the machine's load.
STEP_SECONDS_FIXED = 0.01
STEP_SECONDS_PER_TOKEN_PARAMETER = 1.6e-10
PROBE_SHARE = 0.15  # a check (P × PROBE_SAMPLES generations) per CHECK_EVERY_STEPS steps


def predicted_step_seconds(*, parameters: int, batch_tokens: int) -> float:
    """Seconds of one step, its share of the checks included, on one core of the development
    machine: fixed + per_token_parameter · parameters · batch_tokens, times (1 + probe share).
    Training is a few matrix products per token and parameter, so its time is about linear in
    both (measured: docs/tasks_and_rewards.md, "The warm start's budget")."""
    per_step = STEP_SECONDS_FIXED + STEP_SECONDS_PER_TOKEN_PARAMETER * parameters * batch_tokens
    return per_step * (1.0 + PROBE_SHARE)


def task_step_budget(
    model: Qwen2ForCausalLM,
    data: TaskWarmStartData,
    *,
    max_steps: int,
    max_minutes: float,
    batch_size: int,
) -> int:
    """The warm start's step budget on this task: what `max_minutes` buy at the predicted cost
    of a step of `model` on `data`'s batches, at most `max_steps`."""
    return step_budget(
        max_steps=max_steps,
        max_minutes=max_minutes,
        step_seconds=predicted_step_seconds(
            parameters=sum(p.numel() for p in model.parameters()),
            batch_tokens=data.batch_tokens(batch_size),
        ),
    )


def step_budget(*, max_steps: int, max_minutes: float, step_seconds: float) -> int:
    """The steps that fit in `max_minutes` at `step_seconds` each, at most `max_steps` (and at
    least one unless `max_steps` is 0)."""
    if step_seconds <= 0:
        raise ValueError(f"step_seconds must be > 0, got {step_seconds}")
    return min(max_steps, max(1, int(max_minutes * 60.0 / step_seconds)))


# ---- the record ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProbeCheck:
    """One check: the held-aside accuracy and its leads over both baselines."""

    step: int
    seconds: float  # wall clock since the warm start began
    cpu_seconds: float  # this process's CPU time since then
    accuracy: float
    lead_over_constant: float
    lead_over_constant_se: float
    lead_over_guesser: float
    lead_over_guesser_se: float


@dataclass(frozen=True)
class TaskWarmStartStats:
    steps: int  # optimiser steps taken
    examples: int  # supervised pairs
    probe_prompts: int
    # "above_prior" (clearly above both baselines), "max_steps" or "max_minutes" (the budget)
    stopped_by: str
    initial_loss: float
    final_loss: float  # mean answer-token NLL over the last 10% of steps
    held_aside_accuracy: float  # held-aside accuracy at the last check
    seconds: float
    best_constant_answer: str = ""
    best_constant_accuracy: float = math.nan  # on the held-aside prompts
    guesser_accuracy: float = math.nan  # the guesser's, on the same prompts
    lead_over_constant: float = math.nan  # at the last check
    lead_over_constant_se: float = math.nan
    lead_over_guesser: float = math.nan
    lead_over_guesser_se: float = math.nan
    step_budget: int = 0  # the steps `sft_max_minutes` buys on this task (at most sft_steps)
    minutes_budget: float = math.nan
    cpu_seconds: float = math.nan  # this process's CPU time (the cost model's unit)
    checks: list[ProbeCheck] = field(default_factory=list)

    @property
    def minutes(self) -> float:
        return self.seconds / 60.0

    @property
    def above_prior(self) -> bool:
        """Whether the policy ended clearly above both the constant answer and the guesser."""
        return self.stopped_by == STOPPED_ABOVE_PRIOR

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> TaskWarmStartStats:
        """The stats as `dataclasses.asdict` wrote them into the build record."""
        checks = [ProbeCheck(**check) for check in record.get("checks", [])]
        return cls(**{**record, "checks": checks})


def read_task_warm_start(model_dir: str | Path) -> TaskWarmStartStats | None:
    """The task warm start's record of a built tiny model (None for other models, the built-in
    task's model and builds older than this record)."""
    from adarl.models.tiny import read_build_info

    info = read_build_info(model_dir)
    record = (info or {}).get("warm_start") or {}
    if not str((info or {}).get("data_fingerprint", "")).startswith("task:"):
        return None
    if "best_constant_accuracy" not in record:
        return None
    return TaskWarmStartStats.from_record(record)


# ---- training ----------------------------------------------------------------------------------


def probe_hits(
    model: Qwen2ForCausalLM,
    tokenizer: PreTrainedTokenizerBase,
    probe: Sequence[Pair],
    *,
    samples: int = PROBE_SAMPLES,
    seed: int = 0,
    batch_size: int = 256,
) -> list[int]:
    """[P] how many of `samples` temperature-1 samples of each probe prompt write its response
    exactly (then `<eos>`)."""
    if not probe:
        return []
    was_training = model.training
    model.eval()
    longest = max(len(tokenizer.encode(r, add_special_tokens=False)) for _, r in probe) + 1
    rows = [(index, pair) for index, pair in enumerate(probe) for _ in range(samples)]
    generator_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    hits = [0] * len(probe)
    try:
        for start in range(0, len(rows), batch_size):
            chunk = rows[start : start + batch_size]
            encoded = [tokenizer(prompt)["input_ids"] for _, (prompt, _) in chunk]
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
            for row, (index, (_, response)) in zip(out[:, width:].tolist(), chunk, strict=True):
                end = row.index(tokenizer.eos_token_id) if tokenizer.eos_token_id in row else None
                text = tokenizer.decode(row[:end], skip_special_tokens=True)
                hits[index] += end is not None and text == response
    finally:
        torch.random.set_rng_state(generator_state)
        model.train(was_training)
    return hits


def warm_start_until_above_prior(
    model: Qwen2ForCausalLM,
    tokenizer: PreTrainedTokenizerBase,
    data: TaskWarmStartData,
    *,
    min_lead: float,
    min_lead_in_se: float,
    max_steps: int,
    max_minutes: float,
    check_every_steps: int,
    batch_size: int,
    learning_rate: float,
    weight_decay: float,
    seed: int,
) -> TaskWarmStartStats:
    """Supervised training on `data.pairs` until the probe is clearly above both baselines, or
    `max_steps` steps (the step budget: `task_step_budget`) or `max_minutes` of wall clock have
    passed (module docstring: "Stop rule", "Budget")."""
    from adarl.models.tiny import _answer_loss, _Batches, _encode_checked, _tail_mean

    baselines = probe_baselines(data)
    batches = _Batches(_encode_checked(model, tokenizer, data.pairs), batch_size, seed=seed)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=learning_rate, weight_decay=weight_decay, betas=(0.9, 0.98)
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min(1.0, (step + 1) / WARMUP_STEPS)
    )
    losses: list[float] = []
    checks: list[ProbeCheck] = []
    start, cpu_start = time.perf_counter(), time.process_time()
    rule = {"min_lead": min_lead, "min_lead_in_se": min_lead_in_se}

    def above_prior(step: int) -> bool:
        """Check the probe (a record in `checks`); whether it is clearly above both baselines."""
        hits = probe_hits(model, tokenizer, data.probe, seed=seed + step)
        rates = [h / PROBE_SAMPLES for h in hits]
        over_constant = lead_over(rates, baselines.constant_hits)
        over_guess = lead_over(rates, baselines.guess_rates)
        check = ProbeCheck(
            step=step,
            seconds=time.perf_counter() - start,
            cpu_seconds=time.process_time() - cpu_start,
            accuracy=_mean(rates),
            lead_over_constant=over_constant.mean,
            lead_over_constant_se=over_constant.se,
            lead_over_guesser=over_guess.mean,
            lead_over_guesser_se=over_guess.se,
        )
        checks.append(check)
        log.info(
            "warm start, step %d of at most %d (%.1f min): held-aside prompts pass at %.1f%%, "
            "%+.1f points (SE %.1f) over the constant answer, %+.1f (SE %.1f) over the guesser",
            step,
            max_steps,
            check.seconds / 60,
            100 * check.accuracy,
            100 * over_constant.mean,
            100 * over_constant.se,
            100 * over_guess.mean,
            100 * over_guess.se,
        )
        return clearly_above(over_constant, **rule) and clearly_above(over_guess, **rule)

    stopped_by, step = STOPPED_BY_STEPS, 0
    if max_steps == 0 and above_prior(step):  # no warm start: the record of the initial policy
        stopped_by = STOPPED_ABOVE_PRIOR
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
        out_of_time = time.perf_counter() - start >= max_minutes * 60.0
        if step % check_every_steps and step < max_steps and not out_of_time:
            continue
        if above_prior(step):
            stopped_by = STOPPED_ABOVE_PRIOR
            break
        if out_of_time:
            stopped_by = STOPPED_BY_MINUTES
            break
    model.eval()
    last = checks[-1]
    return TaskWarmStartStats(
        steps=step,
        examples=len(data.pairs),
        probe_prompts=len(data.probe),
        stopped_by=stopped_by,
        initial_loss=losses[0] if losses else math.nan,
        final_loss=_tail_mean(losses),
        held_aside_accuracy=last.accuracy,
        seconds=time.perf_counter() - start,
        best_constant_answer=baselines.best_constant_answer,
        best_constant_accuracy=baselines.best_constant_accuracy,
        guesser_accuracy=baselines.guesser_accuracy,
        lead_over_constant=last.lead_over_constant,
        lead_over_constant_se=last.lead_over_constant_se,
        lead_over_guesser=last.lead_over_guesser,
        lead_over_guesser_se=last.lead_over_guesser_se,
        step_budget=max_steps,
        minutes_budget=max_minutes,
        cpu_seconds=time.process_time() - cpu_start,
        checks=checks,
    )
