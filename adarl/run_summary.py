"""`RunSummary`: what a finished run reports (`summary.json`).

A module of its own because both ends use it: `adarl.session` builds it, `adarl.run` writes it;
with the record here the import runs one way, run → session.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class RunSummary:
    """What `summary.json` holds: a run's outcome without parsing logs."""

    name: str
    steps: int
    base_accuracy: float | None  # held-out, no hint, mean over samples at eval temperature;
    final_accuracy: float | None  # None = the task has no held-out set
    base_greedy_accuracy: float | None
    final_greedy_accuracy: float | None
    rollouts_generated: int
    tokens_generated: int
    wall_time_s: float
    time_per_stage_s: dict[str, float]
    resumed_from_step: int | None
    # What the run optimises (adarl.allocator.objective.ObjectiveDeclaration.to_json())
    objective: dict[str, Any] = field(default_factory=dict)
    # The base and final evaluations' pass@k tables (adarl.evaluation.EvalResult.table()): pass@k,
    # the guesser's pass@k and coverage, overall and by level, from the same seeded draws.
    base_evaluation: dict[str, Any] | None = None
    final_evaluation: dict[str, Any] | None = None
    # Final minus base pass@1, paired by prompt, with its standard error: {"rise", "se",
    # "prompts"} (EvalResult.pass_at_1_rise_over); None without both evaluations.
    pass_at_1_rise: dict[str, float] | None = None
    # Final pass@1 minus the best constant answer's, paired by prompt: {"lead", "se", "prompts"}
    # (EvalResult.lead_over_best_constant); None without a constant answer or an evaluation.
    lead_over_best_constant: dict[str, float] | None = None
    # The final policy as a Hugging Face model directory (RUN_DIR/model, adarl/export.py).
    model_dir: str | None = None
    # Why the run ended: "total_steps", "budget" (trainer.max_rollouts / max_sequence_tokens),
    # "no_learning_signal" (trainer.min_mixed_group_fraction), "below_prior" (trainer.
    # stop_below_prior: stopped after the base evaluation), or "resumed_past_end".
    stop_reason: str = "total_steps"
    # With stop_reason "no_learning_signal" or "below_prior": the message the run printed.
    stop_message: str | None = None

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def paired_text(value: float, se: float, prompts: float) -> str:
    """A paired difference of pass rates as the console prints it: "+13.3 points, paired SE 1.9
    (+7.0 SE over 226 prompts)" (`pass_at_1_rise`, `lead_over_best_constant`)."""
    return (
        f"{100 * value:+.1f} points, paired SE {100 * se:.1f} ({value / se:+.1f} SE over "
        f"{prompts:.0f} prompts)"
    )
