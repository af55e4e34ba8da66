"""Builders: `TaskConfig` (adarl/config/tasks.py) → prompt source and held-out examples."""

from __future__ import annotations

from adarl.config.seeds import seed_or_default
from adarl.config.tasks import ArithmeticConfig, TaskConfig
from adarl.tasks.arithmetic import (
    DEFAULT_LEVELS,
    ArithmeticLevel,
    arithmetic_test_split,
    generate_examples,
)
from adarl.tasks.files import FieldMapping, LoadedExamples, load_examples
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


def _load(config: TaskConfig, path: str) -> LoadedExamples:
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
    )


def build_prompt_source(config: TaskConfig) -> PromptSource:
    """The training prompts of `config.source`, shuffled with `config.seed`."""
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
        return PromptSource(
            examples=examples,
            seed=seed_or_default(config.seed),
            shuffle=config.shuffle,
            name="arithmetic",
        )
    assert config.path is not None  # validate() checked it
    loaded = _load(config, config.path)
    return PromptSource(
        examples=loaded.examples,
        seed=seed_or_default(config.seed),
        shuffle=config.shuffle,
        name=config.path,
        rows_skipped=loaded.rows_skipped,
    )


def build_test_examples(config: TaskConfig) -> list[TaskExample]:
    """The fixed held-out examples: the arithmetic test split, or `config.test_path` (empty
    when a file task has no `test_path`)."""
    config.validate()
    if config.source == "arithmetic":
        arithmetic = config.arithmetic
        return arithmetic_test_split(
            arithmetic.num_test_prompts,
            seed=arithmetic.test_seed,
            levels=arithmetic_levels(arithmetic),
            split_seed=arithmetic.split_seed,
            test_fraction=arithmetic.test_fraction,
        )
    if config.test_path is None:
        return []
    return _load(config, config.test_path).examples
