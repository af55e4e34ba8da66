"""The best constant answer: the training split's most common answer, scored on held-out."""

from __future__ import annotations

import numpy as np
import pytest

from adarl.evaluation import EvalResult
from adarl.reward.exact import ExactMatchVerifier
from adarl.reward.math_verifier import MathVerifier
from adarl.tasks.baselines import ConstantAnswer, best_constant_answer, constant_answer_rewards
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


def test_an_evaluation_states_its_paired_lead_over_the_constant_answer() -> None:
    """pass@1 minus the constant's reward, prompt by prompt: on 4 prompts the policy passes 6, 2,
    8 and 0 of 8 samples where the constant answer scores 1, 0, 0, 0, so d = (-0.25, 0.25, 1, 0):
    lead 0.25, SE sd(d)/2."""
    result = EvalResult(
        accuracy=0.5,
        greedy_accuracy=None,
        num_prompts=4,
        samples_per_prompt=8,
        completions=[],
        correct=[6, 2, 8, 0],
        best_constant=ConstantAnswer(answer="2", accuracy=0.25),
        constant_rewards=[1.0, 0.0, 0.0, 0.0],
    )
    d = np.array([-0.25, 0.25, 1.0, 0.0])
    lead = result.lead_over_best_constant()
    assert lead == pytest.approx({"lead": 0.25, "se": d.std(ddof=1) / 2, "prompts": 4.0})
    # It survives a checkpoint (EvalResult's state) and is absent without a constant answer.
    assert EvalResult.from_state_dict(result.state_dict()).lead_over_best_constant() == lead
    bare = EvalResult(0.5, None, 4, 8, [], correct=[6, 2, 8, 0])
    assert bare.lead_over_best_constant() is None


def test_the_constant_rewards_are_the_verifier_s_per_prompt() -> None:
    train, test = _examples("221512", "t"), _examples("21232", "h")
    rewards = constant_answer_rewards("2", test, ExactMatchVerifier())
    assert rewards == [1.0, 0.0, 1.0, 0.0, 1.0]
    assert sum(rewards) / len(rewards) == best_constant_answer(train, test, ExactMatchVerifier())[1]
