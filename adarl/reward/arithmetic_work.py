"""The built-in arithmetic task's worked responses: the answer is scored, the work is counted.

A policy taught to write its steps (`model.tiny.sft_response=steps`: `47+38=85,85+15=100`) gets
an outcome reward: the answer after the last "=" (the whole response when it has none: the
prompt ends with "=") against the example's, whatever the work before it. Work that does not
compute the prompt still scores 1 when its answer is right, as in real RL;
`ArithmeticWorkVerifier` says so in the result (`VerifierResult.malformed_work`), and the reward
pool counts it (`sampling/reward_malformed_correct`).

Valid work (`work_problem`) is every way to compute the prompt's value by its steps: each step
`a<op>b=c` is correct arithmetic and takes its operands from what is available (the prompt's
operands and the values of earlier steps, each used once), and the steps use every operand and
leave one value. For a sum that is any order and any grouping of the additions
(`12+7=19,19+3=22`, `7+3=10,12+10=22`, `3+12=15,15+7=22`): the task's several valid solutions,
of which the warm start teaches one (left to right). For `+`/`-`/`*` mixes it accepts any
computation of the operands with the operators the steps name; the answer check still decides
the reward.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

from adarl.reward.base import VerifierResult
from adarl.reward.exact import DEFAULT_END_MARKERS, ExactMatchVerifier
from adarl.types import TaskExample

_STEP = re.compile(r"^(\d+)([+\-*])(\d+)=(-?\d+)$")
_OPERAND = re.compile(r"\d+")


def _value(left: int, op: str, right: int) -> int:
    return left + right if op == "+" else left - right if op == "-" else left * right


def work_problem(work: str, prompt: str) -> str | None:
    """Why `work` (the response up to its end, e.g. `12+7=19,19+3=22`) does not compute the
    arithmetic `prompt` (`12+7+3=`) step by step, or None when it does (module docstring)."""
    available = Counter(int(x) for x in _OPERAND.findall(prompt.rstrip("=")))
    if not work:
        return "no steps"
    steps = work.split(",")
    if sum(available.values()) == 1:
        return None if len(steps) == 1 and steps[0].isdigit() else "steps for a single number"
    for index, text in enumerate(steps):
        match = _STEP.match(text)
        if match is None:
            return f"step {index + 1} {text!r} is not 'a<op>b=c'"
        left, op, right, value = int(match[1]), match[2], int(match[3]), int(match[4])
        if _value(left, op, right) != value:
            return f"step {index + 1} {text!r} is wrong arithmetic"
        for operand in (left, right):
            if available[operand] < 1:
                return f"step {index + 1} {text!r} uses {operand}, which is not available"
            available[operand] -= 1
        available[value] += 1
    left_over = +available
    if sum(left_over.values()) != 1:
        return f"the steps leave {sorted(left_over.elements())}, not one value"
    return None


class ArithmeticWorkVerifier(ExactMatchVerifier):
    """Exact match of the answer after the last "=" (end markers as `ExactMatchVerifier`'s),
    and the work checked and reported (`VerifierResult.malformed_work`) without changing the
    reward."""

    def __init__(self, *, end_markers: Sequence[str] = DEFAULT_END_MARKERS) -> None:
        super().__init__(end_markers=end_markers, answer_marker="=")

    def extract_answer(self, response: str) -> str:
        """What follows the last "=", or the whole response when it has none (the prompt ends
        with "=": a bare answer is an answer, its work missing)."""
        return self.work(response).rpartition("=")[2].strip()

    def verify(self, response: str, example: TaskExample) -> VerifierResult:
        if self.extract_answer(response) != example.answer.strip():
            return VerifierResult(reward=0.0)
        problem = work_problem(self.work(response), example.prompt)
        return VerifierResult(reward=1.0, malformed_work=problem is not None)

    def work(self, response: str) -> str:
        """The response up to its first end marker, stripped."""
        end = min([len(response)] + [i for m in self.end_markers if (i := response.find(m)) != -1])
        return response[:end].strip()
