"""Baselines a learning claim must beat: what a policy that ignores the prompt scores.

A policy can raise its held-out pass rate by learning the answers' prior instead of the task: on
a task whose most common answer is 22% of all answers, always writing it scores 22%. So every
task's report states the **best constant answer** beside the policy: the training split's most
common answer, always given, scored by the task's own verifier on the held-out prompts. Learning
means beating it.

The **guesser** (`guess_hit_rates`) ignores the prompt too: it answers by drawing, with
replacement, one of the training split's reference answers of the prompt's difficulty level. Its
hit probability on a held-out prompt is the share of those answers equal to the prompt's own, g
(its pass@k is 1 − (1 − g)^k, adarl/evaluation/passk.py). Held-out evaluation reports both, and
the tiny model's task warm start stops only once it is clearly above both
(adarl/models/task_warm_start.py).
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from adarl.reward.base import Verifier
from adarl.types import TaskExample

# Verifiers whose answers are programs: one fixed program run against every held-out prompt's
# tests is a sandbox per prompt at start-up, and not what "the answers' prior" means.
NO_CONSTANT_ANSWER_VERIFIERS = frozenset({"code"})


def constant_answer_applies(verifier_name: str) -> bool:
    """Whether a run on `verifier_name` reports the best constant answer."""
    return verifier_name not in NO_CONSTANT_ANSWER_VERIFIERS


class ConstantAnswer(NamedTuple):
    """The constant answer and its held-out accuracy (mean verifier reward over the held-out
    prompts); unpacks as `(answer, accuracy)`."""

    answer: str
    accuracy: float


def best_constant_answer(
    train_examples: Sequence[TaskExample],
    test_examples: Sequence[TaskExample],
    verifier: Verifier,
    *,
    response: Callable[[str], str] = lambda answer: answer,
) -> ConstantAnswer:
    """The most common answer of `train_examples` (ties: the smallest string, so the result is
    a function of the data alone; the held-out prompts never choose it) and the mean reward
    `verifier` gives the response `response(answer)` on every one of `test_examples`.

    `response` renders the answer as the policy would write it (the answer itself by default,
    as the tiny model does; e.g. `lambda a: f"\\\\boxed{{{a}}}"` for the math verifier)."""
    if not train_examples:
        raise ValueError("best_constant_answer needs training examples to take the answer from")
    if not test_examples:
        raise ValueError("best_constant_answer needs held-out examples to score it on")
    answer = most_common_answer([example.answer for example in train_examples])
    rewards = constant_answer_rewards(answer, test_examples, verifier, response=response)
    return ConstantAnswer(answer=answer, accuracy=sum(rewards) / len(rewards))


def constant_answer_rewards(
    answer: str,
    test_examples: Sequence[TaskExample],
    verifier: Verifier,
    *,
    response: Callable[[str], str] = lambda answer: answer,
) -> list[float]:  # [P] the verifier's reward of `answer` on each held-out prompt
    """What always answering `answer` scores on each of `test_examples` (rendered by `response`,
    as in `best_constant_answer`): the per-prompt baseline a paired lead is taken over."""
    text = response(answer)
    return [float(verifier.verify(text, example).reward) for example in test_examples]


@dataclass(frozen=True)
class Lead:
    """A policy's mean lead over a baseline on the same prompts, and its paired standard
    error."""

    mean: float
    se: float


def lead_over(
    policy_rates: Sequence[float] | np.ndarray,  # [P] the policy's pass rate per prompt
    baseline_rates: Sequence[float] | np.ndarray,  # [P] the baseline's, on the same prompts
) -> Lead:
    """lead = mean(d), SE = sd(d, ddof=1)/√P with d_i = p̂_i − b_i. Paired: each prompt's
    difficulty cancels in d_i, so the SE is that of the lead, not of two means. Fewer than 2
    prompts have no SE: NaN (a rule comparing it with a threshold never passes)."""
    policy = np.asarray(policy_rates, dtype=np.float64)
    baseline = np.asarray(baseline_rates, dtype=np.float64)
    if policy.shape != baseline.shape or policy.ndim != 1:
        raise ValueError(
            f"a paired lead needs the same prompts for the policy and the baseline, got "
            f"{policy.shape} and {baseline.shape}"
        )
    if policy.size < 2:
        return Lead(mean=math.nan, se=math.nan)
    d = policy - baseline
    return Lead(mean=float(d.mean()), se=float(d.std(ddof=1) / math.sqrt(d.size)))


def most_common_answer(answers: Sequence[str]) -> str:
    """The most frequent of `answers` (ties: the smallest string, so that it is a function of the
    answers alone)."""
    if not answers:
        raise ValueError("the most common answer needs at least one answer")
    counts = Counter(answers)
    top = max(counts.values())
    return min(a for a, count in counts.items() if count == top)


def guess_hit_rates(
    test_answers: Sequence[str],  # [P] held-out reference answers
    test_levels: Sequence[str],  # [P] their difficulty labels
    train_answers: Sequence[str],  # [T] training reference answers
    train_levels: Sequence[str],  # [T] their difficulty labels
) -> np.ndarray:  # [P] float64: the share of the level's training answers equal to each answer
    """The guesser's hit probability per held-out prompt (module docstring).

    Answers are compared as stripped strings: exact for exact-match verifiers, a lower bound for
    verifiers that also accept other spellings. A level with no training answer (a held-out level
    the training split lacks) falls back to the whole training split's answers.
    """
    if len(test_answers) != len(test_levels) or len(train_answers) != len(train_levels):
        raise ValueError("answers and levels must have the same length")
    if not train_answers:
        raise ValueError("the guesser needs training answers: the training split is empty")
    by_level: dict[str, Counter[str]] = defaultdict(Counter)
    overall: Counter[str] = Counter()
    for answer, level in zip(train_answers, train_levels, strict=True):
        by_level[level][answer.strip()] += 1
        overall[answer.strip()] += 1
    rates = np.empty(len(test_answers), dtype=np.float64)
    for index, (answer, level) in enumerate(zip(test_answers, test_levels, strict=True)):
        pool = by_level.get(level) or overall
        rates[index] = pool[answer.strip()] / sum(pool.values())
    return rates
