"""The built-in arithmetic task: integer expressions for a tiny character-level model.

An example is `prompt="12+7-3="`, `answer="16"`, `reference_solution="12+7=19,19-3=16"` (one
`a<op>b=c` step per operation, in evaluation order: `*` first, then `+`/`-` left to right).
Every character of prompts, answers and solutions is in `ALPHABET` (no spaces: a character-level
tokenizer saved next to a Qwen2 config may drop them). Values are non-negative integers:
expressions whose value is negative are resampled. The response format expected by the
`arithmetic` verifier is the answer digits followed by end-of-sequence.

Difficulty comes in levels (`ArithmeticLevel`): the range of each operand and the operators
allowed. `TaskExample.difficulty` is the level's index in the mix. `DEFAULT_LEVELS` is calibrated
so that a tiny transformer warm-started by ~45 s of SFT on the train split masters the first
levels, partly masters the middle ones and rarely solves the last ones (measured pass rates in
docs/tasks_and_rewards.md).

Splits are a pure function of the prompt text: a prompt is in the test split iff a hash of
`(split_seed, prompt)` falls below `test_fraction`. Train and test are therefore disjoint whatever
the sizes and sampling seeds, and the same prompt is always in the same split.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal

import numpy as np

from adarl.tasks.source import PromptSource
from adarl.types import TaskExample

Split = Literal["train", "test"]

ALPHABET: Final = "0123456789+-*=,"  # every character a prompt, answer or solution can contain
TASK_NAME: Final = "arithmetic"  # TaskExample.task: the verifier that scores these examples
OPERATORS: Final = "+-*"
MAX_OPERAND_DIGITS: Final = 4
DEFAULT_SPLIT_SEED: Final = 0
DEFAULT_TEST_FRACTION: Final = 0.2
DEFAULT_TEST_SEED: Final = 1234
_ENUMERATE_LIMIT: Final = 200_000  # levels with at most this many expressions are enumerated


def digits(count: int) -> tuple[int, int]:
    """The inclusive range of `count`-digit operands: 1 digit = 0..9, d > 1 = 10^(d-1)..10^d-1."""
    if not 1 <= count <= MAX_OPERAND_DIGITS:
        raise ValueError(f"operands have 1..{MAX_OPERAND_DIGITS} digits, got {count}")
    return (0, 9) if count == 1 else (10 ** (count - 1), 10**count - 1)


@dataclass(frozen=True)
class ArithmeticLevel:
    """One difficulty level: operand `i` is drawn uniformly from the inclusive range
    `operand_ranges[i]`, each operator uniformly from `operators`; `weight` is the level's share
    of the mix (normalised over the levels)."""

    name: str
    operand_ranges: tuple[tuple[int, int], ...]
    operators: str
    weight: float

    def __post_init__(self) -> None:
        if len(self.operand_ranges) < 2:
            raise ValueError(f"arithmetic level {self.name!r}: needs at least 2 operands")
        for low, high in self.operand_ranges:
            if not 0 <= low <= high < 10**MAX_OPERAND_DIGITS:
                raise ValueError(
                    f"arithmetic level {self.name!r}: operand range ({low}, {high}) must satisfy "
                    f"0 <= low <= high < {10**MAX_OPERAND_DIGITS}"
                )
        if not self.operators or set(self.operators) - set(OPERATORS):
            raise ValueError(
                f"arithmetic level {self.name!r}: operators {self.operators!r} must be a non-empty "
                f"subset of {OPERATORS!r}"
            )
        if not self.weight > 0:
            raise ValueError(f"arithmetic level {self.name!r}: weight must be > 0")

    @property
    def space_size(self) -> int:
        """Number of distinct expressions (before the non-negative filter)."""
        values = math.prod(high - low + 1 for low, high in self.operand_ranges)
        return values * len(self.operators) ** (len(self.operand_ranges) - 1)


# The documented default mix (see docs/tasks_and_rewards.md for the pass rates it produces).
DEFAULT_LEVELS: Final[tuple[ArithmeticLevel, ...]] = (
    ArithmeticLevel("3d+-0", (digits(3), (0, 0)), "+-", weight=0.1),
    ArithmeticLevel("3d*1", (digits(3), (1, 1)), "*", weight=0.05),
    ArithmeticLevel("3d+-1", (digits(3), (1, 1)), "+-", weight=0.1),
    ArithmeticLevel("2d+1d", (digits(2), digits(1)), "+", weight=0.2),
    ArithmeticLevel("2d+-2d", (digits(2), digits(2)), "+-", weight=0.15),
    ArithmeticLevel("1d+-1d+-1d", (digits(1), digits(1), digits(1)), "+-", weight=0.1),
    ArithmeticLevel("2d*1d", (digits(2), digits(1)), "*", weight=0.15),
    ArithmeticLevel("2d*2d", (digits(2), digits(2)), "*", weight=0.15),
)


def evaluate(operands: Sequence[int], operators: Sequence[str]) -> tuple[int, list[str]]:
    """Value of `o0 op0 o1 op1 ...` with the usual precedence, and its steps `a<op>b=c`."""
    if len(operators) != len(operands) - 1:
        raise ValueError(f"{len(operands)} operands need {len(operands) - 1} operators")
    values, ops, steps = list(operands), list(operators), []
    i = 0
    while i < len(ops):  # multiplications first, left to right
        if ops[i] == "*":
            product = values[i] * values[i + 1]
            steps.append(f"{values[i]}*{values[i + 1]}={product}")
            values[i : i + 2] = [product]
            del ops[i]
        else:
            i += 1
    result = values[0]
    for op, value in zip(ops, values[1:], strict=True):
        new = result + value if op == "+" else result - value
        steps.append(f"{result}{op}{value}={new}")
        result = new
    return result, steps


def render(operands: Sequence[int], operators: Sequence[str]) -> str:
    """`render([12, 7, 3], "+-") == "12+7-3="`."""
    parts = [str(operands[0])]
    for op, value in zip(operators, operands[1:], strict=True):
        parts.append(f"{op}{value}")
    return "".join(parts) + "="


def split_of(
    prompt: str,
    *,
    split_seed: int = DEFAULT_SPLIT_SEED,
    test_fraction: float = DEFAULT_TEST_FRACTION,
) -> Split:
    """The split a prompt belongs to: a hash of (split_seed, prompt) below `test_fraction`."""
    digest = hashlib.sha256(f"{split_seed}\0{prompt}".encode()).digest()
    return "test" if int.from_bytes(digest[:8], "big") < test_fraction * 2**64 else "train"


def make_example(
    operands: Sequence[int], operators: Sequence[str], *, difficulty: float
) -> TaskExample:
    prompt = render(operands, operators)
    result, steps = evaluate(operands, operators)
    return TaskExample(
        prompt_id=f"{TASK_NAME}/{prompt}",  # prompts are unique within a task: stable ids
        prompt=prompt,
        answer=str(result),
        reference_solution=",".join(steps),
        difficulty=difficulty,
        task=TASK_NAME,
    )


def _random_expression(
    level: ArithmeticLevel, rng: np.random.Generator
) -> tuple[list[int], list[str]]:
    operands = [int(rng.integers(low, high + 1)) for low, high in level.operand_ranges]
    operators = [level.operators[int(rng.integers(len(level.operators)))] for _ in operands[1:]]
    return operands, operators


def level_counts(levels: Sequence[ArithmeticLevel], num_examples: int) -> list[int]:
    """How many of `num_examples` examples each level gets: proportional to the weights, rounded
    by largest remainder (this is the documented mix)."""
    total = sum(level.weight for level in levels)
    exact = [level.weight / total * num_examples for level in levels]
    counts = [math.floor(x) for x in exact]
    by_remainder = sorted(range(len(levels)), key=lambda i: (counts[i] - exact[i], i))
    for i in by_remainder[: num_examples - sum(counts)]:
        counts[i] += 1
    return counts


def _in_split(
    operands: Sequence[int],
    operators: Sequence[str],
    split: Split,
    split_seed: int,
    test_fraction: float,
) -> bool:
    """In `split`, and with a non-negative value (the task's only other constraint)."""
    prompt = render(operands, operators)
    in_split = split_of(prompt, split_seed=split_seed, test_fraction=test_fraction) == split
    return in_split and evaluate(operands, operators)[0] >= 0


@functools.lru_cache(maxsize=64)
def _enumerate_level(
    level: ArithmeticLevel, split: Split, split_seed: int, test_fraction: float
) -> tuple[tuple[tuple[int, ...], tuple[str, ...]], ...]:
    """Every valid expression of a small level in `split`, in a fixed order (cached: the hash
    per expression dominates generation time)."""
    return tuple(
        (operands, operators)
        for operands in itertools.product(*(range(lo, hi + 1) for lo, hi in level.operand_ranges))
        for operators in itertools.product(level.operators, repeat=len(operands) - 1)
        if _in_split(operands, operators, split, split_seed, test_fraction)
    )


def _unique_level_examples(
    level: ArithmeticLevel,
    difficulty: float,
    count: int,
    split: Split,
    rng: np.random.Generator,
    split_seed: int,
    test_fraction: float,
) -> list[TaskExample]:
    if level.space_size <= _ENUMERATE_LIMIT:
        # Small level: enumerate every valid expression of the split and draw without replacement.
        candidates = _enumerate_level(level, split, split_seed, test_fraction)
        if count > len(candidates):
            raise ValueError(
                f"arithmetic level {level.name!r} has only {len(candidates)} distinct {split} "
                f"prompts but {count} were requested; lower the number of prompts or this "
                "level's weight"
            )
        chosen = rng.permutation(len(candidates))[:count]
        return [make_example(*candidates[i], difficulty=difficulty) for i in sorted(chosen)]

    examples: dict[str, TaskExample] = {}
    max_draws = 50 * count + 1000
    for _ in range(max_draws):
        if len(examples) == count:
            break
        operands, operators = _random_expression(level, rng)
        if _in_split(operands, operators, split, split_seed, test_fraction):
            example = make_example(operands, operators, difficulty=difficulty)
            examples.setdefault(example.prompt, example)
    if len(examples) < count:
        raise ValueError(
            f"arithmetic level {level.name!r}: found only {len(examples)} distinct {split} prompts "
            f"in {max_draws} draws ({count} requested); lower the number of prompts"
        )
    return list(examples.values())


def generate_examples(
    split: Split,
    num_examples: int,
    *,
    seed: int,
    levels: Sequence[ArithmeticLevel] = DEFAULT_LEVELS,
    split_seed: int = DEFAULT_SPLIT_SEED,
    test_fraction: float = DEFAULT_TEST_FRACTION,
) -> list[TaskExample]:
    """`num_examples` distinct prompts of `split`, levels in the proportions of their weights
    (`level_counts`), in a seeded shuffled order. Deterministic in all arguments."""
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    if not 0 < test_fraction < 1:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
    if not levels:
        raise ValueError("arithmetic task needs at least one level")
    split_code = 0 if split == "train" else 1
    examples: list[TaskExample] = []
    for index, (level, count) in enumerate(
        zip(levels, level_counts(levels, num_examples), strict=True)
    ):
        rng = np.random.default_rng([seed, split_code, index])
        examples += _unique_level_examples(
            level, float(index), count, split, rng, split_seed, test_fraction
        )
    order = np.random.default_rng([seed, split_code, len(levels)]).permutation(len(examples))
    return [examples[i] for i in order]


def sample_examples(
    split: Split,
    num_examples: int,
    *,
    seed: int,
    levels: Sequence[ArithmeticLevel] = DEFAULT_LEVELS,
    split_seed: int = DEFAULT_SPLIT_SEED,
    test_fraction: float = DEFAULT_TEST_FRACTION,
) -> list[TaskExample]:
    """i.i.d. draws (repeats allowed) from `split`: level by weight, then a uniform expression of
    that level (re-drawn until it is in `split` and non-negative). For supervised warm-start data,
    where more examples than distinct prompts of the small levels are wanted. Prefix-stable:
    `sample_examples(s, n)[:m] == sample_examples(s, m)`."""
    rng = np.random.default_rng([seed, 0 if split == "train" else 1, 7919])
    weights = np.array([level.weight for level in levels], dtype=float)
    cumulative = np.cumsum(weights / weights.sum())
    examples = []
    for _ in range(num_examples):  # one example at a time: a longer sample extends a shorter one
        index = min(int(np.searchsorted(cumulative, rng.random(), side="right")), len(levels) - 1)
        while True:
            operands, operators = _random_expression(levels[index], rng)
            if _in_split(operands, operators, split, split_seed, test_fraction):
                examples.append(make_example(operands, operators, difficulty=float(index)))
                break
    return examples


def arithmetic_test_split(
    num_examples: int = 256,
    *,
    seed: int = DEFAULT_TEST_SEED,
    levels: Sequence[ArithmeticLevel] = DEFAULT_LEVELS,
    split_seed: int = DEFAULT_SPLIT_SEED,
    test_fraction: float = DEFAULT_TEST_FRACTION,
) -> list[TaskExample]:
    """The fixed held-out evaluation set (defaults give the same prompts in every run)."""
    return generate_examples(
        "test",
        num_examples,
        seed=seed,
        levels=levels,
        split_seed=split_seed,
        test_fraction=test_fraction,
    )


def arithmetic_prompt_source(
    num_examples: int = 1024,
    *,
    seed: int = 0,
    shuffle_seed: int | None = None,
    levels: Sequence[ArithmeticLevel] = DEFAULT_LEVELS,
    split_seed: int = DEFAULT_SPLIT_SEED,
    test_fraction: float = DEFAULT_TEST_FRACTION,
) -> PromptSource:
    """The training prompts: `num_examples` distinct train-split prompts (drawn with `seed`),
    served by a `PromptSource` shuffled with `shuffle_seed` (default: `seed`)."""
    examples = generate_examples(
        "train",
        num_examples,
        seed=seed,
        levels=levels,
        split_seed=split_seed,
        test_fraction=test_fraction,
    )
    return PromptSource(
        examples=examples,
        seed=seed if shuffle_seed is None else shuffle_seed,
        name=TASK_NAME,
    )
