"""The learner benchmark rewrites only its own section of docs/benchmarks.md."""

from __future__ import annotations

from adarl.bench.learner import replace_section

SECTION = "## Learner\n\nnew table\n"


def test_section_is_appended_when_absent() -> None:
    assert replace_section("# Benchmarks\n\nintro\n", SECTION) == (
        "# Benchmarks\n\nintro\n\n## Learner\n\nnew table\n"
    )
    assert replace_section("", SECTION) == SECTION


def test_only_the_learner_section_is_replaced() -> None:
    document = "# B\n\n## Sampler\n\ns\n\n## Learner\n\nold\nold\n\n## Rollout\n\nr\n"
    assert replace_section(document, SECTION) == (
        "# B\n\n## Sampler\n\ns\n\n## Learner\n\nnew table\n\n## Rollout\n\nr\n"
    )
    last = "# B\n\n## Sampler\n\ns\n\n## Learner\n\nold\n"
    assert replace_section(last, SECTION) == "# B\n\n## Sampler\n\ns\n\n## Learner\n\nnew table\n"
