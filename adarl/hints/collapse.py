"""When the allocator declares a prompt collapsed, so that it asks for a hint."""

from __future__ import annotations

from dataclasses import dataclass

from adarl.config.hints import HintsConfig


@dataclass(frozen=True)
class CollapseRule:
    """A prompt is collapsed once `after_samples` of its samples in the current pool (one hint
    level, this step) hold no positive reward: the gate is shut and more samples of the same
    condition are unlikely to open it."""

    after_samples: int

    def __post_init__(self) -> None:
        if self.after_samples < 1:
            raise ValueError(f"collapse rule: after_samples must be >= 1, got {self.after_samples}")

    def collapsed(self, *, samples: int, positives: int) -> bool:
        if samples < 0 or not 0 <= positives <= samples:
            raise ValueError(
                f"collapse rule: need 0 <= positives ({positives}) <= samples ({samples})"
            )
        return positives == 0 and samples >= self.after_samples


def build_collapse_rule(config: HintsConfig) -> CollapseRule:
    config.validate()
    return CollapseRule(after_samples=config.collapse_after_samples)
