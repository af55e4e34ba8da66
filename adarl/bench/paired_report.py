"""Paired comparisons in `python -m adarl.bench learning`'s report: every arm against a reference
arm, prompt by prompt, at equal rollouts and at equal optimizer steps. Pure functions of the
per-run records (adarl/bench/learning_records.py).

Definitions:
* paired difference, per seed: on each held-out prompt i, the unbiased pass@k of the arm's final
  evaluation minus the reference's (`adarl.evaluation.pass_at_k`, both from the same number of
  samples drawn with the same seeds on the same prompts); Δ = mean over prompts, SE = sample std
  over prompts / √P. A seed's Δ is "≥ 3 SE" when Δ ≥ 3·SE; by level, the same over that level's
  prompts, and over seeds the mean of the seeds' Δ with SE = √(Σ SE²)/seeds;
* equal rollouts: every arm of a setting trains to the same rollout budget, so the final
  evaluations are at equal rollouts;
* equal optimizer steps: each run's periodic pass@1 (the 8-sample evaluations) against its
  optimizer steps (training steps × learner.mini_batches_per_step × epochs_per_step), linearly
  interpolated at the smaller of the two runs' final optimizer-step counts; where two arms take
  the same optimizer steps per rollout the two axes coincide, and the table says so;
* solutions: distinct correct responses per prompt (by text) in the final evaluation;
* time: the run's training clock (steps, evaluations, checkpoints) plus its start-up.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from adarl.bench.learning_records import PromptCounts, RunRecord, interpolate, runs_by_arm
from adarl.evaluation.evaluator import level_key
from adarl.evaluation.passk import pass_at_k


@dataclass(frozen=True)
class Paired:
    """Mean per-prompt difference of pass@k (arm − reference) and its standard error."""

    delta: float
    se: float
    prompts: int

    @property
    def z(self) -> float:
        return self.delta / self.se if self.se > 0 else (np.inf if self.delta > 0 else 0.0)


def paired_difference(
    arm: PromptCounts, reference: PromptCounts, *, k: int, level: str | None = None
) -> Paired:
    """Δ pass@k over the prompts (of one level) both evaluations drew (module docstring)."""
    if arm.prompts != reference.prompts or arm.samples != reference.samples:
        raise ValueError(
            "a paired difference needs the same prompts and samples per prompt in both "
            f"evaluations (got prompts {arm.prompts} × {arm.samples} and "
            f"{reference.prompts} × {reference.samples})"
        )
    if k > arm.samples:
        raise ValueError(f"pass@{k} needs at least {k} samples per prompt, got {arm.samples}")
    keep = np.array([level is None or lv == level for lv in arm.levels])
    mine = pass_at_k(arm.samples, np.asarray(arm.correct)[keep], k)
    theirs = pass_at_k(reference.samples, np.asarray(reference.correct)[keep], k)
    d = np.asarray(mine, dtype=np.float64) - np.asarray(theirs, dtype=np.float64)
    se = float(d.std(ddof=1) / np.sqrt(d.size)) if d.size > 1 else float("nan")
    return Paired(delta=float(d.mean()), se=se, prompts=int(d.size))


def combine(paired: Sequence[Paired]) -> Paired:
    """The mean of several seeds' differences and its SE, √(Σ SE²)/seeds."""
    seeds = len(paired)
    return Paired(
        delta=float(np.mean([p.delta for p in paired])),
        se=float(np.sqrt(sum(p.se**2 for p in paired)) / seeds),
        prompts=sum(p.prompts for p in paired),
    )


def _ks(records: Sequence[RunRecord]) -> tuple[int, ...]:
    top = min(r.final_prompts.samples for r in records if r.final_prompts is not None)
    return tuple(dict.fromkeys(k for k in (1, 8, top) if k <= top))


def _pairs(
    records: Sequence[RunRecord], reference: str
) -> dict[str, list[tuple[RunRecord, RunRecord]]]:
    """Per arm ≠ reference: (arm run, reference run) of each seed both ran with prompt counts."""
    by_arm = runs_by_arm(records)
    refs = {r.seed: r for r in by_arm.get(reference, []) if r.final_prompts is not None}
    return {
        arm: [(r, refs[r.seed]) for r in runs if r.final_prompts is not None and r.seed in refs]
        for arm, runs in by_arm.items()
        if arm != reference
    }


