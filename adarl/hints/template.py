"""Deterministic hint levels from an example's reference solution (the `template` source), and
the solution text the hint mode is shown (the `self` and `model` sources).

Arithmetic examples use the worked steps of adarl/hints/arithmetic.py. Any other task, and an
arithmetic-scored file task whose solution is not in the built-in step format, falls back
to a coarse split of its reference solution into steps (its lines, else its sentences):
ℓ1 the first step, ℓ2 the first half of the steps, ℓ3 every step but the last. A task with a
better notion of levels gets its own module, like arithmetic.

Every level passes the leak check (`adarl.hints.format.leaks_answer`) or is unusable.
"""

from __future__ import annotations

import math
import re

from adarl.hints.arithmetic import arithmetic_levels, worked_solution
from adarl.hints.format import leaks_answer
from adarl.types import TaskExample

ARITHMETIC_TASK = "arithmetic"  # TaskExample.task of the built-in task (adarl/tasks/arithmetic.py)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def _text_steps(solution: str) -> list[str]:
    lines = [line.strip() for line in solution.splitlines() if line.strip()]
    if len(lines) >= 2:
        return lines
    return [part.strip() for part in _SENTENCE_END.split(solution.strip()) if part.strip()]


def _text_levels(solution: str) -> dict[int, str | None]:
    steps = _text_steps(solution)
    if len(steps) < 2:
        return {1: None, 2: None, 3: None}
    join = "\n".join if "\n" in solution.strip() else " ".join
    return {
        1: steps[0],
        2: join(steps[: math.ceil(len(steps) / 2)]),
        3: join(steps[:-1]),
    }


def _raw_levels(example: TaskExample) -> dict[int, str | None]:
    solution = _require_solution(example)
    if example.task == ARITHMETIC_TASK:
        try:
            return arithmetic_levels(example)
        except ValueError:
            pass  # not in the built-in task's step format (a file task): split it as text
    return _text_levels(solution)


def _require_solution(example: TaskExample) -> str:
    if not example.reference_solution:
        raise ValueError(
            f"example {example.prompt_id!r} has no reference_solution, which hints are derived "
            "from; give the task a reference_solution column (task.fields.reference_solution) "
            "or keep hints.schedule=off"
        )
    return example.reference_solution


def template_levels(example: TaskExample) -> dict[int, str | None]:
    """Level → usable hint content (None: unusable there: absent, or it leaks the answer)."""
    return {
        level: None
        if content is None or leaks_answer(content, answer=example.answer, prompt=example.prompt)
        else content
        for level, content in _raw_levels(example).items()
    }


def template_unusable_reason(example: TaskExample, level: int) -> str:
    """Why `template_levels(example)[level]` is None, for `Hint.error`."""
    if _raw_levels(example)[level] is None:
        return (
            f"the reference solution of {example.prompt_id!r} has a single step: a level-{level} "
            "hint would repeat the prompt or state the answer"
        )
    return f"the level-{level} template hint of {example.prompt_id!r} states the answer"


def hint_mode_solution(example: TaskExample) -> str:
    """The reference solution as the hint mode sees it: arithmetic's worked steps (a one-step
    solution is worked by place value, adarl/hints/arithmetic.py), else the solution as given."""
    solution = _require_solution(example)
    if example.task == ARITHMETIC_TASK:
        try:
            return worked_solution(example)
        except ValueError:
            pass  # not in the built-in task's step format: shown as given
    return solution
