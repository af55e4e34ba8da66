"""The worked arithmetic task's verifier: every valid computation of the prompt is valid work,
the reward is the answer's alone, and malformed work that ends right is counted."""

from __future__ import annotations

import itertools

import pytest

from adarl.reward.arithmetic_work import ArithmeticWorkVerifier, work_problem
from adarl.reward.pool import RewardPool
from adarl.tasks.arithmetic import make_example
from adarl.types import Completion, FinishReason, Rollout

VERIFIER = ArithmeticWorkVerifier()


def _chain(*operands: int):
    return make_example(list(operands), "+" * (len(operands) - 1), difficulty=0.0)


def test_by_hand() -> None:
    example = _chain(12, 7, 3)  # 12+7+3= → 22
    assert example.reference_solution == "12+7=19,19+3=22"
    for response in ("12+7=19,19+3=22", "7+3=10,12+10=22", "3+12=15,15+7=22", "12+3=15,7+15=22"):
        result = VERIFIER.verify(response, example)
        assert result.reward == 1.0 and not result.malformed_work, response
    # right answer, malformed work: scored 1, flagged
    for response in ("22", "12+7=19,19+2=22", "12+7=20,20+2=22", "5+17=22", "1+1=2,20+2=22"):
        result = VERIFIER.verify(response, example)
        assert result.reward == 1.0 and result.malformed_work, response
    # wrong answers, valid or not
    for response in ("12+7=19,19+3=23", "12+7=19", "12+7=19,19+3=22,22", "", "12+7=19,19+3="):
        assert VERIFIER.verify(response, example).reward == 0.0, response
    assert VERIFIER.verify("12+7=19,19+3=22<eos>junk", example).reward == 1.0


def test_every_order_and_grouping_of_a_sum_is_valid_work() -> None:
    """Brute force over the chains of 2-4 operands: every sequence of pairwise additions of the
    available values (any order, any grouping) is accepted with reward 1; changing any one step's
    result (so the work no longer computes the prompt) is flagged, and a wrong final value is
    reward 0."""
    for operands in ((12, 7, 3), (5, 5, 40, 11), (99, 10), (3, 3, 3, 3)):
        example = _chain(*operands)
        solutions = set(_all_computations(list(operands)))
        assert len(solutions) >= (1 if len(operands) == 2 else 3)
        for steps in solutions:
            text = ",".join(steps)
            assert work_problem(text, example.prompt) is None, text
            assert VERIFIER.verify(text, example).reward == 1.0
        for steps in list(solutions)[:5]:
            if len(steps) > 1:  # break the first step but keep the final value
                left, _, value = steps[0].partition("=")
                broken = [f"{left}={int(value) + 1}", *steps[1:]]
                result = VERIFIER.verify(",".join(broken), example)
                assert result.reward == 1.0 and result.malformed_work
            wrong = [*steps[:-1], steps[-1].rsplit("=", 1)[0] + f"={sum(operands) + 1}"]
            assert VERIFIER.verify(",".join(wrong), example).reward == 0.0


def _all_computations(values: list[int]):
    """Every sequence of steps `a+b=c` reducing `values` to one (ordered pairs, any order)."""
    if len(values) == 1:
        yield ()
        return
    for i, j in itertools.permutations(range(len(values)), 2):
        a, b = values[i], values[j]
        rest = [v for k, v in enumerate(values) if k not in (i, j)] + [a + b]
        for tail in _all_computations(rest):
            yield (f"{a}+{b}={a + b}", *tail)


def test_the_pool_counts_malformed_right_answers() -> None:
    example = _chain(12, 7, 3)
    rollouts = [
        Rollout(
            request_id="r",
            prompt_id=example.prompt_id,
            prompt_token_ids=(0,),
            completion=Completion(
                token_ids=(1,), logprobs=(-0.1,), finish_reason=FinishReason.STOP, text=text
            ),
            weight_version=0,
        )
        for text in ("12+7=19,19+3=22", "22", "21")
    ]
    with RewardPool(verifiers={"arithmetic": VERIFIER}, num_workers=1) as pool:
        pool.metrics()
        scored = pool.score(rollouts, [example] * 3)
        metrics = pool.metrics()
    assert [s.reward for s in scored] == [1.0, 1.0, 0.0]
    assert metrics["sampling/reward_malformed_correct"] == 1.0


@pytest.mark.parametrize("prompt", ["7=", "12+7="])
def test_short_prompts(prompt: str) -> None:
    assert work_problem("7", "7=") is None
    assert work_problem("12+7=19", "12+7=") is None
    assert work_problem("", prompt) == "no steps"
