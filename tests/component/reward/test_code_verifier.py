"""CodeVerifier end to end (real subprocesses): test formats, rewards, budgets, and the pool."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from adarl.reward.code_verifier import CodeVerifier
from adarl.reward.pool import RewardPool
from adarl.types import Completion, FinishReason, Rollout, TaskExample

ADD_PROGRAM = "a, b = map(int, input().split())\nprint(a + b)"


def stdio_example(cases: list[tuple[str, str]]) -> TaskExample:
    tests = {"stdio": [{"input": i, "output": o} for i, o in cases]}
    return TaskExample(prompt_id="add", prompt="add", answer=json.dumps(tests), task="code")


def asserts_example(asserts: list[str]) -> TaskExample:
    return TaskExample(
        prompt_id="f", prompt="f", answer=json.dumps({"asserts": asserts}), task="code"
    )


@pytest.fixture
def code_verifier(tmp_path: Path) -> CodeVerifier:
    return CodeVerifier(timeout_s=5.0, memory_limit_mb=256, work_root=str(tmp_path))


def test_stdio_all_pass_and_a_wrong_output(code_verifier: CodeVerifier) -> None:
    example = stdio_example([("1 2\n", "3\n"), ("10 -4\n", "6"), ("0 0", "0\n\n")])
    right = code_verifier.verify(f"Solution:\n```python\n{ADD_PROGRAM}\n```", example)
    assert (right.reward, right.error) == (1.0, None)
    wrong = code_verifier.verify("print(3)", example)  # right on the first case only
    assert (wrong.reward, wrong.error) == (0.0, None)  # a wrong answer is not an error


def test_partial_credit_counts_passing_cases(tmp_path: Path) -> None:
    partial = CodeVerifier(partial_credit=True, memory_limit_mb=256, work_root=str(tmp_path))
    example = stdio_example([("1 2\n", "3\n"), ("2 2\n", "3\n"), ("5 5\n", "3\n")])
    assert partial.verify("input()\nprint(3)", example).reward == pytest.approx(1.0)
    assert partial.verify(ADD_PROGRAM, example).reward == pytest.approx(1 / 3)
    crashed = partial.verify("raise SystemExit(2)", example)
    assert crashed.reward == 0.0 and "exited with status 2" in (crashed.error or "")


def test_asserts(code_verifier: CodeVerifier) -> None:
    example = asserts_example(["assert add(1, 2) == 3", "assert add(-1, 1) == 0"])
    program = "def add(a, b):\n    return a + b\n\nif __name__ == '__main__':\n    input()"
    assert code_verifier.verify(program, example).reward == 1.0  # the main block did not run
    assert code_verifier.verify("def add(a, b):\n    return 3", example).reward == 0.0


def test_exiting_early_does_not_pass_asserts(code_verifier: CodeVerifier) -> None:
    example = asserts_example(["assert add(1, 2) == 3"])
    # sys.exit(0) before the tests: the tests still run (and fail: add is undefined).
    quitter = code_verifier.verify("import sys\nsys.exit(0)\ndef add(a, b): return a + b", example)
    assert quitter.reward == 0.0
    # os._exit(0) skips the tests entirely: no report, reward 0 with an error.
    hard_quitter = code_verifier.verify("import os\nos._exit(0)", example)
    assert hard_quitter.reward == 0.0 and "before finishing" in (hard_quitter.error or "")


def test_total_budget_bounds_a_verification(tmp_path: Path) -> None:
    code_verifier = CodeVerifier(
        timeout_s=5.0, total_timeout_s=0.8, memory_limit_mb=256, work_root=str(tmp_path)
    )
    example = stdio_example([("", "ok\n")] * 10)
    start = time.monotonic()
    result = code_verifier.verify("import time\ntime.sleep(1.0)\nprint('ok')", example)
    # Without the total budget the 10 tests take 10 s; 3 s of slack for starting and killing an
    # interpreter on a loaded machine (measured 2.3 s in all with four test jobs on 2 cores).
    assert time.monotonic() - start < 0.8 + 3.0
    assert result.reward == 0.0 and result.timed_out
    assert "timed out" in (result.error or "") or "total_timeout_s" in (result.error or "")


def test_no_code_is_an_error(code_verifier: CodeVerifier) -> None:
    result = code_verifier.verify("```python\n\n```", stdio_example([("", "")]))
    assert result.reward == 0.0 and result.error == "the response contains no code"


def test_pool_scores_programs_and_counts_timeouts(tmp_path: Path) -> None:
    # 2 s: the limit that cuts the loop is also the benign programs' budget, and four interpreters
    # starting at once on a loaded 2-core machine took over 1 s (measured: a flaky failure).
    code_verifier = CodeVerifier(timeout_s=2.0, memory_limit_mb=256, work_root=str(tmp_path))
    example = stdio_example([("1 2\n", "3\n")])
    programs = [ADD_PROGRAM, "while True:\n    pass", "print(4)", ADD_PROGRAM]

    def as_rollout(text: str) -> Rollout:
        completion = Completion(
            token_ids=(1,), logprobs=(0.0,), finish_reason=FinishReason.STOP, text=text
        )
        return Rollout(
            request_id="r",
            prompt_id="add",
            prompt_token_ids=(0,),
            completion=completion,
            weight_version=0,
        )

    with RewardPool(verifiers={"code": code_verifier}, num_workers=4, timeout_s=30.0) as pool:
        start = time.monotonic()
        scored = pool.score([as_rollout(p) for p in programs], [example] * 4)
        elapsed = time.monotonic() - start
        metrics = pool.metrics()
    assert [s.reward for s in scored] == [1.0, 0.0, 0.0, 1.0]
    assert "timed out" in (scored[1].reward_error or "")
    assert elapsed < 2.0 + 2.0  # the loop was cut at its 2 s wall limit
    assert metrics["sampling/reward_timeouts"] == 1.0 and metrics["sampling/reward_errors"] == 1.0
