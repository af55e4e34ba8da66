"""Supervised data that teaches the built-in tiny model the two hint formats (adarl/models/tiny.py
trains them alongside the task's (prompt, answer) pairs, `AuxiliaryPairs`):

* hinted task rows, so that a hinted prompt is something the policy has seen:
  `47*38=[47*30=1410]` → `1786`, at a level drawn uniformly among the example's usable ones;
* hint-mode rows, from the reference solution to the three levels in one answer:
  `hint:47*38=(47*30=1410,47*8=376,1410+376=1786)` → `1[47*30]2[47*30=1410]3[...]`.

Both come from i.i.d. train-split draws of the arithmetic task (a seed apart from the task
pairs'), from the template levels of adarl/hints/arithmetic.py. Examples without usable levels
(one-step problems that do not split) give no hinted row; hint-mode rows need all three levels.
"""

from __future__ import annotations

import hashlib
import inspect
from typing import TYPE_CHECKING

import numpy as np

from adarl.hints.format import hint_prompt, render_hint, render_levels
from adarl.hints.template import hint_mode_solution, template_levels
from adarl.types import TaskExample

if TYPE_CHECKING:
    from adarl.models.tiny import AuxiliaryPairs

Pair = tuple[str, str]
# Hint rows per warm-start step, hinted task rows and hint-mode rows mixed about half and half
# in one auxiliary loss term (the task pairs keep their own). Measured at 300 steps (the
# embedded default): greedy hint-mode output parses ~99% of the time and the unhinted pass
# rate does not fall; separate loss terms per kind (32 + 16 rows) lowered it (docs/benchmarks.md
# "Hints"). The warm start costs about 3x the task pairs' alone.
HINT_ROWS_PER_STEP = 32


def hinted_task_pair(example: TaskExample, rng: np.random.Generator) -> Pair | None:
    """(prompt + shown hint, answer) at a uniformly drawn usable level; None if it has none."""
    usable = {k: v for k, v in template_levels(example).items() if v is not None}
    if not usable:
        return None
    level = sorted(usable)[int(rng.integers(len(usable)))]
    return example.prompt + render_hint(usable[level]), example.answer


def hint_mode_pair(example: TaskExample) -> Pair | None:
    """(hint-mode prompt, `1[..]2[..]3[..]`); None unless all three levels are usable."""
    levels = template_levels(example)
    if any(content is None for content in levels.values()):
        return None
    usable = {level: content for level, content in levels.items() if content is not None}
    return hint_prompt(example.prompt, hint_mode_solution(example)), render_levels(usable)


def hint_warm_start_pairs(
    examples: list[TaskExample], *, seed: int
) -> tuple[list[Pair], list[Pair]]:
    """(hinted task rows, hint-mode rows) made from `examples`, each example used for both."""
    rng = np.random.default_rng([seed, 4111])
    hinted, mode = [], []
    for example in examples:
        if (pair := hinted_task_pair(example, rng)) is not None:
            hinted.append(pair)
        if (pair := hint_mode_pair(example)) is not None:
            mode.append(pair)
    return hinted, mode


def arithmetic_hint_auxiliary(sft_steps: int, *, seed: int) -> list[AuxiliaryPairs]:
    """The hint formats as one auxiliary warm-start set: `HINT_ROWS_PER_STEP` rows per step,
    made from `sft_steps * HINT_ROWS_PER_STEP / 2` fresh train-split draws (each gives up to
    one row of each kind). No steps, no set."""
    from adarl.models.tiny import AuxiliaryPairs
    from adarl.tasks.arithmetic import sample_examples

    if sft_steps < 1:
        return []
    examples = sample_examples("train", sft_steps * HINT_ROWS_PER_STEP // 2, seed=seed + 1)
    hinted, mode = hint_warm_start_pairs(examples, seed=seed)
    return [AuxiliaryPairs("hints", [*hinted, *mode], HINT_ROWS_PER_STEP)]


def hint_data_fingerprint() -> str:
    """Changes whenever the hint rows would (part of the tiny model's cache key): the source of
    the modules that make them and the row count per step."""
    from adarl.hints import arithmetic, format, template

    digest = hashlib.sha256(str(HINT_ROWS_PER_STEP).encode())
    for module in (arithmetic, format, template):
        digest.update(inspect.getsource(module).encode())
    digest.update(inspect.getsource(hint_warm_start_pairs).encode())
    digest.update(inspect.getsource(hinted_task_pair).encode())
    digest.update(inspect.getsource(hint_mode_pair).encode())
    return "hints:" + digest.hexdigest()[:16]
