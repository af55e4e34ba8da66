"""Template hint levels of the arithmetic task: worked steps, the three levels, never the answer.

Expected values are worked by hand in the comments."""

from __future__ import annotations

import re

import pytest

from adarl.hints.arithmetic import parse_steps, place_value_steps, worked_solution
from adarl.hints.template import hint_mode_solution, template_levels
from adarl.tasks.arithmetic import make_example, sample_examples
from adarl.types import TaskExample


def _example(operands: list[int], operators: str):
    return make_example(operands, list(operators), difficulty=0.0)


def test_a_multi_step_solution_is_worked_as_given() -> None:
    # 12+7-3: 12+7=19, 19-3=16; the answer 16 appears in no level.
    example = _example([12, 7, 3], "+-")
    assert example.reference_solution == "12+7=19,19-3=16"
    assert template_levels(example) == {1: "12+7", 2: "12+7=19", 3: "12+7=19,19-3="}
    assert hint_mode_solution(example) == "12+7=19,19-3=16"


def test_multiplication_comes_first_in_the_steps() -> None:
    # 2+3*4 = 2+12 = 14: the first step is 3*4.
    example = _example([2, 3, 4], "+*")
    assert template_levels(example) == {1: "3*4", 2: "3*4=12", 3: "3*4=12,2+12="}


@pytest.mark.parametrize(
    ("operands", "operators", "worked"),
    [
        # 47*38: 47*30 = 1410, 47*8 = 376, 1410+376 = 1786 (the right operand splits).
        ([47, 38], "*", "47*30=1410,47*8=376,1410+376=1786"),
        # 47*8: 8 does not split, 47 does: 40*8 = 320, 7*8 = 56, 320+56 = 376.
        ([47, 8], "*", "40*8=320,7*8=56,320+56=376"),
        # 47+38, column addition: 7+8 = 15, 40+30 = 70, 70+15 = 85.
        ([47, 38], "+", "7+8=15,40+30=70,70+15=85"),
        # 45+7: units first, 5+7 = 12, then 40+12 = 52.
        ([45, 7], "+", "5+7=12,40+12=52"),
        # 47-38: 47-30 = 17, 17-8 = 9.
        ([47, 38], "-", "47-30=17,17-8=9"),
        # 45-7: 40-7 = 33, 33+5 = 38.
        ([45, 7], "-", "40-7=33,33+5=38"),
    ],
)
def test_one_step_solutions_are_worked_by_place_value(
    operands: list[int], operators: str, worked: str
) -> None:
    example = _example(operands, operators)
    assert worked_solution(example) == worked
    steps = worked.split(",")
    assert template_levels(example) == {
        1: steps[0].split("=")[0],
        2: steps[0],
        3: ",".join([*steps[:-1], steps[-1].split("=")[0] + "="]),
    }


def test_a_step_that_does_not_split_gives_no_level() -> None:
    # 5+3 and 30+40: no operand has two nonzero parts; every level would repeat the prompt
    # (5+3, 5+3=) or state the answer (5+3=8).
    for operands in ([5, 3], [30, 40]):
        example = _example(operands, "+")
        assert place_value_steps(parse_steps(example.reference_solution)[0]) == parse_steps(
            example.reference_solution
        )
        assert template_levels(example) == {1: None, 2: None, 3: None}


def test_a_level_that_would_state_the_answer_is_unusable() -> None:
    # 2+3-0: 2+3=5, 5-0=5. Level 2 (2+3=5) and level 3 (2+3=5,5-0=) both show 5, the answer.
    example = _example([2, 3, 0], "+-")
    assert template_levels(example) == {1: "2+3", 2: None, 3: None}


def test_an_answer_already_in_the_prompt_is_no_leak() -> None:
    # 7+3-3 = 7: 7 is in the prompt, so "7+3" reveals nothing new.
    example = _example([7, 3, 3], "+-")
    assert template_levels(example) == {1: "7+3", 2: "7+3=10", 3: "7+3=10,10-3="}


def test_no_level_of_the_task_ever_contains_the_answer() -> None:
    usable = 0
    for example in sample_examples("train", 3000, seed=5):
        prompt_numbers = set(re.findall(r"\d+", example.prompt))
        for level, content in template_levels(example).items():
            if content is None:
                continue
            usable += 1
            new_numbers = set(re.findall(r"\d+", content)) - prompt_numbers
            assert example.answer not in new_numbers, (example, level, content)
    assert usable > 2 * 3000  # most examples have levels: the check is not vacuous


def test_worked_steps_are_correct_arithmetic() -> None:
    for example in sample_examples("train", 3000, seed=6):
        steps = parse_steps(worked_solution(example))  # parse_steps re-checks every value
        assert str(steps[-1].value) == example.answer


@pytest.mark.parametrize(
    ("solution", "message"),
    [("12+7=19,19-3=", "is not 'a<op>b=c'"), ("12+7=20", "is wrong"), ("12/3=4", "is not")],
)
def test_bad_reference_solutions_are_named(solution: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_steps(solution)


def test_an_example_without_a_solution_cannot_be_hinted() -> None:
    example = _example([12, 7], "+")
    bare = type(example)(prompt_id="x", prompt="12+7=", answer="19", task="arithmetic")
    with pytest.raises(ValueError, match="reference_solution"):
        template_levels(bare)


def test_a_free_text_solution_of_an_arithmetic_scored_task_is_split_as_text() -> None:
    # A file task scored by the arithmetic verifier, its solution in words: three sentences.
    example = TaskExample(
        prompt_id="f/1",
        prompt="What is 12+7-3?",
        answer="16",
        reference_solution="First add 12 and 7. That gives 19. Then subtract 3 to get 16.",
        task="arithmetic",
    )
    assert hint_mode_solution(example) == example.reference_solution
    # ℓ1 the first sentence, ℓ2 the first half (2 of 3), ℓ3 all but the last (which states 16).
    assert template_levels(example) == {
        1: "First add 12 and 7.",
        2: "First add 12 and 7. That gives 19.",
        3: "First add 12 and 7. That gives 19.",
    }
