"""Exact-match verifier (the arithmetic task).

Response format: the answer itself, then end-of-sequence. The response is read up to the first
end marker (the engine normally strips the end-of-sequence token; `end_markers` catch it when it
was decoded as text, and a newline); whitespace around the answer is ignored; everything else must
equal `example.answer` exactly. "16" matches "16"; "016", "16=16", "1 6" and "16<pad>" do not.
A response that never ends and runs into the length limit is therefore wrong unless it happens to
end with nothing after the answer.
"""

from __future__ import annotations

from collections.abc import Sequence

from adarl.reward.base import VerifierResult
from adarl.types import TaskExample

DEFAULT_END_MARKERS: tuple[str, ...] = ("\n", "<eos>", "</s>", "<|endoftext|>", "<|im_end|>")


class ExactMatchVerifier:
    def __init__(self, *, end_markers: Sequence[str] = DEFAULT_END_MARKERS) -> None:
        if any(not marker for marker in end_markers):
            raise ValueError("ExactMatchVerifier: end markers must be non-empty strings")
        self._end_markers = tuple(end_markers)

    def extract_answer(self, response: str) -> str:
        end = len(response)
        for marker in self._end_markers:
            found = response.find(marker)
            if found != -1:
                end = min(end, found)
        return response[:end].strip()

    def verify(self, response: str, example: TaskExample) -> VerifierResult:
        return VerifierResult(reward=float(self.extract_answer(response) == example.answer.strip()))
