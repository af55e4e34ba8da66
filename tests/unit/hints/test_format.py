"""The hint-mode answer parser and the leak check."""

from __future__ import annotations

import pytest

from adarl.hints.format import hint_prompt, leaks_answer, parse_levels, render_hint, render_levels


def test_a_well_formed_answer_gives_three_levels() -> None:
    parsed = parse_levels(" 1[12+7]2[12+7=19]3[12+7=19,19-3=]\n")
    assert parsed.levels == {1: "12+7", 2: "12+7=19", 3: "12+7=19,19-3="}
    assert parsed.complete and not parsed.missing and not parsed.malformed


def test_render_and_parse_round_trip() -> None:
    levels = {1: "a b", 2: "c[d]e", 3: "f"}  # brackets inside a level survive
    assert parse_levels(render_levels(levels)).levels == levels


@pytest.mark.parametrize(
    ("text", "levels", "missing"),
    [
        ("", {}, (1, 2, 3)),
        ("12+7=19", {}, (1, 2, 3)),  # no markers at all
        ("1[a]2[b]3[c", {1: "a", 2: "b"}, (3,)),  # cut off by max tokens
        ("1[a]3[c]", {1: "a", 3: "c"}, (2,)),  # a level skipped: out of order
        ("2[b]1[a]3[c]", {1: "a", 2: "b", 3: "c"}, ()),  # out of order
        ("x1[a]2[b]3[c]", {2: "b", 3: "c"}, (1,)),  # a marker glued to text is not one
        ("1[a]2[b]3[c]junk", {1: "a", 2: "b", 3: "c"}, ()),  # text after the last bracket
        ("1[a]2[b]3[c]3[d]", {1: "a", 2: "b", 3: "c"}, ()),  # a level twice
    ],
)
def test_malformed_answers_are_flagged(
    text: str, levels: dict[int, str], missing: tuple[int, ...]
) -> None:
    parsed = parse_levels(text)
    assert parsed.malformed
    assert not parsed.complete
    assert parsed.levels == levels
    assert parsed.missing == missing


def test_an_empty_level_is_missing_but_not_malformed() -> None:
    parsed = parse_levels("1[]2[b]3[ ]")
    assert parsed.levels == {2: "b"}
    assert parsed.missing == (1, 3)
    assert not parsed.malformed and not parsed.complete


@pytest.mark.parametrize(
    ("hint", "answer", "prompt", "leaks"),
    [
        ("12+7=19,19-3=", "16", "12+7-3=", False),
        ("12+7=19,19-3=16", "16", "12+7-3=", True),
        ("x=116", "16", "12+7-3=", False),  # 16 inside 116 is another number
        ("1+15=16.", "16", "1+15=", True),  # punctuation is a boundary
        ("7+3=10,10-3=", "7", "7+3-3=", False),  # the prompt already shows 7
        ("The answer is \\frac{1}{2}", "\\frac{1}{2}", "Compute 2/4.", True),
        ("so x equals 42", "x", "solve", True),  # a whole-word answer
        ("max is 3", "x", "solve", False),  # 'x' inside 'max' is not the answer
        ("anything", "  ", "p", False),  # an empty answer cannot leak
    ],
)
def test_leak_check(hint: str, answer: str, prompt: str, leaks: bool) -> None:
    assert leaks_answer(hint, answer=answer, prompt=prompt) is leaks


def test_templates_fill_their_fields() -> None:
    assert render_hint("12+7=19") == "[12+7=19]"
    assert render_hint("12+7", "\nHint: {hint}\n") == "\nHint: 12+7\n"
    assert hint_prompt("12+7-3=", "12+7=19,19-3=16") == "hint:12+7-3=(12+7=19,19-3=16)"
    # Other braces survive (an instruction may show JSON); values are not expanded again.
    instruction = 'Q: {prompt}\nS: {solution}\nAnswer like {"1": "..."} as 1[..]2[..]3[..]'
    assert hint_prompt("x={solution}", "y", instruction) == (
        'Q: x={solution}\nS: y\nAnswer like {"1": "..."} as 1[..]2[..]3[..]'
    )
