"""The verifier protocol: one response and its example in, a reward in [0, 1] and an error out."""

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
