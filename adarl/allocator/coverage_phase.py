"""Coverage first, accuracy after (arXiv 2508.10751; `allocator.group.coverage_phase_rollouts`):
one component with its own state.

Every step that starts before `rollouts` training rollouts were observed is built by the phase's
own group builder (a coverage objective or estimator: `allocator.group.coverage_objective` /
`coverage_advantage`), every later step by the run's. The clock is the phase's: the allocator
hands it each finished step's rollout count (`observe`, in step order, so overlapping steps see
the same clock), and it is kept in the allocator's checkpoint (`state_dict`). A step says which
builder trained it (`signal/coverage_phase`). The run declares both phases
(adarl/allocator/objective.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from adarl.allocator.group_builder import GroupBuilder


class CoveragePhase:
    """The coverage phase's builder, its length in training rollouts, and its clock."""

    def __init__(self, *, rollouts: int, builder: GroupBuilder) -> None:
        if rollouts < 1:
            raise ValueError(
                f"the coverage phase needs rollouts >= 1 (got {rollouts}); build none for no phase"
            )
        self.rollouts = rollouts
        self.builder = builder
        self.rollouts_observed = 0  # training rollouts of every finished step

    @property
    def active(self) -> bool:
        """Whether the step starting now trains on the phase's builder."""
        return self.rollouts_observed < self.rollouts

    def builder_for_step(self, after: GroupBuilder) -> GroupBuilder:
        """The builder of the step starting now: the phase's while it lasts, then `after`."""
        return self.builder if self.active else after

    def observe(self, rollouts: int) -> None:
        """A finished step's training rollouts (every pool's samples)."""
        self.rollouts_observed += rollouts

    def metrics(self, *, trained_in_phase: bool) -> dict[str, float]:
        return {"signal/coverage_phase": float(trained_in_phase)}

    def state_dict(self) -> dict[str, Any]:
        return {"rollouts_observed": self.rollouts_observed}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.rollouts_observed = int(state["rollouts_observed"])
