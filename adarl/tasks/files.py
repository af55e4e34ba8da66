"""Prompt sources read from local files: JSON Lines, Parquet, and `datasets.save_to_disk` dirs.

A `FieldMapping` says which column holds each part of a `TaskExample`; a dotted path reads nested
records (`"reward_model.ground_truth"`, `"prompt.0.content"`), an exact column name wins over a
dotted reading. Every row is validated while loading; a bad row either stops the load with a
`BadRowError` naming the file, the row, the problem and the config key to change
(`on_bad_row="error"`), or is dropped and counted per problem (`on_bad_row="skip"`; the counts
reach the source's metrics as `sampling/data_rows_skipped_<problem>`).

The answer is also checked by the task's verifier when the loader is given one
(`check_answer`, e.g. `MathVerifier.check_gold`): an answer the verifier cannot read (math-verify
cannot parse it, code tests are not valid JSON) is the bad-row problem "unparseable_answer", not
a prompt on which every response silently scores 0.

The prompt is checked as the engines will see it when the loader is given a `check_prompt`
(`adarl.rollout.codec.PromptCheck`: chat template, system prompt and instruction applied): a
prompt longer than the context leaves for it is "prompt_too_many_tokens", and one that never asks
for the `\\boxed{}` answer the math verifier reads is "no_answer_instruction".

Rows are numbered as a person looking at the file would: JSON Lines by 1-based line number,
Parquet and `datasets` by 0-based row index. Default prompt ids are `<file name>:<that number>`.

Everything is loaded eagerly: validation must see every row before training starts, and a list
of `TaskExample`s is cheap next to the rollouts it feeds (≈1 KB per prompt).
"""

from __future__ import annotations

import json
import logging
import math
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from adarl.tasks.source import PromptSource
from adarl.types import TaskExample

logger = logging.getLogger(__name__)

FileFormat = Literal["jsonl", "parquet", "datasets", "auto"]
OnBadRow = Literal["error", "skip"]
# Why the task's verifier cannot judge responses against an example's answer (None: it can).
AnswerCheck = Callable[[TaskExample], "str | None"]
# What is wrong with an example's prompt as the model sees it: (problem, detail), or None.
PromptCheck = Callable[[TaskExample], "tuple[str, str] | None"]
_BATCH_ROWS = 4096

# What to change for each problem (config keys of adarl/config/tasks.py).
FIX_HINTS: dict[str, str] = {
    "invalid_json": "fix the line (each line must be one JSON object)",
    "not_an_object": "fix the line (each line must be one JSON object)",
    "missing_prompt": "point task.fields.prompt at the prompt column",
    "prompt_not_string": "point task.fields.prompt at a text column (e.g. 'prompt.0.content' "
    "for chat messages)",
    "empty_prompt": "fill in the prompt or check task.fields.prompt",
    "prompt_too_long": "raise task.max_prompt_chars or shorten the prompt",
    "missing_answer": "fill in the answer or point task.fields.answer at the answer column",
    "bad_reference_solution": "point task.fields.reference_solution at a text column",
    "bad_difficulty": "point task.fields.difficulty at a numeric column",
    "missing_id": "fill in the id or point task.fields.id at the id column",
    "duplicate_id": "make ids unique or point task.fields.id at a unique column (or unset it)",
    "unparseable_answer": "fix the answer so that the task's verifier (task.verifier) can read "
    "it, or point task.fields.answer at the column it should read",
    "prompt_too_many_tokens": "raise rollout.max_model_len (prompt + response tokens), lower "
    "rollout.max_new_tokens, or shorten the prompt",
    "no_answer_instruction": 'ask for the answer format, e.g. task.instruction_suffix=" Please '
    'put your final answer within \\boxed{}." or a task.system_prompt saying so (with '
    "task.chat_template=true)",
}


@dataclass(frozen=True)
class FieldMapping:
    """Column names (or dotted paths) of each `TaskExample` part; None = not in the data."""

    prompt: str = "prompt"
    answer: str = "answer"
    reference_solution: str | None = None
    difficulty: str | None = None
    id: str | None = None


class BadRowError(ValueError):
    """A row that cannot become a `TaskExample`; the message says where, what and how to fix."""

    def __init__(self, path: str, row: str, problem: str, detail: str) -> None:
        self.path, self.row, self.problem, self.detail = path, row, problem, detail
        super().__init__(
            f"{path}, {row}: {problem}: {detail}. To fix: {FIX_HINTS[problem]}; or set "
            "task.on_bad_row=skip to skip and count such rows"
        )


@dataclass(frozen=True)
class LoadedExamples:
    path: str
    examples: list[TaskExample]
    rows_skipped: dict[str, int] = field(default_factory=dict)  # problem → rows dropped


class _Problem(Exception):
    """Internal: one row's problem, turned into a `BadRowError` or a skip count by the loader."""

    def __init__(self, problem: str, detail: str) -> None:
        super().__init__(detail)
        self.problem, self.detail = problem, detail


_MISSING = object()


