"""`python -m adarl.bench hints` end to end on barely warm-started models (the answer-only tiny
model and the worked-solution preset): it builds, measures, writes its section without touching
the others, and plots the lift."""

from __future__ import annotations

from pathlib import Path

import pytest

from adarl.bench.__main__ import main as bench_main

pytestmark = pytest.mark.slow


# Heavy: 19 s of make test's time for a bench that ran for real (docs/benchmarks.md "Hints");
# the hint parsing, leak checks and quality measure it drives have their own tests.
@pytest.mark.heavy
def test_the_bench_writes_its_section(tmp_path: Path) -> None:
    docs = tmp_path / "benchmarks.md"
    docs.write_text("# Benchmarks\n\n## Rollout\n\nkept\n\n## Hints\n\nold\n")
    code = bench_main(
        [
            "hints",
            "--models", "model.tiny.sft_steps=4", "model=tiny_worked,model.tiny.sft_steps=4",
            "--prompts", "24",
            "--samples-per-prompt", "2",
            "--retries", "1",
            "--cache-dir", str(tmp_path / "cache"),
            "--write-docs", str(docs),
            "--figure", str(tmp_path / "hints.png"),
        ]
    )  # fmt: skip
    assert code == 0
    text = docs.read_text()
    assert "## Rollout\n\nkept\n" in text
    assert "old" not in text
    assert "### `model.tiny.sft_steps=4`" in text
    assert "### `model=tiny_worked,model.tiny.sft_steps=4`" in text
    assert "4 layers" in text  # the preset's architecture was built
    assert text.count("| template | 3 |") == 2 and text.count("| self | 3 |") == 2
    assert "parse rate" in text and "leak rate" in text and "lift ± SE" in text
    assert (tmp_path / "hints.png").stat().st_size > 0


def test_a_policy_without_the_hint_formats_is_refused() -> None:
    with pytest.raises(ValueError, match="hint formats are taught"):
        bench_main(["hints", "--models", "model.name_or_path=adarl/mid-math", "--no-write-docs"])


def test_bad_options_are_a_usage_error() -> None:
    with pytest.raises(SystemExit):
        bench_main(["hints", "--prompts", "0"])
