"""Prompt sources: local files (jsonl, parquet, `datasets` directories) and built-in tasks.

Every source is a `PromptSource` (seeded per-epoch shuffle, resumable cursor) over a list of
`adarl.types.TaskExample`s; `build_prompt_source` / `build_test_examples` read `TaskConfig`.
"""

from adarl.tasks.build import arithmetic_levels, build_prompt_source, build_test_examples
from adarl.tasks.files import (
    BadRowError,
    FieldMapping,
    LoadedExamples,
    file_prompt_source,
    load_examples,
)
from adarl.tasks.source import PromptSource

__all__ = [
    "BadRowError",
    "FieldMapping",
    "LoadedExamples",
    "PromptSource",
    "arithmetic_levels",
    "build_prompt_source",
    "build_test_examples",
    "file_prompt_source",
    "load_examples",
]
