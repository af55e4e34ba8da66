"""Math verifier through the `math-verify` package (symbolic and numeric equivalence).

Response format: the final answer in `\\boxed{...}`; anything else in the response is ignored. A
response without a parseable `\\boxed{...}` is wrong (reward 0, no error). Following math-verify,
several boxed answers are read together as one set (`\\boxed{3} ... \\boxed{1/2}` is `{3, 1/2}`).
The example's answer is read as LaTeX (`"\\frac{1}{2}"`, `"0.5"`, `"x^2+1"`; a `\\boxed{}` or `$`
around it is fine); an answer math-verify cannot parse makes `verify` raise (a data problem).
`check_gold` finds such answers when the prompts are loaded (a bad row "unparseable_answer");
parsing costs ≈1.6 ms per distinct answer (measured: 1,500 fractions, integers and surds in
2.4 s), and the parsed answers are cached for `verify`.

Equivalent forms match: `\\frac12`, `0.5`, `1/2` and `\\dfrac{1}{2}` all equal `\\frac{1}{2}`.

Timeouts: math-verify's own timeout uses `signal.alarm`, which only works in a process's main
thread; there it is used (`timeout_s`). In worker threads (the `RewardPool`) it is off and the
pool's deadline bounds a stuck comparison instead.
"""

from __future__ import annotations

import functools
import threading
from typing import Any

from adarl.reward.base import VerifierResult
from adarl.types import TaskExample


class UnparseableAnswerError(ValueError):
    """The example's answer yields nothing math-verify can compare with."""


@functools.cache
def _math_verify() -> Any:
    import math_verify
    import math_verify.grader
    import math_verify.parser

    # math-verify warns on every process that its timeout is off; adarl bounds the call itself.
    math_verify.grader.TIMEOUT_WARNING_SHOWN = True
    math_verify.parser.TIMEOUT_WARNING_SHOWN = True
    return math_verify


class MathVerifier:
    def __init__(self, *, max_answer_chars: int = 20_000, timeout_s: int = 5) -> None:
        self._max_answer_chars = max_answer_chars
        self._timeout_s = timeout_s
        mv = _math_verify()
        # Boxed answers only: no "the answer is ..." or bare-number fallbacks.
        self._extraction = [
            mv.LatexExtractionConfig(boxed_match_priority=0, try_extract_without_anchor=False)
        ]
        self._gold_cache: dict[str, list[Any]] = {}
        self._lock = threading.Lock()

    def _timeout(self) -> int | None:
        return self._timeout_s if threading.current_thread() is threading.main_thread() else None

    def _gold(self, answer: str) -> list[Any]:
        with self._lock:
            cached = self._gold_cache.get(answer)
        if cached is not None:
            return cached
        text = answer.strip()
        if "\\boxed" not in text:
            text = f"\\boxed{{{text.strip('$')}}}"
        gold = _math_verify().parse(
            text, self._extraction, parsing_timeout=self._timeout(), raise_on_error=True
        )
        if not gold:
            raise UnparseableAnswerError(
                f"math verifier: cannot parse the example's answer {answer!r}"
            )
        with self._lock:
            self._gold_cache[answer] = gold
        return gold

    def check_gold(self, example: TaskExample) -> str | None:
        """None if math-verify parses the example's answer, else why not (`GoldChecker`)."""
        try:
            self._gold(example.answer)
        except UnparseableAnswerError:
            return f"math-verify finds no expression in the answer {example.answer!r}"
        except Exception as error:  # whatever math-verify raises on this answer is the reason
            return (
                f"math-verify fails on the answer {example.answer!r} "
                f"({type(error).__name__}: {error})"
            )
        return None

    def verify(self, response: str, example: TaskExample) -> VerifierResult:
        gold = self._gold(example.answer)
        if len(response) > self._max_answer_chars:
            return VerifierResult.failure(
                f"response has {len(response)} characters > reward.math.max_answer_chars="
                f"{self._max_answer_chars}; not parsed"
            )
        mv = _math_verify()
        predicted = mv.parse(response, self._extraction, parsing_timeout=self._timeout())
        if not predicted:
            return VerifierResult(reward=0.0)
        return VerifierResult(
            reward=float(mv.verify(gold, predicted, timeout_seconds=self._timeout()))
        )