def _lookup(row: Mapping[str, Any], key: str) -> Any:
    if key in row:
        return row[key]
    value: Any = row
    for part in key.split("."):
        if isinstance(value, Mapping) and part in value:
            value = value[part]
        elif isinstance(value, Sequence) and not isinstance(value, str) and part.isdigit():
            if int(part) >= len(value):
                return _MISSING
            value = value[int(part)]
        else:
            return _MISSING
    return value


def _keys_hint(row: Mapping[str, Any]) -> str:
    keys = sorted(str(k) for k in row)
    return f"the row has {keys[:20]}{' ...' if len(keys) > 20 else ''}"


def _answer_text(value: Any) -> str | None:
    if value is None or value is _MISSING:
        return None
    if isinstance(value, str):
        return value if value.strip() else None
    if isinstance(value, (list, tuple, dict)):
        return json.dumps(value, ensure_ascii=False) if value else None
    return str(value)


def example_from_row(
    row: Any,
    *,
    fields: FieldMapping,
    default_id: str,
    task: str,
    max_prompt_chars: int,
) -> TaskExample:
    """One validated `TaskExample`, or `_Problem` raised with the problem's name and detail."""
    if not isinstance(row, Mapping):
        raise _Problem("not_an_object", f"expected an object, got {type(row).__name__}")
    prompt = _lookup(row, fields.prompt)
    if prompt is _MISSING or prompt is None:
        raise _Problem("missing_prompt", f"no prompt at field {fields.prompt!r}; {_keys_hint(row)}")
    if not isinstance(prompt, str):
        raise _Problem(
            "prompt_not_string",
            f"field {fields.prompt!r} holds a {type(prompt).__name__}, not a string",
        )
    if not prompt.strip():
        raise _Problem("empty_prompt", f"field {fields.prompt!r} is empty")
    if len(prompt) > max_prompt_chars:
        raise _Problem(
            "prompt_too_long",
            f"the prompt has {len(prompt)} characters > task.max_prompt_chars={max_prompt_chars}",
        )
    raw_answer = _lookup(row, fields.answer)
    answer = _answer_text(raw_answer)
    if answer is None:
        state = "absent" if raw_answer is _MISSING else "empty"
        raise _Problem("missing_answer", f"field {fields.answer!r} is {state}; {_keys_hint(row)}")

    reference_solution = None
    if fields.reference_solution is not None:
        value = _lookup(row, fields.reference_solution)
        if value is not _MISSING and value is not None:
            if not isinstance(value, str):
                raise _Problem(
                    "bad_reference_solution",
                    f"field {fields.reference_solution!r} holds a {type(value).__name__}, "
                    "not a string",
                )
            reference_solution = value

    difficulty = None
    if fields.difficulty is not None:
        value = _lookup(row, fields.difficulty)
        if value is not _MISSING and value is not None:
            try:
                if isinstance(value, bool):
                    raise TypeError
                difficulty = float(value)
            except (TypeError, ValueError):
                difficulty = math.nan
            if not math.isfinite(difficulty):
                raise _Problem(
                    "bad_difficulty",
                    f"field {fields.difficulty!r} holds {value!r}, not a finite number",
                )

    prompt_id = default_id
    if fields.id is not None:
        value = _lookup(row, fields.id)
        if value is _MISSING or value is None or isinstance(value, bool) or value == "":
            raise _Problem("missing_id", f"no id at field {fields.id!r}")
        if not isinstance(value, (str, int)):
            raise _Problem(
                "missing_id", f"field {fields.id!r} holds a {type(value).__name__}, not an id"
            )
        prompt_id = str(value)
    return TaskExample(
        prompt_id=prompt_id,
        prompt=prompt,
        answer=answer,
        reference_solution=reference_solution,
        difficulty=difficulty,
        task=task,
    )


def infer_format(path: str | Path) -> Literal["jsonl", "parquet", "datasets"]:
    path = Path(path)
    if path.is_dir():
        markers = ("dataset_info.json", "dataset_dict.json", "state.json")
        if any((path / marker).is_file() for marker in markers):
            return "datasets"
    elif path.suffix in (".jsonl", ".ndjson"):
        return "jsonl"
    elif path.suffix in (".parquet", ".pq"):
        return "parquet"
    raise ValueError(
        f"cannot tell the format of {path} (expected a .jsonl or .parquet file or a "
        "directory written by datasets' save_to_disk); set task.source to 'jsonl', 'parquet' "
        "or 'datasets'"
    )


def _jsonl_rows(path: Path) -> Iterator[tuple[str, int, Any]]:
    with path.open(encoding="utf-8") as handle:
        for line_number, line in enumerate(handle, start=1):
            if not line.strip():
                continue  # blank lines (e.g. a trailing newline) are not rows
            label = f"line {line_number}"
            try:
                yield label, line_number, json.loads(line)
            except json.JSONDecodeError as error:
                yield label, line_number, _Problem("invalid_json", f"not valid JSON ({error})")


