"""Code verifier: runs the candidate program against the example's tests in the `Sandbox`.

Response format: Python code, preferably in a fenced block (```python ... ```); the last fenced
block whose language is empty, `python`, `py` or `python3` is the program (an unclosed block, as
in a truncated response, runs to the end); without fences the whole response is the program.

Test format (`TaskExample.answer`, JSON), one of:

* stdin/stdout: `{"stdio": [{"input": "1 2\\n", "output": "3\\n"}, ...]}`, or the APPS/TACO
  form `{"inputs": [...], "outputs": [...]}`, or a bare list `[{"input": ..., "output": ...}]`.
  Each case is one run of the program with `input` on stdin; it passes when stdout equals
  `output` up to trailing whitespace on each line and leading/trailing blank lines.
* asserts: `{"asserts": ["assert add(1, 2) == 3", ...]}`. One run: the program is executed as
  module `solution` (its `if __name__ == "__main__":` block does not run), then each assert in
  its namespace; a test passes when it raises nothing.

Reward: 1 if every test passes, else 0; with `partial_credit`, the fraction passed. A program
that fails to run to completion — a crash, the wall-time or CPU limit, the memory limit, output
over the limit, exiting early, leaving processes behind — gets reward 0 and an error saying
which (with partial credit: only if no test passed). Without partial credit, stdin/stdout cases
stop at the first failure. `total_timeout_s` bounds one verification over all its runs.

An answer that is not one of the test formats above is a data problem: `check_gold` reports it
when the prompts are loaded (a bad row "unparseable_answer"), and `verify` raises on it.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass

from adarl.reward.base import VerifierResult
from adarl.reward.sandbox import Isolation, Sandbox, SandboxLimits
from adarl.types import TaskExample

_FENCED_BLOCK = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)```", re.DOTALL)
_OPEN_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n")
_PYTHON_TAGS = ("", "python", "py", "python3")


def extract_code(response: str) -> str:
    """The program in a response (see the module docstring for the rule)."""
    blocks = [code for tag, code in _FENCED_BLOCK.findall(response) if tag.lower() in _PYTHON_TAGS]
    if blocks:
        return blocks[-1]
    opening = list(_OPEN_FENCE.finditer(response))
    if opening and opening[-1].group(1).lower() in _PYTHON_TAGS:
        return response[opening[-1].end() :]  # a block cut off by the length limit
    return response


@dataclass(frozen=True)
class CodeTests:
    stdio: tuple[tuple[str, str], ...] = ()
    asserts: tuple[str, ...] | None = None

    @property
    def count(self) -> int:
        return len(self.asserts) if self.asserts is not None else len(self.stdio)


def parse_tests(answer: str) -> CodeTests:
    """Parse the test spec of a code example; ValueError names what is wrong."""
    try:
        spec = json.loads(answer)
    except json.JSONDecodeError as error:
        raise ValueError(
            f"code verifier: the example's answer is not JSON tests ({error})"
        ) from None
    if isinstance(spec, dict) and "asserts" in spec:
        asserts = spec["asserts"]
        if not isinstance(asserts, list) or not all(isinstance(a, str) for a in asserts):
            raise ValueError("code verifier: 'asserts' must be a list of strings")
        if not asserts:
            raise ValueError("code verifier: 'asserts' is empty")
        return CodeTests(asserts=tuple(asserts))
    if isinstance(spec, dict) and "fn_name" in spec:
        raise ValueError(
            "code verifier: function-call tests ('fn_name') are not supported; write them as "
            '{"asserts": ["assert f(...) == ..."]}'
        )
    if isinstance(spec, dict) and "inputs" in spec and "outputs" in spec:
        if len(spec["inputs"]) != len(spec["outputs"]):
            raise ValueError("code verifier: 'inputs' and 'outputs' differ in length")
        cases = [
            {"input": i, "output": o} for i, o in zip(spec["inputs"], spec["outputs"], strict=True)
        ]
    elif isinstance(spec, dict) and "stdio" in spec:
        cases = spec["stdio"]
    elif isinstance(spec, list):
        cases = spec
    else:
        raise ValueError(
            "code verifier: tests must be {'stdio': [...]}, {'inputs': [...], 'outputs': [...]}, "
            "a list of {'input', 'output'} or {'asserts': [...]}"
        )
    if not isinstance(cases, list) or not cases:
        raise ValueError("code verifier: no stdin/stdout test cases")
    stdio = []
    for index, case in enumerate(cases):
        if not (
            isinstance(case, dict)
            and isinstance(case.get("input"), str)
            and isinstance(case.get("output"), str)
        ):
            raise ValueError(
                f"code verifier: test case {index} must be an object with string 'input' and "
                "'output'"
            )
        stdio.append((case["input"], case["output"]))
    return CodeTests(stdio=tuple(stdio))


def normalize_output(text: str) -> str:
    """Trailing whitespace of each line and leading/trailing blank lines do not count."""
    lines = [line.rstrip() for line in text.splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    while lines and not lines[0]:
        lines.pop(0)
    return "\n".join(lines)


class CodeVerifier:
    def __init__(
        self,
        *,
        timeout_s: float = 5.0,
        total_timeout_s: float = 30.0,
        cpu_time_limit_s: float | None = None,
        memory_limit_mb: int = 1024,
        max_output_bytes: int = 1_000_000,
        partial_credit: bool = False,
        isolation: Isolation = "auto",
        python_executable: str | None = None,
        work_root: str | None = None,
    ) -> None:
        """Limits and isolation: see adarl/config/reward.py (`CodeConfig`); `work_root`: where
        run directories are created (default: the system temp dir)."""
        self._sandbox = Sandbox(
            limits=SandboxLimits(
                timeout_s=timeout_s,
                cpu_time_limit_s=cpu_time_limit_s,
                memory_limit_mb=memory_limit_mb,
                max_output_bytes=max_output_bytes,
            ),
            isolation=isolation,
            python_executable=python_executable,
            work_root=work_root,
        )
        self._total_timeout_s = total_timeout_s
        self._partial_credit = partial_credit

    @property
    def sandbox(self) -> Sandbox:
        return self._sandbox

    def check_gold(self, example: TaskExample) -> str | None:
        """None if the example's answer is a test spec this verifier runs, else why not
        (`GoldChecker`)."""
        try:
            parse_tests(example.answer)
        except ValueError as error:
            return str(error)
        return None

    def verify(self, response: str, example: TaskExample) -> VerifierResult:
        tests = parse_tests(example.answer)
        program = extract_code(response)
        if not program.strip():
            return VerifierResult.failure("the response contains no code")
        if tests.asserts is not None:
            result = self._sandbox.run(
                program, asserts=list(tests.asserts), timeout_s=self._total_timeout_s
            )
            failure = result.failure()
            if failure is not None:
                return VerifierResult.failure(failure, timed_out=result.timed_out)
            assert result.report is not None  # failure() is None only for a completed run
            passed = int(result.report["asserts_passed"])
            return self._reward(passed, tests.count)

        deadline = time.monotonic() + self._total_timeout_s
        passed, first_failure = 0, None
        for index, (stdin, expected) in enumerate(tests.stdio):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                first_failure = first_failure or (
                    f"reward.code.total_timeout_s={self._total_timeout_s} used up after "
                    f"{index} of {tests.count} tests",
                    True,
                )
                break
            result = self._sandbox.run(program, stdin=stdin, timeout_s=remaining)
            failure = result.failure()
            if failure is None and normalize_output(result.stdout) == normalize_output(expected):
                passed += 1
                continue
            if failure is not None and first_failure is None:
                first_failure = (f"test {index}: {failure}", result.timed_out)
            if not self._partial_credit:
                break
        if first_failure is not None and (passed == 0 or not self._partial_credit):
            return VerifierResult.failure(first_failure[0], timed_out=first_failure[1])
        return self._reward(passed, tests.count)

    def _reward(self, passed: int, total: int) -> VerifierResult:
        if self._partial_credit:
            return VerifierResult(reward=passed / total)
        return VerifierResult(reward=float(passed == total))
