"""Supervised data that teaches the built-in tiny model the two hint formats
(adarl/models/loading.py feeds them to the warm start of adarl/models/tiny.py). Here, not in
adarl/hints: the tiny model is built on these rows, so models → hints, and hints import neither
models nor rollout (whose engines load the tiny model).

* hinted task rows, so that a hinted prompt is something the policy has seen:
  `47*38=[47*30=1410]` → `1786`, at a level drawn uniformly among the example's usable ones.
  A share (`model.tiny.sft_hinted_share`) of the task pairs is shown this way instead of bare
  (same loss term, same number of pairs);
* hint-mode rows, from the reference solution to the three levels in one answer:
  `hint:47*38=(47*30=1410,47*8=376,1410+376=1786)` → `1[47*30]2[47*30=1410]3[...]`, an
  auxiliary set of `HINT_MODE_ROWS_PER_STEP` rows per step with its own loss term
  (`AuxiliaryPairs`), drawn from train-split examples a seed apart from the task pairs'.

The response is the answer, or with `model.tiny.sft_response=worked` the worked solution
(`47*30=1410,47*8=376,1410+376=1786`) bare and hinted alike: a hint is then a prefix of what the
policy writes, and it can copy the steps it is given instead of computing them.

Levels come from the template (adarl/hints/template.py). Examples without usable levels
(one-step problems that do not split) stay bare; hint-mode rows need all three levels.

Why these numbers (docs/benchmarks.md "Hint formats on the tiny model"): at the embedded
default's 300 steps, a quarter of the task pairs hinted keeps the unhinted pass rate where the
plain warm start has it and makes hinted prompts about as solvable as bare ones; hinted rows
trained only as a small auxiliary term left hinted prompts much harder than bare ones, and half
of the task pairs hinted lowered the unhinted pass rate by a quarter.
"""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from adarl.hints.arithmetic import worked_solution
from adarl.hints.format import hint_prompt, render_hint, render_levels
from adarl.hints.template import hint_mode_solution, template_levels
from adarl.types import TaskExample

if TYPE_CHECKING:
    from adarl.models.tiny import AuxiliaryPairs

Pair = tuple[str, str]
HINT_MODE_ROWS_PER_STEP = 16


def response_text(example: TaskExample, *, worked: bool, steps: bool = False) -> str:
    """What the policy is taught to write: the answer, the worked solution ending in it, or
    (`steps`) the reference solution's steps as given, one per operation in evaluation order
    (`12+7=19,19+3=22`: no place-value split of a one-step problem)."""
    if steps:
        return example.reference_solution or example.answer
    return worked_solution(example) if worked else example.answer


def prefix_hinted_pair(example: TaskExample, rng: np.random.Generator) -> Pair | None:
    """(prompt + the first j of its n reference steps as a hint, all n steps), j uniform in
    1..n-2: the warm start's only view of a level it never shows whole
    (`model.tiny.sft_hinted_levels`); None for a solution of fewer than 3 steps."""
    steps = (example.reference_solution or "").split(",")
    if len(steps) < 3:
        return None
    shown = int(rng.integers(1, len(steps) - 1))
    return example.prompt + render_hint(",".join(steps[:shown])), ",".join(steps)


def hinted_task_pair(
    example: TaskExample, rng: np.random.Generator, *, worked: bool = False, steps: bool = False
) -> Pair | None:
    """(prompt + shown hint, response) at a uniformly drawn usable level; None if it has none."""
    usable = {k: v for k, v in template_levels(example).items() if v is not None}
    if not usable:
        return None
    level = sorted(usable)[int(rng.integers(len(usable)))]
    response = response_text(example, worked=worked, steps=steps)
    return example.prompt + render_hint(usable[level]), response


def hint_mode_pair(example: TaskExample) -> Pair | None:
    """(hint-mode prompt, `1[..]2[..]3[..]`); None unless all three levels are usable."""
    levels = template_levels(example)
    if any(content is None for content in levels.values()):
        return None
    usable = {level: content for level, content in levels.items() if content is not None}
    return hint_prompt(example.prompt, hint_mode_solution(example)), render_levels(usable)


def task_pairs_with_hints(
    examples: Sequence[TaskExample],
    *,
    share: float,
    seed: int,
    worked: bool = False,
    steps: bool = False,
    prefix_hinted_levels: frozenset[float] = frozenset(),
) -> list[Pair]:
    """One (prompt, response) pair per example, in order; each example is shown hinted with
    probability `share` (when it has a usable level), else bare. The response is the answer, the
    worked solution with `worked`, or the reference steps with `steps`. An example whose
    difficulty is in `prefix_hinted_levels` is never shown whole: always with a prefix of its
    steps as the hint (`prefix_hinted_pair`; dropped if it has fewer than 3 steps)."""
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"hinted share must be in [0, 1], got {share}")
    rng = np.random.default_rng([seed, 4111])
    prefix_rng = np.random.default_rng([seed, 4127])  # the other pairs draw as they always did
    pairs = []
    for example in examples:
        if example.difficulty in prefix_hinted_levels:
            pair = prefix_hinted_pair(example, prefix_rng)
            if pair is not None:
                pairs.append(pair)
            continue
        hinted = (
            hinted_task_pair(example, rng, worked=worked, steps=steps)
            if rng.random() < share
            else None
        )
        pairs.append(hinted or (example.prompt, response_text(example, worked=worked, steps=steps)))
    return pairs


def arithmetic_hint_mode_auxiliary(sft_steps: int, *, seed: int) -> list[AuxiliaryPairs]:
    """The hint-mode rows as one auxiliary warm-start set, `HINT_MODE_ROWS_PER_STEP` per step,
    from `sft_steps * HINT_MODE_ROWS_PER_STEP` fresh train-split draws (those with all three
    levels usable). No steps, no set."""
    from adarl.models.tiny import AuxiliaryPairs
    from adarl.tasks.arithmetic import sample_examples

    if sft_steps < 1:
        return []
    examples = sample_examples("train", sft_steps * HINT_MODE_ROWS_PER_STEP, seed=seed + 1)
    rows = [pair for example in examples if (pair := hint_mode_pair(example)) is not None]
    return [AuxiliaryPairs("hint_mode", rows, HINT_MODE_ROWS_PER_STEP)]


def hint_data_fingerprint() -> str:
    """Changes whenever the hint rows would (part of the tiny model's cache key): the source of
    the modules and functions that make them, and the hint-mode rows per step (the hinted share
    and the response format are model.tiny keys, hashed with the rest of the config)."""
    from adarl.hints import arithmetic, format, template

    digest = hashlib.sha256(f"{HINT_MODE_ROWS_PER_STEP}".encode())
    for module in (arithmetic, format, template):
        digest.update(inspect.getsource(module).encode())
    for function in (
        response_text,
        hinted_task_pair,
        prefix_hinted_pair,
        hint_mode_pair,
        task_pairs_with_hints,
        arithmetic_hint_mode_auxiliary,
    ):
        digest.update(inspect.getsource(function).encode())
    return "hints:" + digest.hexdigest()[:16]
