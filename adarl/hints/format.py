"""The text formats of hinting: how a hint is shown to the policy, how the hint mode is asked
for hints and answers, the parser of its answer, and the leak check.

Shown hint (what `PromptRequest.hint` carries; the codec appends it to the prompt):

    12+7-3=  +  [12+7=19]   →   the policy answers 16<eos>      (`hints.show_template`)

Hint mode (one generation writes all three levels):

    prompt    hint:12+7-3=(12+7=19,19-3=16)           (`hints.prompt_template`)
    response  1[12+7]2[12+7=19]3[12+7=19,19-3=]<eos>   (`render_levels`)

Every character is in the built-in character tokenizer's vocabulary. A different hint model can
be given its own prompt template (`hints.prompt_template`, with `{prompt}` and `{solution}`);
the response format stays the one `parse_levels` reads.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from adarl.config.hints import DEFAULT_PROMPT_TEMPLATE, DEFAULT_SHOW_TEMPLATE

LEVELS: tuple[int, ...] = (1, 2, 3)
_MARKER = re.compile(r"([123])\[")


def _fill(template: str, **values: str) -> str:
    """Replace each `{name}` of `values` in one pass; other braces stay as they are (an
    instruction may show JSON), and a value containing `{name}` is not expanded again."""
    pattern = re.compile("|".join(re.escape("{" + name + "}") for name in values))
    return pattern.sub(lambda match: values[match.group(0)[1:-1]], template)


def render_hint(content: str, template: str = DEFAULT_SHOW_TEMPLATE) -> str:
    """The text appended to the prompt for a hint whose content is `content`."""
    return _fill(template, hint=content)


def hint_prompt(prompt: str, solution: str, template: str = DEFAULT_PROMPT_TEMPLATE) -> str:
    """The hint-mode prompt for a task prompt and the solution it may see."""
    return _fill(template, prompt=prompt, solution=solution)


def render_levels(levels: Mapping[int, str]) -> str:
    """The hint mode's answer: `1[...]2[...]3[...]` (the warm start's target)."""
    return "".join(f"{level}[{levels[level]}]" for level in LEVELS)


@dataclass(frozen=True)
class ParsedLevels:
    """What `parse_levels` read from one hint-mode generation.

    `levels`: the levels found with non-empty content; `missing`: levels absent or empty;
    `malformed`: the text is not exactly `1[..]2[..]3[..]` (markers out of order, text outside
    brackets, an unclosed bracket); whatever levels could still be read are kept.
    """

    levels: dict[int, str]
    missing: tuple[int, ...]
    malformed: bool

    @property
    def complete(self) -> bool:
        return not self.missing and not self.malformed


def parse_levels(text: str) -> ParsedLevels:
    """Read `1[a]2[b]3[c]` (surrounding whitespace allowed). A level's content runs from its
    marker to the last `]` before the next level's marker, so brackets inside it survive."""
    text = text.strip()
    starts = [m for m in _MARKER.finditer(text) if m.start() == 0 or text[m.start() - 1] == "]"]
    levels: dict[int, str] = {}
    malformed = not starts or starts[0].start() != 0
    expected = 1
    for index, marker in enumerate(starts):
        end = starts[index + 1].start() if index + 1 < len(starts) else len(text)
        body = text[marker.end() : end]
        level = int(marker.group(1))
        if level != expected or not body.endswith("]"):
            malformed = True
        expected = level + 1
        close = body.rfind("]")
        content = body[:close].strip() if close >= 0 else ""
        if content and level not in levels:
            levels[level] = content
    if starts and expected != 4:
        malformed = True
    missing = tuple(level for level in LEVELS if level not in levels)
    return ParsedLevels(levels=levels, missing=missing, malformed=malformed)


def _occurs(needle: str, haystack: str) -> bool:
    """`needle` occurs in `haystack` as a whole token: not glued to a letter or digit on a side
    where the needle itself starts or ends with one (so "1" is not in "12", "x" not in "max")."""
    for match in re.finditer(re.escape(needle), haystack):
        before = haystack[match.start() - 1] if match.start() else ""
        after = haystack[match.end()] if match.end() < len(haystack) else ""
        if needle[0].isalnum() and before.isalnum():
            continue
        if needle[-1].isalnum() and after.isalnum():
            continue
        return True
    return False


def leaks_answer(hint: str, *, answer: str, prompt: str) -> bool:
    """Whether `hint` states the final `answer`: it contains the answer as a whole token that the
    prompt does not already contain (a hint cannot reveal what the prompt shows)."""
    answer = answer.strip()
    if not answer:
        return False
    return _occurs(answer, hint) and not _occurs(answer, prompt)
