"""Writers of the three file formats, so every loader test runs on jsonl, parquet and datasets."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

RowsWriter = Callable[[list[dict[str, Any]], str], Path]


def write_jsonl(rows: list[dict[str, Any]], path: Path) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def write_parquet(rows: list[dict[str, Any]], path: Path) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def write_datasets(rows: list[dict[str, Any]], path: Path) -> Path:
    import datasets

    datasets.Dataset.from_list(rows).save_to_disk(str(path))
    return path


FORMATS = {
    "jsonl": (write_jsonl, ".jsonl"),
    "parquet": (write_parquet, ".parquet"),
    "datasets": (write_datasets, ""),
}


@pytest.fixture(params=sorted(FORMATS))
def file_format(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def row_label(file_format: str) -> Callable[[int], str]:
    """How the loader names row `index` (0-based) of a file written by `write_rows`."""
    return lambda index: f"line {index + 1}" if file_format == "jsonl" else f"row {index} (0-based)"


@pytest.fixture
def write_rows(file_format: str, tmp_path: Path) -> RowsWriter:
    writer, suffix = FORMATS[file_format]

    def write(rows: list[dict[str, Any]], name: str = "prompts") -> Path:
        return writer(rows, tmp_path / f"{name}{suffix}")

    return write
