"""Baselines a learning claim must beat: what a policy that ignores the prompt scores.

A policy can raise its held-out pass rate by learning the answers' prior instead of the task: on
a task whose most common answer is 22% of all answers, always writing it scores 22%. So every
task's report states the **best constant answer** beside the policy: the training split's most
common answer, always given, scored by the task's own verifier on the held-out prompts. Learning
means beating it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import NamedTuple

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
    counts = Counter(example.answer for example in train_examples)
    top = max(counts.values())
    answer = min(a for a, count in counts.items() if count == top)
    text = response(answer)
    rewards = [verifier.verify(text, example).reward for example in test_examples]
    return ConstantAnswer(answer=answer, accuracy=sum(rewards) / len(rewards))
