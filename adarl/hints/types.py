"""The hint layer's records: what the allocator asks for and what it gets back."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from adarl.types import GenerationRequest, TaskExample

HintSource = Literal["template", "self", "model", "none"]


@dataclass(frozen=True)
class HintRequest:
    """Give prompt `prompt_id` a hint of level `level` (1..3; level 0, no hint, is never asked).

    `example.reference_solution` is what the hint is derived from. `step` is the training step
    that asks: the hint mode writes all three levels of a prompt in one generation, and a later
    request for the same prompt in the same step (sage's escalation) reuses that generation
    instead of writing new hints with the same weights."""

    prompt_id: str
    example: TaskExample
    level: int
    step: int = 0

    def __post_init__(self) -> None:
        if self.level not in (1, 2, 3):
            raise ValueError(
                f"hint request for {self.prompt_id!r}: level must be 1, 2 or 3 (0 means no hint "
                f"and is never requested), got {self.level}"
            )
        if self.prompt_id != self.example.prompt_id:
            raise ValueError(
                f"hint request: prompt_id {self.prompt_id!r} differs from its example's "
                f"{self.example.prompt_id!r}"
            )


@dataclass(frozen=True)
class Hint:
    """The answer to one `HintRequest`.

    `text` is appended verbatim to the prompt (`PromptRequest.hint`, adarl/rollout/codec.py),
    e.g. `"[12+7=19]"`; None means no usable hint, and the prompt is then not re-rolled with one.
    `source` says who wrote it ("none" when `text` is None); `error` says why `text` is None or
    why a fallback source was used."""

    prompt_id: str
    level: int
    text: str | None
    source: HintSource
    error: str | None = None


@dataclass(frozen=True)
class HintTurn:
    """One turn of a hint call (`HintGenerator.begin_hints`, `begin_write_ahead`, `resume`):
    the generations the generator needs next, or, once there are none, the call's answer.

    The generator writes hint-mode prompts and reads what comes back; whoever holds the engines
    (the driver, through `HintRunner`) runs `generations` and hands their results to `resume`.
    So the generator can live in its own process (a Ray actor) while `self` hints are still
    written on the policy's engines through the rollout pool."""

    generations: tuple[GenerationRequest, ...] = ()
    hints: tuple[Hint, ...] = ()  # begin_hints' answer, one per request, in order
    written_ahead: Mapping[str, float] | None = None  # begin_write_ahead's answer: its metrics

    @property
    def done(self) -> bool:
        return not self.generations
