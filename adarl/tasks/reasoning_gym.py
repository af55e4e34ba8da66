"""reasoning-gym's procedural generators as a task source (`task.source=reasoning_gym`).

reasoning-gym (PyPI `reasoning-gym`, the optional extra `adarl[tasks]`) has 100+ generators, each
`create_dataset(name, seed=, size=, **config)` with its own difficulty parameters; entry `i` is a
dict `{"question", "answer", "metadata"}` drawn from `Random(seed + i)`, and the dataset scores a
response with `score_answer(answer, entry)` in [0, 1].

* **Splits.** Training prompts are entries `0..num_train_prompts-1` of the generator at `seed`,
  held-out prompts entries `0..num_test_prompts-1` at `test_seed`; `TaskConfig.validate` keeps
  the two ranges of per-entry seeds disjoint. A generator with a small space still repeats
  questions, so each split keeps a question once and a training question that is also held out is
  dropped from training: the held-out set stays as drawn, and no held-out prompt is trained on.
* **Ids.** `reasoning_gym/<name>/<index>/seed=<seed>,size=<size>,config=<JSON>`: everything needed
  to draw the entry again, so the verifier scores it in any process from the example alone.
* **Reward.** The dataset's own `score_answer` on the response (cut at an end-of-sequence marker;
  the content of the last `<answer>...</answer>` when the response has one), mapped to a binary
  pass: 1 if the score is at least `reward.reasoning_gym.pass_threshold` (1.0: full credit; many
  datasets give partial credit, e.g. len(answer)/len(response) when the answer is inside a longer
  response). The generator's own answer must pass, else the entry is dropped and counted.
* **Difficulty.** `task.reasoning_gym.difficulty_key` names a numeric metadata field; unset, it is
  the item's value of the first attribute in `metadata["difficulty"]` (the generator's declared
  difficulty parameters) that the item's metadata holds as a number and whose configured range
  spans at most `MAX_LEVELS` values: a count (terms, digits, animals, letters), not a magnitude.
  Without one, `difficulty` is unset (one level).
"""

from __future__ import annotations

import functools
import json
import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from adarl.reward.reasoning_gym import (
    TASK_NAME,
    DatasetSpec,
    canonical_config,
    check_generator,
    create,
    entry,
)
from adarl.types import TaskExample

if TYPE_CHECKING:
    from adarl.config.tasks import ReasoningGymConfig

logger = logging.getLogger(__name__)

MAX_LEVELS: Final = 32  # an attribute whose range spans more values is a magnitude, not a level


def _lookup(metadata: Mapping[str, Any], key: str) -> Any:
    value: Any = metadata
    for part in key.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    return value


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def entry_difficulty(metadata: Mapping[str, Any], difficulty_key: str | None) -> float | None:
    """The item's level (module docstring, "Difficulty")."""
    if difficulty_key is not None:
        value = _number(_lookup(metadata, difficulty_key))
        if value is None:
            raise ValueError(
                f"task.reasoning_gym.difficulty_key={difficulty_key!r}: the entry's metadata has "
                f"no number there (its keys: {sorted(metadata)}); name a numeric metadata field "
                "or unset it"
            )
        return value
    declared = metadata.get("difficulty")
    if not isinstance(declared, Mapping):
        return None
    for attribute, bounds in declared.items():
        value = _number(metadata.get(attribute))
        if value is None or not isinstance(bounds, (list, tuple)) or len(bounds) != 2:
            continue
        low, high = (_number(b) for b in bounds)
        if low is not None and high is not None and high - low < MAX_LEVELS:
            return value
    return None


@dataclass(frozen=True)
class Generated:
    """One split: its examples, and the entries dropped (duplicates, answers that fail)."""

    examples: tuple[TaskExample, ...]
    duplicates: int
    unanswerable: int


def _questions(spec: DatasetSpec) -> frozenset[str]:
    return frozenset(entry(spec, index)["question"] for index in range(spec.size))


def _generate(
    spec: DatasetSpec,
    *,
    difficulty_key: str | None,
    pass_threshold: float,
    exclude: frozenset[str] = frozenset(),
) -> Generated:
    dataset = create(spec)
    examples: list[TaskExample] = []
    seen = set(exclude)
    duplicates = unanswerable = 0
    for index in range(spec.size):
        item = entry(spec, index)
        question, answer = item["question"], item["answer"]
        if question in seen:
            duplicates += 1
            continue
        seen.add(question)
        answer_text = answer if isinstance(answer, str) else None if answer is None else str(answer)
        if not answer_text or dataset.score_answer(answer_text, item) < pass_threshold:
            unanswerable += 1  # no reference answer, or one its own scorer does not pass
            continue
        examples.append(
            TaskExample(
                prompt_id=spec.prompt_id(index),
                prompt=question,
                answer=answer_text,
                difficulty=entry_difficulty(item.get("metadata") or {}, difficulty_key),
                task=TASK_NAME,
            )
        )
    if not examples:
        raise ValueError(
            f"reasoning-gym generator {spec.name!r} gave no usable entry in {spec.size} "
            f"({duplicates} duplicate questions, {unanswerable} whose own answer scores below "
            f"reward.reasoning_gym.pass_threshold={pass_threshold}); change its config or size"
        )
    return Generated(tuple(examples), duplicates, unanswerable)


def splits_of(config: ReasoningGymConfig) -> tuple[DatasetSpec, DatasetSpec]:
    """The (train, test) dataset specs of a `task.reasoning_gym` config."""
    if not config.name:
        raise ValueError("task.source=reasoning_gym: set task.reasoning_gym.name")
    config_json = canonical_config(config.config)
    return (
        DatasetSpec(config.name, config.seed, config.num_train_prompts, config_json),
        DatasetSpec(config.name, config.test_seed, config.num_test_prompts, config_json),
    )


@functools.lru_cache(maxsize=8)
def _splits(
    train: DatasetSpec, test: DatasetSpec, difficulty_key: str | None, pass_threshold: float
) -> tuple[Generated, Generated]:
    held_out = _generate(test, difficulty_key=difficulty_key, pass_threshold=pass_threshold)
    # Every held-out question, kept or not, stays out of training: whichever pass threshold a
    # process uses, its training split never holds a question another one holds out.
    training = _generate(
        train,
        difficulty_key=difficulty_key,
        pass_threshold=pass_threshold,
        exclude=_questions(test),
    )
    for split, generated in (("train", training), ("test", held_out)):
        if generated.duplicates or generated.unanswerable:
            logger.info(
                "reasoning-gym %s %s: %d prompts (%d repeated questions%s dropped, %d entries "
                "whose own answer does not pass dropped)",
                train.name,
                split,
                len(generated.examples),
                generated.duplicates,
                " or held-out questions" if split == "train" else "",
                generated.unanswerable,
            )
    return training, held_out


def reasoning_gym_examples(
    config: ReasoningGymConfig, *, pass_threshold: float = 1.0
) -> tuple[list[TaskExample], list[TaskExample]]:
    """(training examples, held-out examples) of `task.reasoning_gym` (module docstring)."""
    train, test = splits_of(config)
    check_generator(config.name or "", json.loads(train.config_json))
    training, held_out = _splits(train, test, config.difficulty_key, pass_threshold)
    return list(training.examples), list(held_out.examples)
