"""The one writer of the benches' docs sections: a bench rewrites its own section of
docs/benchmarks.md (or appends it) and keeps every other byte."""

from __future__ import annotations

from pathlib import Path

import pytest

from adarl.bench import learner, memory, rollout
from adarl.bench.docs_section import replace_section, write_section

LEARNER_SECTION = "## Learner\n\nnew table\n"


def test_section_is_appended_when_absent() -> None:
    assert learner.SECTION_TITLE == "## Learner"
    assert replace_section("# Benchmarks\n\nintro\n", "## Learner", LEARNER_SECTION) == (
        "# Benchmarks\n\nintro\n\n## Learner\n\nnew table\n"
    )
    assert replace_section("", "## Learner", LEARNER_SECTION) == LEARNER_SECTION


def test_only_the_learner_section_is_replaced() -> None:
    document = "# B\n\n## Sampler\n\ns\n\n## Learner\n\nold\nold\n\n## Rollout\n\nr\n"
    assert replace_section(document, "## Learner", LEARNER_SECTION) == (
        "# B\n\n## Sampler\n\ns\n\n## Learner\n\nnew table\n\n## Rollout\n\nr\n"
    )
    last = "# B\n\n## Sampler\n\ns\n\n## Learner\n\nold\n"
    assert replace_section(last, "## Learner", LEARNER_SECTION) == (
        "# B\n\n## Sampler\n\ns\n\n## Learner\n\nnew table\n"
    )


def test_only_the_memory_section_is_replaced() -> None:
    """Each bench finds its own heading only: "## Learner" is not "## Learner memory"."""
    title, section = memory.SECTION_TITLE, "## Learner memory\n\nnew\n"
    document = "# B\n\n## Learner\n\nl\n\n## Learner memory\n\nold\n\n## Rollout\n\nr\n"
    assert replace_section(document, title, section) == (
        "# B\n\n## Learner\n\nl\n\n## Learner memory\n\nnew\n\n## Rollout\n\nr\n"
    )
    assert replace_section("# B\n\n## Learner\n\nl\n", title, section) == (
        "# B\n\n## Learner\n\nl\n\n## Learner memory\n\nnew\n"
    )


def test_write_section_appends_when_absent(tmp_path: Path) -> None:
    docs = tmp_path / "b.md"
    docs.write_text("# Benchmarks\n\n## Learner\n\nx\n")
    write_section(docs, rollout.SECTION_TITLE, "## Rollout\n\nnew\n")
    assert docs.read_text() == "# Benchmarks\n\n## Learner\n\nx\n\n## Rollout\n\nnew\n"


def test_write_docs_replaces_only_the_sampler_section(tmp_path: Path) -> None:
    path = tmp_path / "benchmarks.md"
    path.write_text(
        "# Benchmarks\n\n## Rollout\n\nkeep me\n\n## Sampler\n\nold\n\n## Learner\n\nme too\n"
    )
    write_section(path, "## Sampler", "## Sampler\n\nnew\n")
    text = path.read_text()
    assert "old" not in text and "new" in text
    assert text.index("## Rollout") < text.index("## Sampler") < text.index("## Learner")
    assert "keep me" in text and "me too" in text
    fresh = tmp_path / "fresh.md"
    write_section(fresh, "## Sampler", "## Sampler\n\nnew\n")
    assert fresh.read_text().startswith("# Benchmarks\n\n## Sampler")


def test_write_docs_section_replaces_only_its_own_section(tmp_path: Path) -> None:
    docs = tmp_path / "benchmarks.md"
    before, after = "# Benchmarks\n\n## Learner\n\nkeep 1\n", "## Rollout\n\nkeep 2\n"
    docs.write_text(before + "\n## Learning\n\nold text\n### sub\nold\n\n" + after)
    write_section(docs, "## Learning", "## Learning\n\nnew text\n")
    assert docs.read_text() == before + "\n## Learning\n\nnew text\n\n" + after
    # Missing: appended at the end, the rest unchanged.
    write_section(docs, "## Overhead", "## Overhead\n\nx\n")
    assert docs.read_text().endswith(after + "\n## Overhead\n\nx\n")
    assert docs.read_text().startswith(before)
    with pytest.raises(ValueError, match="level-2 heading"):
        write_section(docs, "Learning", "Learning\n")
    with pytest.raises(ValueError, match="must start with its heading"):
        write_section(docs, "## Learning", "no heading\n")