def _fmt(p: Paired) -> str:
    return f"{100 * p.delta:+.1f} ({100 * p.se:.1f})"


def paired_table(records: Sequence[RunRecord], reference: str) -> str:
    """Per arm and seed: Δ pass@1 / pass@8 / pass@k_max against `reference` (points, SE)."""
    pairs = {arm: runs for arm, runs in _pairs(records, reference).items() if runs}
    if not pairs:
        return ""
    ks = _ks(records)
    header = " | ".join(f"Δ pass@{k} (SE)" for k in ks)
    lines = [
        f"| arm | seed | {header} | pass@1 ≥ 3 SE above | optimizer steps (arm / reference) |",
        "|---|---|" + "---|" * len(ks) + "---|---|",
    ]
    for arm, runs in pairs.items():
        for run, ref in runs:
            diffs = [
                paired_difference(run.final_prompts, ref.final_prompts, k=k)  # type: ignore[arg-type]
                for k in ks
            ]
            cells = " | ".join(_fmt(d) for d in diffs)
            above = "yes" if diffs[0].delta > 0 and diffs[0].delta >= 3 * diffs[0].se else "no"
            lines.append(
                f"| {arm} | {run.seed} | {cells} | {above} | "
                f"{run.optimizer_steps} / {ref.optimizer_steps} |"
            )
    return "\n".join(lines) + "\n"


