"""File prompt sources: field mapping, and bad rows named by file, row, problem and fix."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from adarl.tasks.files import BadRowError, FieldMapping, file_prompt_source, load_examples

RowsWriter = Callable[..., Path]
JSONL_ONLY = pytest.mark.parametrize("file_format", ["jsonl"], indirect=True)


def good_rows(n: int) -> list[dict]:
    return [
        {"question": f"{i}+1=", "solution": str(i + 1), "steps": f"{i}+1={i + 1}", "level": i % 3}
        for i in range(n)
    ]


MAPPING = FieldMapping(
    prompt="question", answer="solution", reference_solution="steps", difficulty="level"
)


def test_field_mapping_builds_examples(write_rows: RowsWriter, file_format: str) -> None:
    path = write_rows(good_rows(3))
    loaded = load_examples(path, task="arithmetic", fields=MAPPING)
    assert loaded.rows_skipped == {}
    first = loaded.examples[0]
    assert (first.prompt, first.answer, first.reference_solution) == ("0+1=", "1", "0+1=1")
    assert first.difficulty == 0.0 and first.task == "arithmetic"
    number = 1 if file_format == "jsonl" else 0  # line numbers vs 0-based row indices
    assert first.prompt_id == f"{path.name}:{number}"


def test_id_column_and_nested_fields(write_rows: RowsWriter) -> None:
    rows = [
        {
            "uid": f"q-{i}",
            "prompt": [{"role": "user", "content": f"What is {i}?"}],
            "reward_model": {"ground_truth": str(i)},
        }
        for i in range(3)
    ]
    fields = FieldMapping(prompt="prompt.0.content", answer="reward_model.ground_truth", id="uid")
    examples = load_examples(write_rows(rows), task="math", fields=fields).examples
    assert [(e.prompt_id, e.prompt, e.answer) for e in examples] == [
        (f"q-{i}", f"What is {i}?", str(i)) for i in range(3)
    ]


@pytest.mark.parametrize(
    ("bad_row", "problem", "fix"),
    [
        ({"question": "   "}, "empty_prompt", "task.fields.prompt"),
        ({"solution": None}, "missing_answer", "task.fields.answer"),
        ({"question": "1+" * 30 + "1="}, "prompt_too_long", "task.max_prompt_chars"),
    ],
)
def test_bad_row_error_names_file_row_problem_and_key(
    write_rows: RowsWriter,
    row_label: Callable[[int], str],
    bad_row: dict,
    problem: str,
    fix: str,
) -> None:
    rows = good_rows(4)
    rows[2] = {**rows[2], **bad_row}
    path = write_rows(rows)
    with pytest.raises(BadRowError) as raised:
        load_examples(path, task="arithmetic", fields=MAPPING, max_prompt_chars=40)
    message = str(raised.value)
    assert str(path) in message
    assert row_label(2) in message
    assert problem in message
    assert fix in message
    assert "task.on_bad_row=skip" in message
    assert (raised.value.problem, raised.value.row) == (problem, row_label(2))


def test_skip_mode_drops_and_counts_bad_rows(write_rows: RowsWriter) -> None:
    rows = good_rows(6)
    rows[1] = {**rows[1], "question": ""}
    rows[3] = {**rows[3], "solution": None}
    rows[4] = {**rows[4], "question": "9" * 50}
    source = file_prompt_source(
        write_rows(rows),
        task="arithmetic",
        seed=0,
        fields=MAPPING,
        on_bad_row="skip",
        max_prompt_chars=40,
    )
    assert sorted(e.prompt for e in source.examples) == ["0+1=", "2+1=", "5+1="]
    metrics = source.metrics()
    assert metrics["sampling/data_rows_skipped"] == 3.0
    assert metrics["sampling/data_rows_skipped_empty_prompt"] == 1.0
    assert metrics["sampling/data_rows_skipped_missing_answer"] == 1.0
    assert metrics["sampling/data_rows_skipped_prompt_too_long"] == 1.0


def test_missing_prompt_column_lists_the_columns(write_rows: RowsWriter) -> None:
    with pytest.raises(BadRowError, match=re.escape("'question', 'solution'")):
        load_examples(write_rows(good_rows(2)), task="math", fields=FieldMapping(answer="solution"))


@JSONL_ONLY
def test_answers_that_are_numbers_or_test_lists_become_text(write_rows: RowsWriter) -> None:
    rows = [
        {"prompt": "a", "answer": 42},
        {"prompt": "b", "answer": [{"input": "1\n", "output": "1\n"}]},
    ]
    examples = load_examples(write_rows(rows), task="code").examples
    assert examples[0].answer == "42"
    assert json.loads(examples[1].answer) == [{"input": "1\n", "output": "1\n"}]


def test_jsonl_invalid_line_and_blank_lines(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    path.write_text('{"prompt": "a", "answer": "1"}\n\n{"prompt": "b", \n', encoding="utf-8")
    with pytest.raises(BadRowError, match=r"p\.jsonl, line 3: invalid_json"):
        load_examples(path, task="math")
    loaded = load_examples(path, task="math", on_bad_row="skip")
    assert [e.prompt for e in loaded.examples] == ["a"]
    assert loaded.rows_skipped == {"invalid_json": 1}


@JSONL_ONLY
def test_duplicate_ids_are_bad_rows(write_rows: RowsWriter) -> None:
    rows = [{"id": "x", "prompt": "a", "answer": "1"}, {"id": "x", "prompt": "b", "answer": "2"}]
    path = write_rows(rows)
    with pytest.raises(BadRowError, match="line 2: duplicate_id"):
        load_examples(path, task="math", fields=FieldMapping(id="id"))


@JSONL_ONLY
def test_all_rows_bad_is_an_error_even_when_skipping(write_rows: RowsWriter) -> None:
    path = write_rows([{"prompt": "", "answer": "1"}])
    with pytest.raises(ValueError, match="no usable rows"):
        load_examples(path, task="math", on_bad_row="skip")


def test_datasets_dict_needs_a_split(tmp_path: Path) -> None:
    import datasets

    rows = [{"prompt": "a", "answer": "1"}]
    dataset_dict = datasets.DatasetDict(
        train=datasets.Dataset.from_list(rows), test=datasets.Dataset.from_list(rows * 2)
    )
    path = tmp_path / "dd"
    dataset_dict.save_to_disk(str(path))
    with pytest.raises(ValueError, match=r"splits \['test', 'train'\]; set task.split"):
        load_examples(path, task="math")
    assert len(load_examples(path, task="math", split="test").examples) == 2


def test_format_is_inferred_or_refused(write_rows: RowsWriter, tmp_path: Path) -> None:
    rows = [{"prompt": "a", "answer": "1"}]
    assert len(load_examples(write_rows(rows), task="math").examples) == 1  # every format
    unknown = tmp_path / "rows.txt"
    unknown.write_text("x")
    with pytest.raises(ValueError, match=r"set task\.source"):
        load_examples(unknown, task="math")
    with pytest.raises(FileNotFoundError, match=r"task\.path"):
        load_examples(tmp_path / "absent.jsonl", task="math")
