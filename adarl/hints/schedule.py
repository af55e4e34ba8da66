"""Hint schedules: which level a collapsed prompt gets. Small stateful objects, no Ray inside.

The allocator declares a prompt collapsed from its streamed outcomes (`CollapseRule`), asks the
schedule for the level of its `attempt`-th hint this step, and rolls the prompt again on
(x, hint). A prompt's trained group is always rolled under one hint (never a mix: by Jensen's
inequality, spreading one prompt's samples over several hints lowers the expected gate at the
same mean pass rate; docs/algorithms.md "Hints"). After the step the allocator reports each
prompt's pass rate at the level it was rolled with (`observe`).

* `off`: never a hint (the default; evaluation and deployment are always level 0).
* `sage`: escalate within the step: attempt a gets level a (1 → 2 → 3) while the prompt is still
  collapsed, then no more hints; from `first_level` instead of 1 if set. Stateless.
* `sage_light`: one hint per prompt per step, at a per-prompt level kept across epochs: up one
  when the accuracy observed at a level is ≤ `up_threshold`, down one when it is
  > `down_threshold` (SAGE-light). A collapsed prompt gets at least level 1 (`first_level`).
  Checkpointed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from adarl.config.hints import HintsConfig

MAX_LEVEL = 3


@runtime_checkable
class HintSchedule(Protocol):
    def level(self, prompt_id: str, attempt: int) -> int | None:
        """The level of the `attempt`-th hint (1-based) for a prompt collapsed in this step;
        None = give it no (more) hints this step."""
        ...

    def observe(self, prompt_id: str, *, level: int, accuracy: float) -> None:
        """After a step: the pass rate the prompt showed at `level` (0 = unhinted)."""
        ...

    def state_dict(self) -> dict[str, Any]: ...
    def load_state_dict(self, state: dict[str, Any]) -> None: ...
    def metrics(self) -> dict[str, float]: ...


def _check(prompt_id: str, attempt: int | None = None, level: int | None = None) -> None:
    if attempt is not None and attempt < 1:
        raise ValueError(f"hint schedule: attempt for {prompt_id!r} is 1-based, got {attempt}")
    if level is not None and not 0 <= level <= MAX_LEVEL:
        raise ValueError(
            f"hint schedule: level observed for {prompt_id!r} must be in 0..{MAX_LEVEL}, "
            f"got {level}"
        )


def _check_accuracy(prompt_id: str, accuracy: float) -> None:
    if not 0.0 <= accuracy <= 1.0:
        raise ValueError(
            f"hint schedule: accuracy observed for {prompt_id!r} must be in [0, 1], got {accuracy}"
        )


class OffSchedule:
    """No hints, ever."""

    def level(self, prompt_id: str, attempt: int) -> int | None:
        _check(prompt_id, attempt=attempt)
        return None

    def observe(self, prompt_id: str, *, level: int, accuracy: float) -> None:
        _check(prompt_id, level=level)
        _check_accuracy(prompt_id, accuracy)

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        return None

    def metrics(self) -> dict[str, float]:
        return {}


@dataclass
class SageSchedule:
    """Attempt a → level first_level + a - 1 within the step, none after level 3 (SAGE's
    on-policy escalation, which starts at 1)."""

    first_level: int = 1

    def __post_init__(self) -> None:
        if not 1 <= self.first_level <= MAX_LEVEL:
            raise ValueError(f"sage: first_level must be in 1..{MAX_LEVEL}, got {self.first_level}")

    def level(self, prompt_id: str, attempt: int) -> int | None:
        _check(prompt_id, attempt=attempt)
        level = self.first_level + attempt - 1
        return level if level <= MAX_LEVEL else None

    def observe(self, prompt_id: str, *, level: int, accuracy: float) -> None:
        _check(prompt_id, level=level)
        _check_accuracy(prompt_id, accuracy)

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        return None

    def metrics(self) -> dict[str, float]:
        return {}


@dataclass
class SageLightSchedule:
    """A per-prompt level kept across epochs, moved by the accuracy observed at it."""

    up_threshold: float = 0.1
    down_threshold: float = 0.35
    first_level: int = 1

    def __post_init__(self) -> None:
        if not 1 <= self.first_level <= MAX_LEVEL:
            raise ValueError(
                f"sage_light: first_level must be in 1..{MAX_LEVEL}, got {self.first_level}"
            )
        if not 0.0 <= self.up_threshold <= self.down_threshold <= 1.0:
            raise ValueError(
                f"sage_light thresholds: need 0 <= up_threshold ({self.up_threshold}) <= "
                f"down_threshold ({self.down_threshold}) <= 1"
            )
        self._levels: dict[str, int] = {}  # prompts at level 0 are not stored

    def stored_level(self, prompt_id: str) -> int:
        """The prompt's current level (0 if never moved up)."""
        return self._levels.get(prompt_id, 0)

    def level(self, prompt_id: str, attempt: int) -> int | None:
        _check(prompt_id, attempt=attempt)
        if attempt > 1:
            return None  # one hint per prompt per step
        return max(self.first_level, self.stored_level(prompt_id))

    def observe(self, prompt_id: str, *, level: int, accuracy: float) -> None:
        """Move from the level the accuracy was observed at. Call once per pool the prompt was
        rolled in this step, in rollout order (unhinted first): the last call sets the level."""
        _check(prompt_id, level=level)
        _check_accuracy(prompt_id, accuracy)
        if accuracy <= self.up_threshold:
            new = min(level + 1, MAX_LEVEL)
        elif accuracy > self.down_threshold:
            new = max(level - 1, 0)
        else:
            new = level
        if new:
            self._levels[prompt_id] = new
        else:
            self._levels.pop(prompt_id, None)

    def state_dict(self) -> dict[str, Any]:
        return {"levels": dict(self._levels)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        levels = state.get("levels")
        if not isinstance(levels, dict):
            raise ValueError(
                "sage_light state has no 'levels' mapping; pass what state_dict() returned"
            )
        for prompt_id, level in levels.items():
            if not isinstance(level, int) or not 1 <= level <= MAX_LEVEL:
                raise ValueError(
                    f"sage_light state: level of {prompt_id!r} must be 1..{MAX_LEVEL}, "
                    f"got {level!r}"
                )
        self._levels = dict(levels)

    def metrics(self) -> dict[str, float]:
        """How many prompts sit at each stored level (level 0 = every other prompt)."""
        counts = {level: 0 for level in range(1, MAX_LEVEL + 1)}
        for level in self._levels.values():
            counts[level] += 1
        return {f"sampling/hint_schedule_level_{level}": float(n) for level, n in counts.items()}


def build_hint_schedule(config: HintsConfig) -> HintSchedule:
    """The schedule `hints.schedule` names."""
    config.validate()
    if config.schedule == "sage":
        return SageSchedule(first_level=config.first_level)
    if config.schedule == "sage_light":
        return SageLightSchedule(
            up_threshold=config.up_threshold,
            down_threshold=config.down_threshold,
            first_level=config.first_level,
        )
    return OffSchedule()
