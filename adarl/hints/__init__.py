"""Hinting (SAGE): hint levels, the hint generator and its sources, schedules, and the collapse
rule the allocator uses to decide that a prompt needs a hint (docs/algorithms.md "Hints").
`build_hint_generator` is adarl/rollout/builders.py's: its `model` source builds an engine."""

from adarl.hints.collapse import CollapseRule, build_collapse_rule
from adarl.hints.format import leaks_answer, parse_levels, render_levels
from adarl.hints.generator import HintCodec, HintGenerator
from adarl.hints.schedule import (
    HintSchedule,
    OffSchedule,
    SageLightSchedule,
    SageSchedule,
    build_hint_schedule,
)
from adarl.hints.template import hint_mode_solution, template_levels
from adarl.hints.types import Hint, HintRequest

__all__ = [
    "CollapseRule",
    "Hint",
    "HintCodec",
    "HintGenerator",
    "HintRequest",
    "HintSchedule",
    "OffSchedule",
    "SageLightSchedule",
    "SageSchedule",
    "build_collapse_rule",
    "build_hint_schedule",
    "hint_mode_solution",
    "leaks_answer",
    "parse_levels",
    "render_levels",
    "template_levels",
]
