"""`python -m adarl.bench hints` end to end on a barely warm-started model: it builds, measures
and writes its section without touching the others."""

from __future__ import annotations

from pathlib import Path

import pytest

from adarl.bench.__main__ import main as bench_main

pytestmark = pytest.mark.slow


def test_the_bench_writes_its_section(tmp_path: Path) -> None:
    docs = tmp_path / "benchmarks.md"
    docs.write_text("# Benchmarks\n\n## Rollout\n\nkept\n\n## Hints\n\nold\n")
    code = bench_main(
        [
            "hints",
            "--sft-steps", "4",
            "--prompts", "24",
            "--samples-per-prompt", "2",
            "--retries", "1",
            "--cache-dir", str(tmp_path / "cache"),
            "--write-docs", str(docs),
        ]
    )  # fmt: skip
    assert code == 0
    text = docs.read_text()
    assert "## Rollout\n\nkept\n" in text
    assert "old" not in text
    assert "### `model.tiny.sft_steps=4`" in text
    assert "| template | 3 |" in text and "| self | 3 |" in text
    assert "parse rate" in text and "leak rate" in text


def test_bad_options_are_a_usage_error() -> None:
    with pytest.raises(SystemExit):
        bench_main(["hints", "--prompts", "0"])