def paired_by_level_table(records: Sequence[RunRecord], reference: str) -> str:
    """Per arm and level, over seeds: Δ pass@1 and Δ pass@k_max against `reference`."""
    pairs = {arm: runs for arm, runs in _pairs(records, reference).items() if runs}
    if not pairs:
        return ""
    top = _ks(records)[-1]
    levels = sorted(
        {lv for runs in pairs.values() for run, _ in runs for lv in run.final_prompts.levels},  # type: ignore[union-attr]
        key=level_key,
    )
    lines = [
        "| arm | " + " | ".join(f"level {lv}: Δ pass@1 / Δ pass@{top}" for lv in levels) + " |",
        "|---|" + "---|" * len(levels),
    ]
    for arm, runs in pairs.items():
        cells = []
        for level in levels:
            by_k = [
                combine(
                    [
                        paired_difference(r.final_prompts, f.final_prompts, k=k, level=level)  # type: ignore[arg-type]
                        for r, f in runs
                    ]
                )
                for k in (1, top)
            ]
            cells.append(" / ".join(_fmt(p) for p in by_k))
        lines.append(f"| {arm} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def pass_at_1_at_optimizer_steps(run: RunRecord, optimizer_steps: float) -> float:
    """The run's periodic pass@1 at `optimizer_steps`, linearly interpolated (NaN past its end)."""
    xs = [e.step * run.optimizer_steps_per_step for e in run.evals]
    return float(interpolate(xs, [e.accuracy for e in run.evals], np.array([optimizer_steps]))[0])


def equal_steps_table(records: Sequence[RunRecord], reference: str) -> str:
    """Per arm and seed: pass@1 of arm and reference at equal rollouts (their final evaluations)
    and at equal optimizer steps (module docstring)."""
    pairs = {arm: runs for arm, runs in _pairs(records, reference).items() if runs}
    if not pairs:
        return ""
    lines = [
        "| arm | seed | equal rollouts: pass@1 arm / reference | equal optimizer steps: at "
        "steps | pass@1 arm / reference | axes |",
        "|---|---|---|---|---|---|",
    ]
    for arm, runs in pairs.items():
        for run, ref in runs:
            steps = min(run.optimizer_steps, ref.optimizer_steps)
            mine = pass_at_1_at_optimizer_steps(run, steps)
            theirs = pass_at_1_at_optimizer_steps(ref, steps)
            same = run.optimizer_steps == ref.optimizer_steps
            lines.append(
                f"| {arm} | {run.seed} | {100 * run.final_accuracy:.1f} / "
                f"{100 * ref.final_accuracy:.1f}% | {steps} | {100 * mine:.1f} / "
                f"{100 * theirs:.1f}% | {'the same' if same else 'differ'} |"
            )
    return "\n".join(lines) + "\n"


def solutions_table(records: Sequence[RunRecord]) -> str:
    """Per arm, seed means: distinct correct responses per prompt (base → final), by level, and
    the final mean response length in tokens."""
    by_arm = {
        arm: [r for r in runs if r.final_prompts and r.final_prompts.distinct_correct]
        for arm, runs in runs_by_arm(records).items()
    }
    by_arm = {arm: runs for arm, runs in by_arm.items() if runs}
    if not by_arm:
        return ""
    levels = sorted(
        {lv for runs in by_arm.values() for r in runs for lv in r.final_prompts.levels},  # type: ignore[union-attr]
        key=level_key,
    )

    def mean_distinct(counts: PromptCounts | None, level: str | None) -> float:
        if counts is None or not counts.distinct_correct:
            return float("nan")
        values = [
            d
            for d, lv in zip(counts.distinct_correct, counts.levels, strict=True)
            if level is None or lv == level
        ]
        return float(np.mean(values)) if values else float("nan")

    lines = [
        "| arm | all | "
        + " | ".join(f"level {lv}" for lv in levels)
        + " | response tokens (final) |",
        "|---|---|" + "---|" * len(levels) + "---|",
    ]
    for arm, runs in by_arm.items():
        cells = []
        for level in (None, *levels):
            base = np.nanmean([mean_distinct(r.base_prompts, level) for r in runs])
            final = np.nanmean([mean_distinct(r.final_prompts, level) for r in runs])
            cells.append(f"{base:.2f} → {final:.2f}")
        tokens = np.mean([np.mean(r.final_prompts.response_tokens) for r in runs])  # type: ignore[union-attr]
        lines.append(f"| {arm} | " + " | ".join(cells) + f" | {tokens:.1f} |")
    return "\n".join(lines) + "\n"


def wall_time_table(records: Sequence[RunRecord]) -> str:
    """Per arm, seed mean ± spread: start-up and training clock, in seconds."""
    lines = ["| arm | start-up s | training clock s | total s |", "|---|---|---|---|"]
    for arm, runs in runs_by_arm(records).items():
        clock = [r.evals[-1].wall_s for r in runs]
        start = [r.start_up_s for r in runs]
        total = [a + b for a, b in zip(clock, start, strict=True)]
        lines.append(
            f"| {arm} | {np.mean(start):.0f} | {np.mean(clock):.0f} ± {_spread(clock):.0f} | "
            f"{np.mean(total):.0f} |"
        )
    return "\n".join(lines) + "\n"


def _spread(values: Sequence[float]) -> float:
    return float(np.std(values, ddof=1)) if len(values) > 1 else 0.0


def paired_section(records: Sequence[RunRecord], reference: str) -> str:
    """The "### Paired against <reference>" subsection; "" when no run kept prompt counts."""
    table = paired_table(records, reference)
    if not table:
        return ""
    solutions = solutions_table(records)
    if solutions:
        solutions = (
            "Distinct correct responses per prompt (final evaluation, seed means, base → final):"
            f"\n\n{solutions}"
        )
    return f"""
### Paired against {reference}

Each arm's final evaluation minus {reference}'s on the same seed, prompt by prompt (points of
pass@k, the SE over prompts in brackets; adarl/bench/paired_report.py states the definitions).
Equal rollouts: every arm trained the same rollout budget. Optimizer steps: training steps ×
mini-batches × epochs per step.

{table}
By level, over seeds (Δ points, SE):

{paired_by_level_table(records, reference)}
At equal rollouts and at equal optimizer steps (periodic 8-sample pass@1, interpolated):

{equal_steps_table(records, reference)}
{solutions}
Time per run (seed means; start-up: engines, learner and the base evaluation):

{wall_time_table(records)}"""
