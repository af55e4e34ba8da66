"""The task warm start's stop rule and budget as pure functions: the policy's paired lead over
the best constant answer and the guesser on the held-aside prompts, and the steps its minutes
buy."""

from __future__ import annotations

import math

import numpy as np
import pytest

from adarl.models.task_warm_start import (
    TaskWarmStartData,
    clearly_above,
    predicted_step_seconds,
    probe_baselines,
    step_budget,
    task_warm_start_data,
)
from adarl.tasks.baselines import Lead, lead_over
from adarl.types import TaskExample

RULE = {"min_lead": 0.05, "min_lead_in_se": 3.0}


def test_a_policy_that_answers_the_prior_never_clears_it() -> None:
    # 128 prompts, the constant answer right on 40 of them (31%: letter_counting's '1').
    constant = np.array([1.0] * 40 + [0.0] * 88)
    # Always writing it: d_i = 0 on every prompt, lead 0 with SE 0. Its 31% pass rate clears
    # the old absolute rule (15%) and not this one.
    always = lead_over(constant, constant)
    assert always == Lead(mean=0.0, se=0.0) and not clearly_above(always, **RULE)
    # Sampling the answers' prior (the guesser itself, here 20% on every prompt): lead 0 again.
    guess = np.full(128, 0.2)
    assert not clearly_above(lead_over(guess, guess), **RULE)
    # Writing the constant answer 3 times in 4 elsewhere too: 0.75·40/128 = 23% pass rate, below
    # the constant's 31%.
    sometimes = lead_over(0.75 * constant, constant)
    assert sometimes.mean == pytest.approx(-0.25 * 40 / 128)
    assert not clearly_above(sometimes, **RULE)


def test_a_policy_clearly_better_clears_both_margins() -> None:
    constant = np.array([1.0] * 40 + [0.0] * 88)
    # Passing half its samples on every prompt: d = −0.5 on 40 prompts, +0.5 on 88.
    lead = lead_over(np.full(128, 0.5), constant)
    # mean = (88 − 40)·0.5/128 = 0.1875; sd(d) = √(p(1−p)·128/127) with p = 40/128 → SE = sd/√128
    p = 40 / 128
    assert lead.mean == pytest.approx(0.1875)
    assert lead.se == pytest.approx(math.sqrt(p * (1 - p) * 128 / 127) / math.sqrt(128))
    assert lead.mean / lead.se > 4 and clearly_above(lead, **RULE)


def test_each_margin_binds_on_its_own() -> None:
    # 6 points above, but the probe's noise could explain it (2 SE): not clear.
    assert not clearly_above(Lead(mean=0.06, se=0.03), **RULE)
    # 10 SE above, but 2 points is no lead that matters: not clear.
    assert not clearly_above(Lead(mean=0.02, se=0.002), **RULE)
    assert clearly_above(Lead(mean=0.06, se=0.02), **RULE)  # exactly 3 SE and over 5 points


def test_the_lead_needs_the_same_prompts_and_two_of_them() -> None:
    with pytest.raises(ValueError, match="same prompts"):
        lead_over([0.5, 0.5], [1.0, 0.0, 0.0])
    # One prompt has no standard error: no lead the rule could trust (a split of 2-3 prompts).
    alone = lead_over([1.0], [0.0])
    assert math.isnan(alone.mean) and not clearly_above(alone, **RULE)


def _example(index: int, answer: str, difficulty: float | None = None) -> TaskExample:
    return TaskExample(f"q{index}", f"{index}?", answer, task="exact_match", difficulty=difficulty)


def test_the_baselines_come_from_the_trained_pairs_and_score_the_probe() -> None:
    # Level 1 answers "a" (6 of 8 trained, 2 "b"), level 2 "c". Which prompts are probed is fixed
    # by their ids' hashes; whatever they are, the baselines use the trained pairs only.
    examples = [_example(i, "a" if i % 4 else "b", 1.0) for i in range(16)]
    examples += [_example(16 + i, "c", 2.0) for i in range(8)]
    data = task_warm_start_data(examples, probe_prompts=8)
    baselines = probe_baselines(data)
    trained = list(data.pair_answers)
    assert baselines.best_constant_answer == max(sorted(set(trained)), key=trained.count)
    assert baselines.constant_hits == tuple(float(a == "a") for a in data.probe_answers)
    for rate, answer, level in zip(
        baselines.guess_rates, data.probe_answers, data.probe_levels, strict=True
    ):
        pool = [a for a, lv in zip(data.pair_answers, data.pair_levels, strict=True) if lv == level]
        assert rate == pool.count(answer) / len(pool)
    assert baselines.best_constant_accuracy == pytest.approx(np.mean(baselines.constant_hits))


def test_the_budget_in_minutes_buys_fewer_steps_on_longer_prompts() -> None:
    short = predicted_step_seconds(parameters=400_000, batch_tokens=64 * 30)  # number_sequence
    long = predicted_step_seconds(parameters=400_000, batch_tokens=64 * 120)  # gcd
    assert long > 3 * short
    steps = {s: step_budget(max_steps=10_000, max_minutes=4, step_seconds=s) for s in (short, long)}
    assert steps[short] > 3 * steps[long]
    assert step_budget(max_steps=300, max_minutes=4, step_seconds=short) == 300  # steps bind
    assert step_budget(max_steps=300, max_minutes=1e-6, step_seconds=long) == 1  # one check
    assert step_budget(max_steps=0, max_minutes=4, step_seconds=long) == 0  # no warm start


def test_a_typical_batch_is_padded_to_about_its_longest_row() -> None:
    # n + 4 tokens each (prompt n + 1, answer 1, <bos>, <eos>): 5 .. 104
    pairs = tuple((f"{'x' * n}?", "1") for n in range(1, 101))
    data = TaskWarmStartData(pairs=pairs, probe=(), characters="x?1", fingerprint="t")
    # 64 rows at the 64/65 quantile of lengths: index int(100·64/65) = 98 of the sorted lengths,
    # 98 + 5 = 103 tokens.
    assert data.batch_tokens(64) == 64 * 103