def _parquet_rows(path: Path) -> Iterator[tuple[str, int, Any]]:
    import pyarrow.parquet as pq

    try:
        parquet_file = pq.ParquetFile(path)
    except Exception as error:  # pyarrow raises several types; name the file in one message
        raise ValueError(f"{path}: not a readable Parquet file ({error})") from error
    index = 0
    for batch in parquet_file.iter_batches(batch_size=_BATCH_ROWS):
        for row in batch.to_pylist():
            yield f"row {index} (0-based)", index, row
            index += 1


def _datasets_rows(path: Path, split: str | None) -> Iterator[tuple[str, int, Any]]:
    import datasets

    loaded = datasets.load_from_disk(str(path))
    if isinstance(loaded, datasets.DatasetDict):
        splits = sorted(loaded)
        if split is None and len(splits) == 1:
            split = splits[0]
        if split not in loaded:
            raise ValueError(
                f"{path} holds the splits {splits}; set task.split to one of them"
                + ("" if split is None else f" (got {split!r})")
            )
        loaded = loaded[split]
    elif split is not None:
        raise ValueError(f"{path} holds a single Dataset, not a DatasetDict; unset task.split")
    columns = loaded.column_names
    for start in range(0, len(loaded), _BATCH_ROWS):
        batch = loaded[start : start + _BATCH_ROWS]
        for offset, values in enumerate(zip(*(batch[c] for c in columns), strict=True)):
            index = start + offset
            yield f"row {index} (0-based)", index, dict(zip(columns, values, strict=True))


def load_examples(
    path: str | Path,
    *,
    task: str,
    fields: FieldMapping = FieldMapping(),
    file_format: FileFormat = "auto",
    on_bad_row: OnBadRow = "error",
    max_prompt_chars: int = 8192,
    split: str | None = None,
    check_answer: AnswerCheck | None = None,
    check_prompt: PromptCheck | None = None,
) -> LoadedExamples:
    """Read and validate every row of a local prompt file; `task` names the verifier,
    `check_answer` (its `check_gold`, if any) vets each row's answer and `check_prompt` each
    row's prompt as the model will see it."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"prompt file {path} does not exist; check task.path")
    if on_bad_row not in ("error", "skip"):
        raise ValueError(f"task.on_bad_row={on_bad_row!r} must be 'error' or 'skip'")
    resolved = infer_format(path) if file_format == "auto" else file_format
    if resolved == "jsonl":
        rows = _jsonl_rows(path)
    elif resolved == "parquet":
        rows = _parquet_rows(path)
    elif resolved == "datasets":
        rows = _datasets_rows(path, split)
    else:
        raise ValueError(f"task.source={file_format!r} is not a file format")

    examples: list[TaskExample] = []
    skipped: Counter[str] = Counter()
    seen_ids: set[str] = set()
    for label, number, row in rows:
        try:
            if isinstance(row, _Problem):
                raise row
            example = example_from_row(
                row,
                fields=fields,
                default_id=f"{path.name}:{number}",
                task=task,
                max_prompt_chars=max_prompt_chars,
            )
            if example.prompt_id in seen_ids:
                raise _Problem("duplicate_id", f"prompt id {example.prompt_id!r} appeared before")
            if check_answer is not None:
                unreadable = check_answer(example)
                if unreadable is not None:
                    raise _Problem("unparseable_answer", f"task.verifier={task!r}: {unreadable}")
            if check_prompt is not None:
                prompt_problem = check_prompt(example)
                if prompt_problem is not None:
                    raise _Problem(*prompt_problem)
        except _Problem as problem:  # the documented skip-and-count, or a named error
            error = BadRowError(str(path), label, problem.problem, problem.detail)
            if on_bad_row == "error":
                raise error from None
            if not skipped[problem.problem]:
                logger.warning("skipping bad rows like this one: %s", error)
            skipped[problem.problem] += 1
            continue
        seen_ids.add(example.prompt_id)
        examples.append(example)
    if not examples:
        raise ValueError(
            f"{path}: no usable rows (skipped per problem: {dict(skipped)}); check task.fields"
        )
    if skipped:
        logger.warning("%s: skipped %d bad rows: %s", path, sum(skipped.values()), dict(skipped))
    return LoadedExamples(path=str(path), examples=examples, rows_skipped=dict(skipped))


def file_prompt_source(
    path: str | Path,
    *,
    task: str,
    seed: int,
    shuffle: bool = True,
    fields: FieldMapping = FieldMapping(),
    file_format: FileFormat = "auto",
    on_bad_row: OnBadRow = "error",
    max_prompt_chars: int = 8192,
    split: str | None = None,
    check_answer: AnswerCheck | None = None,
) -> PromptSource:
    loaded = load_examples(
        path,
        task=task,
        fields=fields,
        file_format=file_format,
        on_bad_row=on_bad_row,
        max_prompt_chars=max_prompt_chars,
        split=split,
        check_answer=check_answer,
    )
    return PromptSource(
        examples=loaded.examples,
        seed=seed,
        shuffle=shuffle,
        name=str(path),
        rows_skipped=loaded.rows_skipped,
    )
