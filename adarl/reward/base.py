"""The verifier protocol: one response and its example in, a reward in [0, 1] and an error out.

A verifier may also implement `GoldChecker.check_gold`: whether it can judge responses against an
example's answer at all. Prompt loaders call it (through `gold_problem`) on every row, so an
answer the verifier cannot read is a bad row at load time (the task's `on_bad_row` policy),
never a prompt on which every response silently scores 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from adarl.types import TaskExample


@dataclass(frozen=True)
class VerifierResult:
    """`error` says why a response could not be judged normally (its program crashed or timed
    out, its answer could not be parsed, the verifier failed); the reward is then 0. A plain wrong
    answer is reward 0 with no error."""

    reward: float
    error: str | None = None
    timed_out: bool = False
    # A right answer reached by work the verifier judges malformed (the reward is the outcome's;
    # adarl/reward/arithmetic_work.py): counted, never penalised.
    malformed_work: bool = False

    def __post_init__(self) -> None:
        if not (math.isfinite(self.reward) and 0.0 <= self.reward <= 1.0):
            raise ValueError(f"a verifier reward must be in [0, 1], got {self.reward!r}")
        if self.error is not None and self.reward != 0.0:
            raise ValueError(f"a failed verification must have reward 0, got {self.reward!r}")

    @staticmethod
    def failure(error: str, *, timed_out: bool = False) -> VerifierResult:
        return VerifierResult(reward=0.0, error=error, timed_out=timed_out)


@runtime_checkable
class Verifier(Protocol):
    def verify(self, response: str, example: TaskExample) -> VerifierResult:
        """Score `response` (the decoded completion, without the prompt) against `example`.

        May raise or run long: the `RewardPool` turns both into reward 0 with an error."""
        ...


@runtime_checkable
class GoldChecker(Protocol):
    def check_gold(self, example: TaskExample) -> str | None:
        """None when responses to `example` can be judged against its answer, else why not
        (naming the answer): e.g. math-verify cannot parse it, or code tests are not valid JSON."""
        ...


def gold_problem(verifier: object, example: TaskExample) -> str | None:
    """`verifier.check_gold(example)` for verifiers that implement it; None for the others."""
    return verifier.check_gold(example) if isinstance(verifier, GoldChecker) else None
