"""`python -m adarl.bench memory` end to end at toy sizes: it measures and keeps other sections."""

from __future__ import annotations

from pathlib import Path

import pytest

from adarl.bench.__main__ import main as bench_main


@pytest.mark.slow
# Heavy: 30 s of make test's time for a bench; the exactness of chunked log-probs and activation
# checkpointing is unit-tested (tests/unit/models/test_chunked_logprobs.py), results in docs.
@pytest.mark.heavy
def test_memory_bench_measures_every_variant(tmp_path: Path) -> None:
    docs = tmp_path / "benchmarks.md"
    docs.write_text("# Benchmarks\n\n## Learner\n\nkeep me\n")
    argv = [
        "memory",
        "--tokens", "256", "--prompt-tokens", "32", "--vocab", "512", "--hidden", "64",
        "--chunk-tokens", "100", "--write-docs", str(docs),
    ]  # fmt: skip
    assert bench_main(argv) == 0
    text = docs.read_text()
    assert "keep me" in text and text.index("## Learner\n") < text.index("## Learner memory")
    rows = [line.split(" | ") for line in text.splitlines() if line.startswith("| ")][1:]
    assert [row[0] for row in rows] == ["| full-logits", "| chunked", "| chunked+ac"]
    # Exact: every variant reports the same loss and gradient norm.
    assert len({(row[-2], row[-1]) for row in rows}) == 1
    assert all(float(row[1].replace(",", "")) > 0 for row in rows)
