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

import dataclasses
import difflib
import functools
import json
import logging
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from adarl.reward.base import VerifierResult
from adarl.types import TaskExample

if TYPE_CHECKING:
    from adarl.config.tasks import ReasoningGymConfig

logger = logging.getLogger(__name__)

TASK_NAME: Final = "reasoning_gym"  # TaskExample.task: the verifier registered under this name
INSTALL_HINT: Final = (
    'install the optional extra: pip install -e ".[tasks]" (make setup installs it)'
)
MAX_LEVELS: Final = 32  # an attribute whose range spans more values is a magnitude, not a level
# Text that ends a response when the engine decodes the end-of-sequence token as text. No
# newline: reasoning-gym answers may span lines (grids, lists).
END_MARKERS: Final = ("<eos>", "</s>", "<|endoftext|>", "<|im_end|>")
_ID = re.compile(
    r"reasoning_gym/(?P<name>[^/]+)/(?P<index>\d+)/seed=(?P<seed>-?\d+),"
    r"size=(?P<size>\d+),config=(?P<config>.*)",
    re.DOTALL,
)


def _package() -> Any:
    try:
        import reasoning_gym
    except ImportError as error:  # the optional extra is missing: say how to get it
        raise ImportError(
            f"task.source=reasoning_gym needs reasoning-gym: {INSTALL_HINT}"
        ) from error
    return reasoning_gym


def generator_names() -> list[str]:
    """Every generator reasoning-gym registers, sorted."""
    return sorted(_package().factory.DATASETS)


def canonical_config(config: Mapping[str, Any]) -> str:
    """The generator's configuration as compact JSON with sorted keys (part of every id)."""
    return json.dumps(_plain(config), sort_keys=True, separators=(",", ":"))


def _plain(value: Any) -> Any:
    """OmegaConf containers and tuples as plain JSON-able Python values."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


@dataclass(frozen=True)
class DatasetSpec:
    """One call of `create_dataset`: the generator, its seed and size, its config as JSON."""

    name: str
    seed: int
    size: int
    config_json: str = "{}"

    def prompt_id(self, index: int) -> str:
        return (
            f"{TASK_NAME}/{self.name}/{index}/seed={self.seed},size={self.size},"
            f"config={self.config_json}"
        )


def parse_prompt_id(prompt_id: str) -> tuple[DatasetSpec, int]:
    """(spec, entry index) of an id written by `DatasetSpec.prompt_id`."""
    match = _ID.fullmatch(prompt_id)
    if match is None:
        raise ValueError(
            f"prompt id {prompt_id!r} is not a reasoning-gym id "
            "(reasoning_gym/<name>/<index>/seed=..,size=..,config=..)"
        )
    spec = DatasetSpec(
        name=match["name"],
        seed=int(match["seed"]),
        size=int(match["size"]),
        config_json=match["config"],
    )
    return spec, int(match["index"])


def check_generator(name: str, config: Mapping[str, Any]) -> None:
    """Refuse an unknown generator (naming the closest ones) and keys its config does not have
    (naming those it has), before anything is generated."""
    datasets = _package().factory.DATASETS
    if name not in datasets:
        close = difflib.get_close_matches(name, list(datasets), n=5, cutoff=0.5)
        raise ValueError(
            f"task.reasoning_gym.name={name!r} is not a reasoning-gym generator"
            + (f"; closest: {close}" if close else "")
            + f" ({len(datasets)} generators; python -c 'import reasoning_gym as rg; "
            "print(sorted(rg.factory.DATASETS))' lists them)"
        )
    _, config_class = datasets[name]
    known = [f.name for f in dataclasses.fields(config_class) if f.name not in ("seed", "size")]
    for key in config:
        if key in ("seed", "size"):
            raise ValueError(
                f"task.reasoning_gym.config.{key}: set task.reasoning_gym.seed / test_seed and "
                "num_train_prompts / num_test_prompts instead (each split has its own)"
            )
        if key not in known:
            close = difflib.get_close_matches(key, known, n=3, cutoff=0.5)
            raise ValueError(
                f"task.reasoning_gym.config.{key}: generator {name!r} has no such key"
                + (f" (closest: {close})" if close else "")
                + f"; its keys: {known}"
            )


@functools.lru_cache(maxsize=32)
def create(spec: DatasetSpec) -> Any:
    """The generator object of `spec` (cached: some load word lists when built)."""
    package = _package()
    config = json.loads(spec.config_json)
    check_generator(spec.name, config)
    try:
        return package.create_dataset(spec.name, seed=spec.seed, size=spec.size, **config)
    except (AssertionError, TypeError, ValueError) as error:  # the generator's own validation
        raise ValueError(
            f"reasoning-gym generator {spec.name!r} refused task.reasoning_gym.config="
            f"{spec.config_json}: {type(error).__name__}: {error}"
        ) from error


@functools.lru_cache(maxsize=65536)
def entry(spec: DatasetSpec, index: int) -> dict[str, Any]:
    """Entry `index` of `spec` (deterministic; cached for the verifier, which sees each prompt's
    entry once per sample)."""
    if not 0 <= index < spec.size:
        raise ValueError(f"entry {index} is outside {spec.name}'s {spec.size} entries")
    return create(spec)[index]


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


def extract_answer(response: str) -> str:
    """The answer in a response: up to the first end marker, then the last `<answer>` tag's
    content if there is one, stripped."""
    end = min((i for m in END_MARKERS if (i := response.find(m)) != -1), default=len(response))
    text = response[:end]
    tagged = re.findall(r"<answer>\s?(.*?)\s?</answer>", text, flags=re.DOTALL)
    return (tagged[-1] if tagged else text).strip()


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


class ReasoningGymVerifier:
    """Scores a response with its entry's dataset's `score_answer`, as a binary pass (module
    docstring, "Reward"). The entry is drawn again from the example's id, in any process."""

    def __init__(self, *, pass_threshold: float = 1.0) -> None:
        if not 0.0 < pass_threshold <= 1.0:
            raise ValueError(
                f"reward.reasoning_gym.pass_threshold={pass_threshold} must be in (0, 1]"
            )
        self.pass_threshold = pass_threshold

    def score(self, response: str, example: TaskExample) -> float:
        """The dataset's own score of `response`, in [0, 1]."""
        spec, index = parse_prompt_id(example.prompt_id)
        item = entry(spec, index)
        if item["question"] != example.prompt:
            raise ValueError(
                f"prompt {example.prompt_id!r} no longer draws the question it was generated "
                "with (another reasoning-gym version?); regenerate the task"
            )
        return float(create(spec).score_answer(extract_answer(response), item))

    def verify(self, response: str, example: TaskExample) -> VerifierResult:
        return VerifierResult(reward=float(self.score(response, example) >= self.pass_threshold))

    def check_gold(self, example: TaskExample) -> str | None:
        if self.score(example.answer, example) < self.pass_threshold:
            return f"its own answer {example.answer!r} does not pass score_answer"
        return None
