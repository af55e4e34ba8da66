"""Exact-match (arithmetic) and math-verify verifiers: right, equivalent and wrong answers."""

from __future__ import annotations

import pytest

from adarl.reward.base import VerifierResult
from adarl.reward.exact import ExactMatchVerifier
from adarl.reward.math_verifier import MathVerifier
from adarl.types import TaskExample


def example(answer: str, task: str = "arithmetic") -> TaskExample:
    return TaskExample(prompt_id="p", prompt="12+7-3=", answer=answer, task=task)


@pytest.mark.parametrize(
    ("response", "reward"),
    [
        ("16", 1.0),
        (" 16 ", 1.0),  # whitespace around the answer is ignored
        ("16<eos>", 1.0),  # end-of-sequence decoded as text ends the answer
        ("16\n12+7=19", 1.0),  # so does a newline
        ("16</s>garbage", 1.0),
        ("", 0.0),
        ("15", 0.0),
        ("016", 0.0),  # exact: no numeric normalisation
        ("161", 0.0),  # a response that runs on past the answer is wrong
        ("16=16", 0.0),
        ("1 6", 0.0),
    ],
)
def test_exact_match(response: str, reward: float) -> None:
    assert ExactMatchVerifier().verify(response, example("16")) == VerifierResult(reward=reward)


def test_exact_match_custom_markers() -> None:
    verifier = ExactMatchVerifier(end_markers=("$",))
    assert verifier.verify("-5$7", example("-5")).reward == 1.0
    assert verifier.verify("-5<eos>", example("-5")).reward == 0.0  # not a marker any more
    with pytest.raises(ValueError, match="non-empty"):
        ExactMatchVerifier(end_markers=("",))


@pytest.mark.parametrize(
    ("response", "reward"),
    [
        ("47*30=1410,47*8=376,1410+376=1786", 1.0),  # the worked format: after the last "="
        ("47*30=1410,47*8=376,1410+376=1786<eos>junk=1786", 1.0),  # read up to the end marker
        ("=1786", 1.0),
        ("47*30=1410,47*8=376,1410+376=1785", 0.0),
        ("47*30=1786,47*8=376,1410+376=1785", 0.0),  # the answer in an earlier step is not it
        ("1786", 0.0),  # no marker, no answer: the format is rewarded
        ("1786=", 0.0),
    ],
)
def test_exact_match_after_an_answer_marker(response: str, reward: float) -> None:
    verifier = ExactMatchVerifier(answer_marker="=")
    assert verifier.verify(response, example("1786")).reward == reward


def test_an_empty_answer_marker_is_refused() -> None:
    with pytest.raises(ValueError, match="answer marker"):
        ExactMatchVerifier(answer_marker="")


def test_the_registry_passes_the_answer_marker_on() -> None:
    from adarl.config.reward import RewardConfig
    from adarl.reward.registry import build_verifier

    config = RewardConfig()
    config.exact_match.answer_marker = "="
    assert build_verifier("arithmetic", config).verify("5+3=8", example("8")).reward == 1.0
    assert build_verifier("arithmetic").verify("5+3=8", example("8")).reward == 0.0
    config.exact_match.answer_marker = ""
    with pytest.raises(ValueError, match="answer_marker is empty"):
        config.validate()


def test_verifier_result_invariants() -> None:
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        VerifierResult(reward=1.5)
    with pytest.raises(ValueError, match="reward 0"):
        VerifierResult(reward=1.0, error="crashed")
    assert VerifierResult.failure("x", timed_out=True) == VerifierResult(0.0, "x", True)


@pytest.fixture(scope="module")
def math_verifier() -> MathVerifier:
    return MathVerifier()


@pytest.mark.parametrize(
    ("gold", "response"),
    [
        ("\\frac{1}{2}", "So the answer is \\boxed{\\frac{1}{2}}."),
        ("\\frac{1}{2}", "\\boxed{0.5}"),
        ("\\frac{1}{2}", "\\boxed{1/2}"),
        ("\\frac{1}{2}", "\\boxed{\\dfrac12}"),
        ("0.5", "\\boxed{\\frac{1}{2}}"),
        ("42", "The total is \\boxed{42}"),
        ("$42$", "\\boxed{42.0}"),
        ("\\boxed{3\\sqrt{2}}", "\\boxed{\\sqrt{18}}"),
        ("\\frac{\\sqrt{2}}{2}", "\\boxed{\\frac{1}{\\sqrt{2}}}"),
        ("(x+1)^2", "\\boxed{x^2+2x+1}"),
        ("\\pi", "\\boxed{\\pi}"),
    ],
)
def test_math_equivalent_forms_are_right(
    math_verifier: MathVerifier, gold: str, response: str
) -> None:
    assert math_verifier.verify(response, example(gold, "math")) == VerifierResult(reward=1.0)


@pytest.mark.parametrize(
    ("gold", "response"),
    [
        ("\\frac{1}{2}", "\\boxed{\\frac{1}{3}}"),
        ("42", "\\boxed{43}"),
        ("42", "The answer is 42."),  # not boxed: no fallback extraction
        ("42", "no answer at all"),
        ("(x+1)^2", "\\boxed{x^2+1}"),
        ("\\pi", "\\boxed{3.14}"),
    ],
)
def test_math_wrong_or_unboxed_answers_score_zero_without_error(
    math_verifier: MathVerifier, gold: str, response: str
) -> None:
    assert math_verifier.verify(response, example(gold, "math")) == VerifierResult(reward=0.0)


def test_math_refuses_huge_responses_and_unparseable_gold(math_verifier: MathVerifier) -> None:
    result = MathVerifier(max_answer_chars=100).verify("x" * 101, example("1", "math"))
    assert result.reward == 0.0 and "max_answer_chars" in (result.error or "")
    with pytest.raises(ValueError, match="cannot parse the example's answer"):
        math_verifier.verify("\\boxed{1}", example("$$", "math"))


def test_check_gold_says_which_answers_a_verifier_cannot_read(math_verifier: MathVerifier) -> None:
    from adarl.reward.base import GoldChecker, gold_problem
    from adarl.reward.code_verifier import CodeVerifier

    assert math_verifier.check_gold(example("\\frac{1}{2}", "math")) is None
    for unreadable in ("$$", "\\text{}", "\\boxed{}"):
        problem = math_verifier.check_gold(example(unreadable, "math"))
        assert problem == f"math-verify finds no expression in the answer {unreadable!r}"

    code = CodeVerifier(isolation="python")
    stdio = '{"stdio": [{"input": "", "output": "ok\\n"}]}'
    assert code.check_gold(example(stdio, "code")) is None
    assert "not JSON tests" in (code.check_gold(example("print(1)", "code")) or "")
    assert "'fn_name'" in (code.check_gold(example('{"fn_name": "f"}', "code")) or "")

    # Exact match reads any answer: it implements no check, and gold_problem says "fine".
    assert not isinstance(ExactMatchVerifier(), GoldChecker)
    assert gold_problem(ExactMatchVerifier(), example("anything")) is None
    assert gold_problem(math_verifier, example("$$", "math")) is not None
