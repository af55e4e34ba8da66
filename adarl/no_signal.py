"""What a run that cannot learn says when it stops (trainer.min_mixed_group_fraction,
trainer.stop_below_prior).

Group-sampling RL learns only from groups that hold both a right and a wrong answer: a prompt the
policy always fails (or always solves) gives every sample the same advantage. When almost none of
the first steps' groups are mixed, more steps buy nothing; the run stops and says so with the
numbers a user needs to decide what to change: how the warm start ended (the built-in tiny
policy's held-aside accuracy against the best constant answer), the base evaluation, and the
mixed-group fraction itself.
"""

from __future__ import annotations

from typing import Any


def no_signal_message(
    *,
    steps: int,
    groups: int,
    mixed_fraction: float,
    minimum: float,
    base: dict[str, Any] | None,
    warm_start: dict[str, Any] | None,
    builtin_model: bool,
) -> str:
    """The stop message: what was measured, then what would help, then how to run anyway.
    `base`: the base evaluation's table (`EvalResult.table()`); `warm_start`: the built-in tiny
    policy's warm-start record (its build info's `warm_start` entry), None for other models."""
    lines = [
        f"no learning signal: {100 * mixed_fraction:.1f}% of the {groups} groups trained in steps "
        f"1-{steps} had both a right and a wrong answer (trainer.min_mixed_group_fraction="
        f"{minimum:g}), so the policy gets (almost) no gradient; the run stops at step {steps} "
        "instead of spending its budget."
    ]
    if warm_start is not None:
        lines.append("  warm start: " + _warm_start_line(warm_start))
    if base is not None:
        lines.append(_base_line(base))
    lines += _help_lines(
        builtin_model=builtin_model,
        warm_start_keys="model.tiny.sft_max_minutes, model.tiny.sft_max_steps (the built-in "
        "task's: model.tiny.sft_steps)",
        easier="an easier task or mix (task.*), or hints (hints=sage) for prompts never solved",
        anyway="trainer.min_mixed_group_fraction=0",
    )
    return "\n".join(lines)


def below_prior_message(
    *,
    base: dict[str, Any] | None,
    lead: dict[str, float] | None,
    warm_start: dict[str, Any] | None,
    builtin_model: bool,
) -> str | None:
    """The stop message of a policy that starts below the answers' prior (trainer.
    stop_below_prior), or None when it does not: the tiny model's warm start ran out of budget
    before it was clearly above the best constant answer (`warm_start`'s `stopped_by` is not
    "above_prior"), or the base evaluation's pass@1 is below that answer's (`lead`: its paired
    lead, EvalResult.lead_over_best_constant; a policy and a constant that both score 0 are left
    to the mixed-group check, whose message fits them)."""
    short_warm_start = warm_start is not None and warm_start.get("stopped_by") not in (
        None,
        "above_prior",
    )
    below = lead is not None and lead["lead"] < 0.0
    if not (short_warm_start or below):
        return None
    lines = [
        "the policy starts below the answers' prior: "
        + (
            "its warm start ran out of budget before it was clearly above the best constant "
            "answer and the guesser on held-aside training prompts"
            if short_warm_start
            else "its held-out pass@1 is below always writing the best constant answer"
        )
        + ". RL from here learns that prior first, not the task, so the run stops after its "
        "base evaluation instead of spending its budget."
    ]
    if warm_start is not None:
        lines.append("  warm start: " + _warm_start_line(warm_start))
    if base is not None:
        lines.append(_base_line(base, lead))
    lines += _help_lines(
        builtin_model=builtin_model,
        warm_start_keys="model.tiny.sft_max_minutes, model.tiny.sft_max_steps",
        easier="an easier task (task.*: e.g. a smaller reasoning-gym config)",
        anyway="trainer.stop_below_prior=false",
    )
    return "\n".join(lines)


def _help_lines(
    *, builtin_model: bool, warm_start_keys: str, easier: str, anyway: str
) -> list[str]:
    """The stop messages' "what would help" block and the key that trains anyway; the tiny
    model's keys only for the built-in policy."""
    lines = ["  what would help:"]
    if builtin_model:
        lines += [
            f"    - a longer warm start: {warm_start_keys}",
            "    - a larger tiny model: model.tiny.hidden_size, model.tiny.num_hidden_layers",
        ]
    return [
        *lines,
        "    - a real model on a GPU: model=hf model.name_or_path=... (docs/cluster.md)",
        f"    - {easier}",
        f"  to train anyway: {anyway}",
    ]


def _base_line(base: dict[str, Any], lead: dict[str, float] | None = None) -> str:
    """The base evaluation's pass@1, largest pass@k and best constant answer, on one line."""
    passes = base["pass_at_k"]
    largest = max(passes, key=int)
    line = (
        f"  base evaluation: held-out pass@1 {100 * passes['1']:.1f}%, "
        f"pass@{largest} {100 * passes[largest]:.1f}%"
    )
    constant = base.get("best_constant")
    if constant is not None:
        line += f", best constant answer {constant['answer']!r} {100 * constant['accuracy']:.1f}%"
    if lead is not None and lead["se"] > 0:
        line += (
            f" (pass@1 {100 * lead['lead']:+.1f} points over it, paired SE {100 * lead['se']:.1f})"
        )
    return line


def _warm_start_line(record: dict[str, Any]) -> str:
    """One line from the warm start's record; keys it lacks are left out."""

    def pct(key: str) -> str | None:
        value = record.get(key)
        return None if value is None else f"{100 * float(value):.1f}%"

    parts = []
    if (accuracy := pct("held_aside_accuracy")) is not None:
        parts.append(f"held-aside accuracy {accuracy}")
    if (constant := pct("best_constant_accuracy")) is not None:
        parts.append(f"best constant answer {constant}")
    if (guesser := pct("guesser_accuracy")) is not None:
        parts.append(f"guesser {guesser}")
    if "steps" in record:
        parts.append(f"after {record['steps']} steps")
    if "stopped_by" in record:
        parts.append(f"stopped by {record['stopped_by']}")
    return ", ".join(parts) or "no record"
