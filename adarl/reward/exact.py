"""Exact-match verifier (the arithmetic task).

Response format: the answer itself, then end-of-sequence. The response is read up to the first
end marker (the engine normally strips the end-of-sequence token; `end_markers` catch it when it
was decoded as text, and a newline); whitespace around the answer is ignored; everything else must
equal `example.answer` exactly. "16" matches "16"; "016", "16=16", "1 6" and "16<pad>" do not.
A response that never ends and runs into the length limit is therefore wrong unless it happens to
end with nothing after the answer.

With an `answer_marker` (`reward.exact_match.answer_marker`), the answer is what follows the
marker's last occurrence: for a policy that writes its worked solution first, e.g. "=" for the
built-in task's worked format, `47*30=1410,47*8=376,1410+376=1786` → "1786" (or "#### " for
GSM8K-style answers). A response without the marker has no answer and is wrong: the format is
part of what is rewarded.
"""

from __future__ import annotations

from collections.abc import Sequence

from adarl.reward.base import VerifierResult
from adarl.types import TaskExample

DEFAULT_END_MARKERS: tuple[str, ...] = ("\n", "<eos>", "</s>", "<|endoftext|>", "<|im_end|>")


class ExactMatchVerifier:
    def __init__(
        self, *, end_markers: Sequence[str] = DEFAULT_END_MARKERS, answer_marker: str | None = None
    ) -> None:
        if any(not marker for marker in end_markers):
            raise ValueError("ExactMatchVerifier: end markers must be non-empty strings")
        if answer_marker == "":
            raise ValueError("ExactMatchVerifier: the answer marker must be None or non-empty")
        self._end_markers = tuple(end_markers)
        self._answer_marker = answer_marker

    @property
    def end_markers(self) -> tuple[str, ...]:
        return self._end_markers

    def extract_answer(self, response: str) -> str:
        end = len(response)
        for marker in self._end_markers:
            found = response.find(marker)
            if found != -1:
                end = min(end, found)
        text = response[:end]
        if self._answer_marker is not None:
            _, marker, answer = text.rpartition(self._answer_marker)
            text = answer if marker else ""
        return text.strip()

    def verify(self, response: str, example: TaskExample) -> VerifierResult:
        return VerifierResult(reward=float(self.extract_answer(response) == example.answer.strip()))
