"""Builders: `TaskConfig` (adarl/config/tasks.py) → prompt source and held-out examples.

File sources are vetted by the task's verifier while loading (`check_gold`, adarl/reward/base.py):
pass the run's verifier as `verifier=`; without one, the registered verifier `task.verifier` with
default reward settings checks the answers. The held-out set of a file task is `task.test_path`,
or `task.test_fraction` of `task.path` (`held_out_prompt_ids`; a tenth when it is unset), or none
(`task.test_fraction=0`: an empty list).
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Sequence
from pathlib import Path

from adarl.config.seeds import seed_or_default
from adarl.config.tasks import ArithmeticConfig, TaskConfig
from adarl.reward.base import Verifier, gold_problem
from adarl.reward.registry import build_verifier
from adarl.tasks.arithmetic import (
    DEFAULT_LEVELS,
    ArithmeticLevel,
    arithmetic_test_split,
    generate_examples,
)
from adarl.tasks.files import (
    FIX_HINTS,
    FieldMapping,
    LoadedExamples,
    PromptCheck,
    load_examples,
)
from adarl.tasks.source import PromptSource
from adarl.types import TaskExample


def arithmetic_levels(config: ArithmeticConfig) -> tuple[ArithmeticLevel, ...]:
    if config.levels is None:
        return DEFAULT_LEVELS
    return tuple(
        ArithmeticLevel(
            name=level.name,
            operand_ranges=tuple((int(lo), int(hi)) for lo, hi in level.operand_ranges),
            operators=level.operators,
            weight=level.weight,
        )
        for level in config.levels
    )


@functools.cache
def _default_verifier(name: str) -> Verifier:
    # One per process and name: e.g. the math verifier's parsed-answer cache is built once.
    return build_verifier(name)


def _load(
    config: TaskConfig,
    path: str,
    verifier: Verifier | None,
    check_prompt: PromptCheck | None,
    *,
    key: str = "task.path",
) -> LoadedExamples:
    if not Path(path).exists():
        raise FileNotFoundError(
            f"{key}={path}: no such file or directory; set {key} to a .jsonl or .parquet file or "
            "a directory written by datasets' save_to_disk (a relative path is read from the "
            f"directory the run was started in, {Path.cwd()})"
        )
    checker = verifier if verifier is not None else _default_verifier(config.verifier_name)
    return load_examples(
        path,
        task=config.verifier_name,
        fields=FieldMapping(
            prompt=config.fields.prompt,
            answer=config.fields.answer,
            reference_solution=config.fields.reference_solution,
            difficulty=config.fields.difficulty,
            id=config.fields.id,
        ),
        file_format=config.source,  # type: ignore[arg-type]  # validated: a file source
        on_bad_row=config.on_bad_row,  # type: ignore[arg-type]
        max_prompt_chars=config.max_prompt_chars,
        split=config.split,
        check_answer=lambda example: gold_problem(checker, example),
        check_prompt=check_prompt,
    )


def _check_generated(
    examples: list[TaskExample], check_prompt: PromptCheck | None, source: str
) -> list[TaskExample]:
    """Generated prompts have no bad rows to skip: the first one the model cannot take stops."""
    if check_prompt is None:
        return examples
    for example in examples:
        problem = check_prompt(example)
        if problem is not None:
            raise ValueError(
                f"{source} prompt {example.prompt_id!r}: {problem[0]}: {problem[1]}. To fix: "
                f"{FIX_HINTS[problem[0]]}"
            )
    return examples


def _reasoning_gym_splits(
    config: TaskConfig, verifier: Verifier | None
) -> tuple[list[TaskExample], list[TaskExample]]:
    from adarl.reward.reasoning_gym import ReasoningGymVerifier
    from adarl.tasks.reasoning_gym import reasoning_gym_examples

    # A generator's own answer must pass the run's threshold (else the entry is dropped).
    threshold = verifier.pass_threshold if isinstance(verifier, ReasoningGymVerifier) else 1.0
    return reasoning_gym_examples(config.reasoning_gym, pass_threshold=threshold)


def held_out_prompt_ids(
    examples: Sequence[TaskExample], *, fraction: float, seed: int, source: str = "task.path"
) -> set[str]:
    """The ids of the `round(fraction * len(examples))` examples (at least one when fraction > 0)
    with the smallest sha256 of (seed, prompt text).

    A pure function of the prompts: the same in every run, and appending rows moves few prompts
    across. Examples with the same prompt text share a hash, so they land on the same side (the
    held-out set grows past the target when such a group straddles the cut) and a duplicated
    prompt never leaks from training into evaluation.
    """
    if fraction <= 0:
        return set()
    keys = {
        e.prompt_id: hashlib.sha256(f"{seed}\0{e.prompt}".encode()).hexdigest() for e in examples
    }
    target = max(1, round(fraction * len(examples)))
    cut = sorted(keys.values())[min(target, len(keys)) - 1]
    held = {prompt_id for prompt_id, key in keys.items() if key <= cut}
    if len(held) >= len(examples):
        raise ValueError(
            f"task.test_fraction={fraction} holds out all {len(examples)} usable prompts of "
            f"{source}: lower task.test_fraction, add prompts, or give task.test_path"
        )
    return held


def _file_split(
    config: TaskConfig, verifier: Verifier | None, check_prompt: PromptCheck | None
) -> tuple[LoadedExamples, set[str]]:
    """The training file, loaded, and the ids `task.test_fraction` holds out of it."""
    assert config.path is not None  # validate() checked it
    loaded = _load(config, config.path, verifier, check_prompt)
    held = held_out_prompt_ids(
        loaded.examples,
        fraction=config.held_out_fraction,
        seed=config.split_seed,
        source=config.path,
    )
    return loaded, held


def build_prompt_source(
    config: TaskConfig,
    *,
    verifier: Verifier | None = None,
    check_prompt: PromptCheck | None = None,
) -> PromptSource:
    """The training prompts of `config.source`, shuffled with `config.seed` (without the prompts
    `task.test_fraction` holds out). `len(source)` is the number of distinct training prompts.
    `verifier`: the task's verifier, which vets every answer of a file source (module docstring).
    `check_prompt`: vets every prompt as the model sees it (`adarl.rollout.codec.PromptCheck`):
    a bad row of a file source, an error for a generated task.
    """
    config.validate()
    if config.source == "arithmetic":
        arithmetic = config.arithmetic
        examples = generate_examples(
            "train",
            arithmetic.num_train_prompts,
            seed=arithmetic.seed,
            levels=arithmetic_levels(arithmetic),
            split_seed=arithmetic.split_seed,
            test_fraction=arithmetic.test_fraction,
        )
        _check_generated(examples, check_prompt, "arithmetic")
        return PromptSource(
            examples=examples,
            seed=seed_or_default(config.seed),
            shuffle=config.shuffle,
            name="arithmetic",
        )
    if config.source == "reasoning_gym":
        train, _ = _reasoning_gym_splits(config, verifier)
        return PromptSource(
            examples=_check_generated(train, check_prompt, "reasoning-gym"),
            seed=seed_or_default(config.seed),
            shuffle=config.shuffle,
            name=f"reasoning_gym/{config.reasoning_gym.name}",
        )
    loaded, held = _file_split(config, verifier, check_prompt)
    return PromptSource(
        examples=[e for e in loaded.examples if e.prompt_id not in held],
        seed=seed_or_default(config.seed),
        shuffle=config.shuffle,
        name=str(config.path),
        rows_skipped=loaded.rows_skipped,
    )


def build_test_examples(
    config: TaskConfig,
    *,
    verifier: Verifier | None = None,
    check_prompt: PromptCheck | None = None,
) -> list[TaskExample]:
    """The fixed held-out examples: the arithmetic test split, reasoning-gym's held-out entries
    (adarl/tasks/reasoning_gym.py), `config.test_path`, or the part of
    `config.path` that `config.test_fraction` holds out (in file order); an empty list when a
    file task has neither (no held-out set: report none, not an accuracy of 0). `verifier`,
    `check_prompt`: as for `build_prompt_source`."""
    config.validate()
    if config.source == "arithmetic":
        arithmetic = config.arithmetic
        examples = arithmetic_test_split(
            arithmetic.num_test_prompts,
            seed=arithmetic.test_seed,
            levels=arithmetic_levels(arithmetic),
            split_seed=arithmetic.split_seed,
            test_fraction=arithmetic.test_fraction,
        )
        return _check_generated(examples, check_prompt, "arithmetic test")
    if config.source == "reasoning_gym":
        _, test = _reasoning_gym_splits(config, verifier)
        return _check_generated(test, check_prompt, "reasoning-gym test")
    if config.test_path is not None:
        return _load(
            config, config.test_path, verifier, check_prompt, key="task.test_path"
        ).examples
    if config.held_out_fraction <= 0:
        return []
    loaded, held = _file_split(config, verifier, check_prompt)
    return [e for e in loaded.examples if e.prompt_id in held]
