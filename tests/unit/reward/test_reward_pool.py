"""RewardPool: order, concurrency, and verifiers that raise or hang (reward 0, never a crash)."""

from __future__ import annotations

import threading
import time

import pytest

from adarl.reward.base import VerifierResult
from adarl.reward.exact import ExactMatchVerifier
from adarl.reward.pool import RewardPool
from adarl.types import Completion, FinishReason, Rollout, TaskExample


def rollout(text: str, prompt_id: str = "p") -> Rollout:
    completion = Completion(
        token_ids=(1,), logprobs=(-0.1,), finish_reason=FinishReason.STOP, text=text
    )
    return Rollout(
        request_id="r",
        prompt_id=prompt_id,
        prompt_token_ids=(0,),
        completion=completion,
        weight_version=0,
    )


def example(answer: str = "1", task: str = "arithmetic", prompt_id: str = "p") -> TaskExample:
    return TaskExample(prompt_id=prompt_id, prompt="q", answer=answer, task=task)


class ScriptedVerifier:
    """Behaviour chosen by the response text: 'raise', 'hang' (until released), or a reward."""

    def __init__(self) -> None:
        self.release = threading.Event()

    def verify(self, response: str, example: TaskExample) -> VerifierResult:
        if response == "raise":
            raise RuntimeError("verifier bug")
        if response == "hang":
            self.release.wait(timeout=60)
            return VerifierResult(reward=1.0)
        return VerifierResult(reward=float(response))


def test_results_come_back_in_input_order() -> None:
    texts = [str(i % 10) for i in range(200)]
    with RewardPool(verifiers={"arithmetic": ExactMatchVerifier()}, num_workers=4) as pool:
        scored = pool.score([rollout(t) for t in texts], [example(str(i % 3)) for i in range(200)])
    assert [s.reward for s in scored] == [float(str(i % 10) == str(i % 3)) for i in range(200)]
    assert [s.rollout.completion.text for s in scored] == texts


def test_verifications_run_concurrently() -> None:
    # Four verifications that each wait for the other three: a serial pool would break the barrier.
    barrier = threading.Barrier(4, timeout=10)

    class Rendezvous:
        def verify(self, response: str, example: TaskExample) -> VerifierResult:
            barrier.wait()
            return VerifierResult(reward=1.0)

    with RewardPool(verifiers={"arithmetic": Rendezvous()}, num_workers=4) as pool:
        scored = pool.score([rollout("x")] * 4, [example()] * 4)
    assert [(s.reward, s.reward_error) for s in scored] == [(1.0, None)] * 4


def test_raising_verifier_gives_zero_and_an_error() -> None:
    with RewardPool(verifiers={"arithmetic": ScriptedVerifier()}, num_workers=2) as pool:
        scored = pool.score([rollout("1"), rollout("raise"), rollout("0.5")], [example()] * 3)
        metrics = pool.metrics()
    assert [s.reward for s in scored] == [1.0, 0.0, 0.5]
    assert scored[1].reward_error == "RuntimeError: verifier bug"
    assert metrics["sampling/reward_errors"] == 1.0
    assert metrics["sampling/reward_verifier_exceptions"] == 1.0
    assert metrics["sampling/reward_responses"] == 3.0
    assert pool.metrics()["sampling/reward_responses"] == 0.0  # metrics cover one interval each


def test_hanging_verifier_times_out_and_its_worker_is_replaced() -> None:
    verifier = ScriptedVerifier()
    pool = RewardPool(verifiers={"arithmetic": verifier}, num_workers=1, timeout_s=0.3)
    try:
        start = time.monotonic()
        scored = pool.score([rollout("hang"), rollout("1")], [example()] * 2)
        elapsed = time.monotonic() - start
        assert elapsed < 0.3 + 1.0  # one deadline plus scheduling margin, not the 60 s hang
        assert scored[0].reward == 0.0 and "reward.timeout_s=0.3" in (scored[0].reward_error or "")
        assert (scored[1].reward, scored[1].reward_error) == (1.0, None)
        metrics = pool.metrics()
        assert metrics["sampling/reward_timeouts"] == 1.0
        assert metrics["sampling/reward_stuck_threads"] == 1.0
        # The only worker is stuck, yet the pool still scores: a replacement took its place.
        assert [s.reward for s in pool.score([rollout("1")] * 3, [example()] * 3)] == [1.0] * 3
    finally:
        verifier.release.set()
        pool.close()


def test_examples_by_prompt_id_and_dispatch_by_task() -> None:
    verifiers = {"arithmetic": ExactMatchVerifier(), "other": ScriptedVerifier()}
    examples = {"a": example("7", "arithmetic", "a"), "b": example("x", "other", "b")}
    with RewardPool(verifiers=verifiers, num_workers=2) as pool:
        scored = pool.score([rollout("7", "a"), rollout("0.25", "b")], examples)
        assert [s.reward for s in scored] == [1.0, 0.25]
        with pytest.raises(ValueError, match="no verifier for task 'math'"):
            pool.score([rollout("1")], [example(task="math")])
        with pytest.raises(ValueError, match="no example for prompt ids"):
            pool.score([rollout("1", "zzz")], examples)
        with pytest.raises(ValueError, match="1 rollouts but 2 examples"):
            pool.score([rollout("1")], [example(), example()])


def test_single_verifier_scores_examples_without_a_task_name() -> None:
    with RewardPool(verifiers={"arithmetic": ExactMatchVerifier()}) as pool:
        assert pool.score([rollout("3")], [example("3", task="")])[0].reward == 1.0


def test_a_real_verifier_that_raises_is_counted_per_window() -> None:
    # A math example whose answer math-verify cannot parse (loading normally refuses it as a bad
    # row): every response raises inside MathVerifier.verify and is counted as an exception.
    from adarl.reward.math_verifier import MathVerifier

    bad, good = example("$$", task="math", prompt_id="bad"), example("2", task="math")
    with RewardPool(verifiers={"math": MathVerifier()}, num_workers=2) as pool:
        pool.metrics()  # open the window
        scored = pool.score(
            [rollout("\\boxed{2}", "bad"), rollout("\\boxed{2}"), rollout("\\boxed{2}", "bad")],
            [bad, good, bad],
        )
        window = pool.metrics()
        pool.score([rollout("\\boxed{2}")], [good])
        next_window = pool.metrics()
    assert [s.reward for s in scored] == [0.0, 1.0, 0.0]
    assert "cannot parse the example's answer '$$'" in (scored[0].reward_error or "")
    assert window["sampling/reward_verifier_exceptions"] == 2.0
    assert window["sampling/reward_responses"] == 3.0
    assert next_window["sampling/reward_verifier_exceptions"] == 0.0  # counts do not carry over
