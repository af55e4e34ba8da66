"""Hint levels of the built-in arithmetic task, derived from its reference solution.

The task's reference solution lists one `a<op>b=c` step per operation (`12+7=19,19-3=16`). The
hint levels are read off the *worked* steps:

* a solution of two or more steps is worked as given;
* a one-step solution (`47*38=1786`) holds no intermediate result that is not the answer, so it
  is worked by place value (`place_value_steps`): the column method for `+`, tens then units
  for `-`, one partial product per part of the split operand for `*`.

Then, with `s_1 .. s_k` the worked steps (k ≥ 2):

    ℓ1  the first step's operation            47*30
    ℓ2  the first step with its value         47*30=1410
    ℓ3  every step, the last value left out   47*30=1410,47*8=376,1410+376=

No level states the final answer: a level that would contain it (as a whole number the prompt
does not already show) is unusable (`adarl.hints.format.leaks_answer`), and so is every level of
a problem that stays a single step (`5+3`: each level would repeat the prompt or reveal the
answer).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from adarl.types import TaskExample

_STEP = re.compile(r"^(-?\d+)([+\-*])(\d+)=(-?\d+)$")


@dataclass(frozen=True)
class Step:
    """One `left<op>right=value` step of a worked solution."""

    left: int
    op: str
    right: int
    value: int

    @property
    def operation(self) -> str:
        return f"{self.left}{self.op}{self.right}"

    def __str__(self) -> str:
        return f"{self.operation}={self.value}"


def _step(left: int, op: str, right: int) -> Step:
    value = left + right if op == "+" else left - right if op == "-" else left * right
    return Step(left, op, right, value)


def parse_steps(reference_solution: str) -> list[Step]:
    """`"12+7=19,19-3=16"` → its steps; ValueError naming the bad step otherwise."""
    steps = []
    for text in reference_solution.split(","):
        match = _STEP.match(text)
        if match is None:
            raise ValueError(
                f"arithmetic reference solution {reference_solution!r}: step {text!r} is not "
                "'a<op>b=c' with op in +-*; arithmetic solutions are comma-separated such steps"
            )
        left, op, right, value = int(match[1]), match[2], int(match[3]), int(match[4])
        if _step(left, op, right).value != value:
            raise ValueError(
                f"arithmetic reference solution {reference_solution!r}: step {text!r} is wrong"
            )
        steps.append(Step(left, op, right, value))
    return steps


def _split(number: int) -> tuple[int, int] | None:
    """(high part, units) with both nonzero, e.g. 47 → (40, 7); None when one part is 0."""
    high, units = number - number % 10, number % 10
    return (high, units) if high and units else None


def place_value_steps(step: Step) -> list[Step]:
    """One step worked by place value, or `[step]` when neither operand splits.

    `+`: units first, then tens, then combine (column addition): 47+38 → 7+8=15,40+30=70,
    70+15=85; 45+7 → 5+7=12,40+12=52.
    `-`: subtract the right operand's tens, then its units: 47-38 → 47-30=17,17-8=9; with a
    one-part right operand split the left one: 45-7 → 40-7=33,33+5=38.
    `*`: one partial product per part of the right operand (else the left), then their sum:
    47*38 → 47*30=1410,47*8=376,1410+376=1786.
    """
    a, op, b = step.left, step.op, step.right
    a_parts, b_parts = _split(a), _split(b)
    if op == "+":
        if a_parts and b_parts:
            units, tens = _step(a_parts[1], "+", b_parts[1]), _step(a_parts[0], "+", b_parts[0])
            return [units, tens, _step(tens.value, "+", units.value)]
        if a_parts or b_parts:
            (high, units), other = (a_parts, b) if a_parts else (b_parts, a)  # type: ignore[misc]
            first = _step(units, "+", other)
            return [first, _step(high, "+", first.value)]
    elif op == "-":
        if b_parts:
            first = _step(a, "-", b_parts[0])
            return [first, _step(first.value, "-", b_parts[1])]
        if a_parts and a_parts[0] >= b:
            first = _step(a_parts[0], "-", b)
            return [first, _step(first.value, "+", a_parts[1])]
    else:
        parts = [(a, part) for part in b_parts] if b_parts else None
        if parts is None and a_parts:
            parts = [(part, b) for part in a_parts]
        if parts:
            products = [_step(x, "*", y) for x, y in parts]
            return [*products, _step(products[0].value, "+", products[1].value)]
    return [step]


def worked_steps(example: TaskExample) -> list[Step]:
    """The worked steps hint levels are read from (module docstring)."""
    if not example.reference_solution:
        raise ValueError(
            f"arithmetic example {example.prompt_id!r} has no reference_solution; the hint "
            "generator derives hints from it"
        )
    steps = parse_steps(example.reference_solution)
    if str(steps[-1].value) != example.answer.strip():
        raise ValueError(
            f"arithmetic example {example.prompt_id!r}: the reference solution ends at "
            f"{steps[-1].value} but the answer is {example.answer!r}"
        )
    return place_value_steps(steps[0]) if len(steps) == 1 else steps


def worked_solution(example: TaskExample) -> str:
    """`worked_steps` as text: the reference solution the hint mode is shown."""
    return ",".join(str(step) for step in worked_steps(example))


def arithmetic_levels(example: TaskExample) -> dict[int, str | None]:
    """Level → hint content (None: no usable content at that level), before the leak check."""
    steps = worked_steps(example)
    if len(steps) < 2:
        return {1: None, 2: None, 3: None}
    *head, last = steps
    return {
        1: steps[0].operation,
        2: str(steps[0]),
        3: ",".join([*(str(step) for step in head), f"{last.operation}="]),
    }
