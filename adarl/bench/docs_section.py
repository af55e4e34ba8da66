"""The one writer of the benches' docs sections: each bench owns one level-2 section of a Markdown
file (docs/benchmarks.md unless told otherwise), from its `## Title` line to the next `## `
heading, and rewrites that section alone, every other byte of the file kept.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

NEW_DOCUMENT = "# Benchmarks\n"  # what a section is appended to when the file does not exist yet


def replace_section(document: str, title: str, section: str) -> str:
    """`document` with the section headed `title` (e.g. "## Learner") replaced by `section`, or
    `section` appended after a blank line when no line is `title`.

    `section` starts with its `title` line; it ends with one newline, and a section that follows
    it stays one blank line below it. A heading that merely starts like `title` ("## Learner
    memory" for "## Learner") is another section.
    """
    if not title.startswith("## "):
        raise ValueError(f"section title {title!r} must be a level-2 heading ('## Name')")
    if not section.startswith(title + "\n"):
        raise ValueError(f"the section text must start with its heading line {title!r}")
    section = section.rstrip("\n") + "\n"
    lines = document.splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if line.rstrip() == title), None)
    if start is None:
        body = document.rstrip("\n")
        return (body + "\n\n" if body else "") + section
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    tail = "".join(lines[end:])
    return "".join(lines[:start]) + section + ("\n" + tail if tail else "")


def write_section(path: Path, title: str, section: str) -> None:
    """Replace (or append) the section headed `title` of the Markdown file at `path`; a missing
    file starts as `NEW_DOCUMENT`."""
    document = path.read_text() if path.is_file() else NEW_DOCUMENT
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(replace_section(document, title, section))


def paragraph(text: str, *, indent: str = "") -> str:
    """A generated paragraph wrapped at 100 columns like the rest of docs/benchmarks.md
    (`indent` for the continuation lines of a list item)."""
    return textwrap.fill(
        text,
        width=100,
        subsequent_indent=indent,
        break_long_words=False,
        break_on_hyphens=False,
    )
