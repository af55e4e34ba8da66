"""The best constant answer: the training split's most common answer, scored on held-out."""

from __future__ import annotations

import pytest

from adarl.reward.exact import ExactMatchVerifier
from adarl.reward.math_verifier import MathVerifier
from adarl.tasks.baselines import ConstantAnswer, best_constant_answer
from adarl.types import TaskExample


def _examples(answers: str, prefix: str) -> list[TaskExample]:
    return [
        TaskExample(prompt_id=f"{prefix}{i}", prompt=f"{prefix}{i}?", answer=a, task="exact_match")
        for i, a in enumerate(answers)
    ]


def test_the_most_common_training_answer_scored_on_held_out() -> None:
    # Training answers: 3 × "2", 2 × "1", 1 × "5". Held out: "2" three times in five → 0.6.
    train, test = _examples("221512", "t"), _examples("21232", "h")
    result = best_constant_answer(train, test, ExactMatchVerifier())
    assert result == ConstantAnswer(answer="2", accuracy=0.6)
    answer, accuracy = result  # unpacks as (answer, accuracy)
    assert (answer, accuracy) == ("2", 0.6)


def test_ties_go_to_the_smallest_answer_whatever_the_held_out_set() -> None:
    train = _examples("7744", "t")
    for held in ("777", "444"):
        assert best_constant_answer(train, _examples(held, "h"), ExactMatchVerifier()).answer == "4"


def test_the_response_renders_the_answer_for_the_verifier() -> None:
    train = [TaskExample("t0", "x?", "\\frac{1}{2}", task="math")]
    test = [TaskExample("h0", "y?", "0.5", task="math"), TaskExample("h1", "z?", "2", task="math")]
    bare = best_constant_answer(train, test, MathVerifier())
    boxed = best_constant_answer(train, test, MathVerifier(), response=lambda a: f"\\boxed{{{a}}}")
    assert (bare.accuracy, boxed.accuracy) == (0.0, 0.5)


def test_empty_splits_are_refused() -> None:
    with pytest.raises(ValueError, match="held-out"):
        best_constant_answer(_examples("1", "t"), [], ExactMatchVerifier())
    with pytest.raises(ValueError, match="training"):
        best_constant_answer([], _examples("1", "h"), ExactMatchVerifier())


def test_runs_report_a_constant_answer_except_for_programs() -> None:
    from adarl.reward.registry import verifier_names
    from adarl.tasks.baselines import constant_answer_applies

    assert not constant_answer_applies("code")
    assert all(constant_answer_applies(n) for n in verifier_names() if n != "code")
