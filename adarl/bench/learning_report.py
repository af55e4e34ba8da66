"""The report of `python -m adarl.bench learning`: tables, plots and the `## Learning` section of
docs/benchmarks.md, from the per-run records of adarl/bench/learning_records.py. Pure functions
of those records, apart from drawing PNGs and writing the docs file; no training happens here.

Definitions (the docs section repeats them):

* curves: held-out accuracy (T = 1, no hint) at each evaluation, linearly interpolated onto a
  common grid from 0 to the smallest final x over the arm's seeds (never extrapolated); mean ±
  spread over seeds, where the spread is the sample standard deviation (n − 1) over seeds;
* GRPO-best: the GRPO arm (experiment `grpo`) with the highest mean final accuracy;
* to target, per seed: the first x where the seed's interpolated accuracy curve reaches
  GRPO-best's final accuracy *on the same seed* (the same root seed gives every arm the same
  prompt order and evaluation draws, so the comparison is paired); an arm reaches the target when
  all its seeds do, and is then reported as mean ± spread over seeds;
* tie: two means that differ by less than the larger of their two spreads.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from adarl.bench.coverage_report import (
    DEFAULT_ARM,
    coverage_section,
    has_pass_at_k,
    plot_coverage,
)
from adarl.bench.docs_section import paragraph, write_section
from adarl.bench.learning_records import (
    AXES,
    CURATED_ARM,
    CURATION_ANCHORS,
    PASS_RATE_BINS,
    EvalPoint,
    ReportData,
    RunRecord,
    grpo_best,
    is_tie,
    mean_and_spread,
    reach_to_reference,
    runs_by_arm,
    samples_per_prompt_by_bin,
    verdict,
)
from adarl.bench.paired_report import paired_section
from adarl.report.figures import (
    TIME_PARTS,
    WORKLOADS,
    arm_colors,
    plot_curves,
    plot_signal,
    plot_time,
    pyplot,
)

SECTION_TITLE = "## Learning"
CURATION_RATIO = 0.5  # target: GRPO-best's final accuracy with at most this share of its x
CURATION_NO_SIGNAL = 0.35  # target: at most this share of rollouts on p̃ ∈ {0, 1}


def curation_target(records: Sequence[RunRecord], best: str) -> str:
    """Issue 19's target, checked per seed: `CURATED_ARM` reaches GRPO-best's final accuracy
    (same seed) with ≤ `CURATION_RATIO`× GRPO-best's own rollouts (and tokens) to it, ends at or
    above each anchor at equal rollouts (a tie counts), and spends ≤ `CURATION_NO_SIGNAL` of its
    rollouts on prompts whose pool came back p̃ ∈ {0, 1}. "" when the arm did not run."""
    by_arm = runs_by_arm(records)
    if CURATED_ARM not in by_arm or best not in by_arm:
        return ""
    parts, met = [], True
    for axis, unit in (("rollouts", "rollouts"), ("tokens", "generated tokens")):
        reaches = reach_to_reference(records, best, axis)
        mine, theirs = reaches[CURATED_ARM].per_seed, reaches[best].per_seed
        ratios = []
        for seed in sorted(mine):
            ref = theirs.get(seed)
            x = mine[seed]
            ratios.append(None if x is None or not ref else x / ref)
        shown = ", ".join("not reached" if r is None else f"{r:.2f}×" for r in ratios)
        ok = all(r is not None and r <= CURATION_RATIO for r in ratios)
        met &= ok
        parts.append(
            f"{unit} to GRPO-best's final accuracy, per seed, against GRPO-best's own: {shown} "
            f"({'≤' if ok else 'not all ≤'} {CURATION_RATIO:g}×)"
        )
    final = mean_and_spread(r.final_accuracy for r in by_arm[CURATED_ARM])
    for anchor in CURATION_ANCHORS:
        if anchor not in by_arm:
            continue
        theirs = mean_and_spread(r.final_accuracy for r in by_arm[anchor])
        ok = final[0] >= theirs[0] or is_tie(final, theirs)
        met &= ok
        parts.append(
            f"final accuracy {_pct(final[0])} ± {_pct(final[1])} against {anchor}'s "
            f"{_pct(theirs[0])} ± {_pct(theirs[1])} at equal rollouts "
            f"({'at or above' if final[0] >= theirs[0] else ('a tie' if ok else 'below')})"
        )
    share = diagnose(by_arm[CURATED_ARM]).no_signal_share
    reference_share = diagnose(by_arm[best]).no_signal_share
    ok = share <= CURATION_NO_SIGNAL
    met &= ok
    parts.append(
        f"rollouts on p̃ ∈ {{0, 1}}: {_pct(share)} ({best}: {_pct(reference_share)}; target "
        f"≤ {_pct(CURATION_NO_SIGNAL)})"
    )
    return paragraph(
        f"**Curation target** ({CURATED_ARM}, issue 19): {'met' if met else 'not met'}. "
        + "; ".join(parts)
        + "."
    )


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _maybe_pct(x: float | None) -> str:
    return "n/a" if x is None else _pct(x)


def _pm_pct(values: Iterable[float]) -> str:
    mean, spread = mean_and_spread(values)
    return f"{100 * mean:.1f} ± {100 * spread:.1f}%"


def _count(x: float) -> str:
    if abs(x) >= 10_000:
        return f"{x / 1000:.0f}k"
    if abs(x) >= 1000:
        return f"{x / 1000:.1f}k"
    return f"{x:.0f}"


def _pm_count(summary: tuple[float, float]) -> str:
    return f"{_count(summary[0])} ± {_count(summary[1])}"


def _arm_order(by_arm: Mapping[str, Sequence[RunRecord]]) -> list[str]:
    """Arms in the order their first run appears in the records (the harness's plan order)."""
    return list(by_arm)


def headline_table(records: Sequence[RunRecord]) -> tuple[str, str]:
    """The headline table and the name of GRPO-best."""
    by_arm = runs_by_arm(records)
    best = grpo_best(records)
    reaches = {axis: reach_to_reference(records, best, axis) for axis in ("rollouts", "tokens")}
    wall = reach_to_reference(records, best, "wall_s")
    best_final = mean_and_spread(r.final_accuracy for r in by_arm[best])
    lines = [
        "| arm | seeds | base → final accuracy | final vs GRPO-best | rollouts to target "
        "| vs GRPO-best | tokens to target | wall s to target |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for arm in _arm_order(by_arm):
        runs = by_arm[arm]
        final = mean_and_spread(r.final_accuracy for r in runs)
        if arm == best:
            versus_final = "(reference)"
        elif is_tie(final, best_final):
            versus_final = "tie"
        else:
            versus_final = "higher" if final[0] > best_final[0] else "lower"
        cells = []
        for reach in (reaches["rollouts"][arm], reaches["tokens"][arm], wall[arm]):
            if reach.reached:
                cells.append(_pm_count(reach.summary()))
            else:
                cells.append(f"not reached ({reach.seeds_reached}/{len(reach.per_seed)})")
        name = f"**{arm}** (GRPO-best)" if arm == best else arm
        if arm == best:
            against = "(reference)"
        elif not reaches["rollouts"][arm].reached:
            against = "–"  # the cell before says how many seeds reached it
        else:
            against = verdict(reaches["rollouts"][arm], reaches["rollouts"][best])
        lines.append(
            f"| {name} | {len(runs)} | {_pm_pct(r.base_accuracy for r in runs)} → "
            f"{_pm_pct(r.final_accuracy for r in runs)} | {versus_final} | {cells[0]} | "
            f"{against} | {cells[1]} | {cells[2]} |"
        )
    return "\n".join(lines) + "\n", best


@dataclass(frozen=True)
class Diagnosis:
    """Where an arm's rollouts went and what signal they bought (sums over its seeds)."""

    arm: str
    rollouts: float
    samples_per_prompt: float
    rollout_share_by_bin: dict[str, float]
    samples_per_prompt_by_bin: dict[str, float | None]
    no_signal_share: float  # share of rollouts on prompts whose pool had p̃ = 0 or 1
    discarded_share: float | None  # None when some run does not log discarded samples
    mixed_per_1k_rollouts: float
    gain_per_1k_mixed: float  # accuracy points (final − base, seed mean) per 1,000 mixed groups
    mixed_fraction: float


def diagnose(runs: Sequence[RunRecord]) -> Diagnosis:
    rollouts = sum(sum(r.rollouts_by_bin.values()) for r in runs)
    prompts = sum(sum(r.prompts_by_bin.values()) for r in runs)
    by_bin = {b: sum(r.rollouts_by_bin[b] for r in runs) for b in PASS_RATE_BINS}
    mixed = sum(r.mixed_groups for r in runs)
    groups = sum(r.groups_trained for r in runs)
    gain = mean_and_spread(r.final_accuracy - r.base_accuracy for r in runs)[0]
    mixed_per_run = mixed / len(runs)
    total_rollouts = sum(r.rollouts for r in runs)
    return Diagnosis(
        arm=runs[0].arm,
        rollouts=total_rollouts / len(runs),
        samples_per_prompt=rollouts / prompts if prompts else math.nan,
        rollout_share_by_bin={b: by_bin[b] / rollouts if rollouts else 0.0 for b in by_bin},
        samples_per_prompt_by_bin=samples_per_prompt_by_bin(runs),
        no_signal_share=(by_bin["0"] + by_bin["1"]) / rollouts if rollouts else 0.0,
        discarded_share=(
            None
            if any(r.discarded_samples is None for r in runs) or not total_rollouts
            else sum(r.discarded_samples or 0.0 for r in runs) / total_rollouts
        ),
        mixed_per_1k_rollouts=1000 * mixed / total_rollouts if total_rollouts else 0.0,
        gain_per_1k_mixed=100 * gain / (mixed_per_run / 1000) if mixed_per_run else math.nan,
        mixed_fraction=mixed / groups if groups else 0.0,
    )


def diagnosis_tables(records: Sequence[RunRecord]) -> str:
    by_arm = runs_by_arm(records)
    diagnoses = [diagnose(by_arm[arm]) for arm in _arm_order(by_arm)]
    head = " | ".join(f"p̃ = {b}" if b in ("0", "1") else f"p̃ ∈ {b}" for b in PASS_RATE_BINS)
    share = [f"| arm | {head} |", "|---" * (len(PASS_RATE_BINS) + 1) + "|"]
    per_prompt = [f"| arm | all | {head} |", "|---" * (len(PASS_RATE_BINS) + 2) + "|"]
    signal = [
        "| arm | rollouts per run | discarded | on p̃ ∈ {0, 1} | mixed-group ratio "
        "| mixed groups per 1,000 rollouts | accuracy points per 1,000 mixed groups |",
        "|---|---|---|---|---|---|---|",
    ]
    for d in diagnoses:
        share.append(
            f"| {d.arm} | "
            + " | ".join(_pct(d.rollout_share_by_bin[b]) for b in PASS_RATE_BINS)
            + " |"
        )
        per_prompt.append(
            f"| {d.arm} | {d.samples_per_prompt:.1f} | "
            + " | ".join(
                "–" if (v := d.samples_per_prompt_by_bin[b]) is None else f"{v:.1f}"
                for b in PASS_RATE_BINS
            )
            + " |"
        )
        signal.append(
            f"| {d.arm} | {_count(d.rollouts)} | {_maybe_pct(d.discarded_share)} | "
            f"{_pct(d.no_signal_share)} | {_pct(d.mixed_fraction)} | "
            f"{d.mixed_per_1k_rollouts:.1f} | {d.gain_per_1k_mixed:.2f} |"
        )
    return (
        "Share of training rollouts by the pool pass rate p̃ of the prompt they were drawn "
        "for (sums over seeds and steps):\n\n"
        + "\n".join(share)
        + "\n\nSamples drawn per prompt, by p̃ (Seq-Balance should draw most near p̃ = 0 and 1 "
        "and least near ½: the U-shape):\n\n"
        + "\n".join(per_prompt)
        + "\n\nWhat the rollouts bought (learning per rollout = mixed groups per rollout × "
        "accuracy per mixed group):\n\n" + "\n".join(signal) + "\n"
    )


def losses_explained(records: Sequence[RunRecord], best: str) -> str:
    """One bullet per arm that is slower than GRPO-best or does not reach its accuracy.

    Learning per rollout factors into mixed groups per rollout (signal bought) × accuracy per
    mixed group (what the update made of it); the cause named is the factor with the smaller
    ratio to GRPO-best's.
    """
    by_arm = runs_by_arm(records)
    reaches = reach_to_reference(records, best)
    ref = diagnose(by_arm[best])
    bullets = []
    for arm in _arm_order(by_arm):
        said = verdict(reaches[arm], reaches[best]) if arm != best else ""
        if not said.startswith(("slower", "not reached")):
            continue
        d = diagnose(by_arm[arm])
        signal_ratio = _ratio(d.mixed_per_1k_rollouts, ref.mixed_per_1k_rollouts)
        value_ratio = _ratio(d.gain_per_1k_mixed, ref.gain_per_1k_mixed)
        if math.isnan(signal_ratio) or math.isnan(value_ratio):
            cause = f"{best} itself bought no mixed groups or no accuracy, so no ratio is defined"
        elif signal_ratio < value_ratio:
            cause = "it buys fewer mixed groups per rollout"
        else:
            cause = "each mixed group it trains buys less accuracy"
        bullets.append(
            paragraph(
                f"* **{arm}** ({said} against {best}): {cause}. Mixed groups per 1,000 "
                f"rollouts {d.mixed_per_1k_rollouts:.1f} vs {ref.mixed_per_1k_rollouts:.1f} "
                f"({signal_ratio:.2f}×); accuracy points per 1,000 mixed groups "
                f"{d.gain_per_1k_mixed:.2f} vs {ref.gain_per_1k_mixed:.2f} "
                f"({value_ratio:.2f}×). It drew {d.samples_per_prompt:.1f} samples per prompt "
                f"(GRPO-best {ref.samples_per_prompt:.1f}) and spent {_pct(d.no_signal_share)} "
                f"of its rollouts on prompts with p̃ ∈ {{0, 1}} ({_pct(ref.no_signal_share)})"
                + (
                    f"; it discarded {_pct(d.discarded_share)} of its rollouts untrained "
                    f"({_maybe_pct(ref.discarded_share)})."
                    if d.discarded_share is not None
                    else "."
                ),
                indent="  ",
            )
        )
    if not bullets:
        return f"No arm is slower than {best} beyond the seed spread.\n"
    return "\n".join(bullets) + "\n"


def _ratio(a: float, b: float) -> float:
    return a / b if b > 0 and not math.isnan(a) else math.nan


def overhead_share(timing_s: Mapping[str, float]) -> float:
    """Share of step time outside generation, reward, learning, weight sync and the engine or
    learner passes an algorithm asks for (`WORKLOADS`).

    (Σ step_s − Σ workload_s) / Σ step_s over the steps summed into `timing_s`: the driver's
    time in the allocator, in dispatching requests, building the train batch, drawing prompts
    and its own loop.
    """
    step = timing_s.get("step")
    if not step:
        raise ValueError(
            "no timing/step_s in the metrics: this run predates the step timings; rerun it "
            "with the current adarl"
        )
    inside = sum(timing_s.get(k, 0.0) for k in WORKLOADS)
    return (step - inside) / step


def time_table(records: Sequence[RunRecord]) -> str:
    by_arm = runs_by_arm(records)
    head = " | ".join(label for label, _ in TIME_PARTS)
    lines = [
        f"| arm | step (s) | {head} | overhead share |",
        "|---" * (len(TIME_PARTS) + 3) + "|",
    ]
    for arm in _arm_order(by_arm):
        runs = by_arm[arm]
        steps = sum(r.steps for r in runs)
        timing = {k: sum(r.timing_s.get(k, 0.0) for r in runs) for k in runs[0].timing_s}
        if not timing.get("step"):
            lines.append(f"| {arm} | n/a (no timing/step_s) |" + " |" * (len(TIME_PARTS) + 1))
            continue
        parts = [part(timing) / timing["step"] for _, part in TIME_PARTS]
        lines.append(
            f"| {arm} | {timing['step'] / steps:.3f} | "
            + " | ".join(_pct(p) for p in parts)
            + f" | {_pct(overhead_share(timing))} |"
        )
    return "\n".join(lines) + "\n"


def difficulty_table(records: Sequence[RunRecord]) -> str:
    by_arm = runs_by_arm(records)
    levels = sorted(
        {level for r in records for level in r.evals[-1].by_difficulty},
        key=_natural_key,
    )
    if not levels:
        return "(the runs logged no eval/accuracy_by_difficulty/*)\n"
    lines = [
        "| arm | " + " | ".join(f"level {lv}" for lv in levels) + " |",
        "|---" * (len(levels) + 1) + "|",
    ]
    base_runs = by_arm[_arm_order(by_arm)[0]]
    lines.append(
        "| base | "
        + " | ".join(
            _pm_pct(r.evals[0].by_difficulty.get(lv, math.nan) for r in base_runs) for lv in levels
        )
        + " |"
    )
    for arm in _arm_order(by_arm):
        lines.append(
            f"| {arm} | "
            + " | ".join(
                _pm_pct(r.evals[-1].by_difficulty.get(lv, math.nan) for r in by_arm[arm])
                for lv in levels
            )
            + " |"
        )
    return "\n".join(lines) + "\n"


def hints_section(records: Sequence[RunRecord]) -> str:
    """The "Hints" subsection, only when some arm writes hints."""
    table = hints_table(records)
    if not table:
        return ""
    return (
        "\n### Hints\n\nPer step, for the arms that write hints (SAGE's collapse-triggered "
        "re-rolls): the share of the step's prompts whose unhinted samples were all wrong, and "
        "the share still all wrong after hints (a hinted pool that is mixed is a rescue); "
        "means over steps, then mean ± spread over seeds. Accuracy everywhere else in this "
        "report is without hints.\n\n" + table
    )


def hints_table(records: Sequence[RunRecord]) -> str:
    """Per hinted arm, means over its steps (then over seeds, ± spread): the share of the step's
    prompts at p̂ = 0 unhinted and after hints, prompts rescued, hinted rollouts."""
    by_arm = runs_by_arm(records)
    hinted = [arm for arm in _arm_order(by_arm) if all(r.hints for r in by_arm[arm])]
    if not hinted:
        return ""

    def per_step(run: RunRecord, key: str) -> float:
        return run.hints.get(key, math.nan) / run.steps

    lines = [
        "| arm | p̂ = 0 share of prompts, unhinted → after hints | change (points) | prompts "
        "rescued / step | hinted rollouts / step (share of rollouts) |",
        "|---|---|---|---|---|",
    ]
    for arm in hinted:
        runs = by_arm[arm]
        before = [per_step(r, "signal/zero_pass_share_unhinted") for r in runs]
        after = [per_step(r, "signal/zero_pass_share_after_hints") for r in runs]
        hinted_per_step = mean_and_spread(per_step(r, "sampling/hinted_rollouts") for r in runs)[0]
        hinted_share = mean_and_spread(
            r.hints.get("sampling/hinted_rollouts", 0.0) / r.rollouts for r in runs
        )[0]
        rescued, rescued_spread = mean_and_spread(
            per_step(r, "signal/prompts_rescued_by_hints") for r in runs
        )
        changes = [100 * (a - b) for a, b in zip(after, before, strict=True)]
        change, change_spread = mean_and_spread(changes)
        lines.append(
            f"| {arm} | {_pm_pct(before)} → {_pm_pct(after)} | {change:+.1f} ± "
            f"{change_spread:.1f} | {rescued:.2f} ± {rescued_spread:.2f} | "
            f"{hinted_per_step:.1f} ({_pct(hinted_share)}) |"
        )
    return "\n".join(lines) + "\n"


def _natural_key(text: str) -> tuple[Any, ...]:
    try:
        return (0, float(text), text)
    except ValueError:
        return (1, 0.0, text)


# -- plots --------------------------------------------------------------------------------------

FIGURES = {
    "curves": "learning_curves.png",
    "signal": "learning_signal.png",
    "difficulty": "learning_difficulty.png",
    "time": "learning_time.png",
}


def plot_figures(records: Sequence[RunRecord], figures_dir: Path) -> dict[str, Path]:
    """Write the four PNGs; returns their paths by name. The curves, the signal and the time
    figures are the core's (adarl/report/figures.py, as `python -m adarl.report` draws them)."""
    figures_dir.mkdir(parents=True, exist_ok=True)
    by_arm = runs_by_arm(records)
    order = _arm_order(by_arm)
    arms = {arm: by_arm[arm] for arm in order}
    paths = {name: figures_dir / file for name, file in FIGURES.items()}
    plot_curves(
        arms,
        paths["curves"],
        panels=[("held-out accuracy, T = 1 (%)", _accuracy, axis) for axis in AXES],
        title="Held-out accuracy: mean ± 1 sd over seeds",
    )
    plot_signal(arms, paths["signal"])
    _plot_difficulty(records, arms, paths["difficulty"])
    plot_time(arms, paths["time"])
    return paths


def _accuracy(point: EvalPoint) -> float:
    return point.accuracy


def _plot_difficulty(
    records: Sequence[RunRecord], by_arm: Mapping[str, Sequence[RunRecord]], path: Path
) -> None:
    """Final accuracy by difficulty level per arm (mean ± 1 sd over seeds), the base in grey."""
    plt = pyplot()
    order = list(by_arm)
    colors = arm_colors(order)
    levels = sorted({lv for r in records for lv in r.evals[-1].by_difficulty}, key=_natural_key)
    fig, ax = plt.subplots(figsize=(10, 4.5))
    if levels:
        width = 0.8 / (len(order) + 1)
        base = [
            mean_and_spread(r.evals[0].by_difficulty.get(lv, math.nan) for r in by_arm[order[0]])[0]
            for lv in levels
        ]
        ax.bar(
            np.arange(len(levels)) - (len(order) / 2) * width,
            [100 * b for b in base],
            width=width,
            color="0.7",
            label="base",
        )
        for i, arm in enumerate(order):
            stats = [
                mean_and_spread(r.evals[-1].by_difficulty.get(lv, math.nan) for r in by_arm[arm])
                for lv in levels
            ]
            ax.bar(
                np.arange(len(levels)) + (i + 1 - len(order) / 2) * width,
                [100 * m for m, _ in stats],
                yerr=[100 * s for _, s in stats],
                width=width,
                color=colors[arm],
                label=arm,
            )
        ax.set_xticks(range(len(levels)), [f"level {lv}" for lv in levels])
        ax.legend(fontsize=8)
    ax.set_ylabel("final held-out accuracy, T = 1 (%)")
    ax.set_title("Accuracy by difficulty level (mean ± 1 sd over seeds)")
    ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


# -- the docs section ---------------------------------------------------------------------------


def docs_section(
    data: ReportData,
    figures: Mapping[str, Path],
    docs_path: Path,
    *,
    data_path: Path = Path("docs/data/learning.json"),
) -> str:
    records = data.runs
    setting = data.setting
    headline, best = headline_table(records)
    by_arm = runs_by_arm(records)
    reaches = reach_to_reference(records, best)
    seeds = sorted({r.seed for r in records})

    def link(name: str) -> str:
        return os.path.relpath(figures[name], docs_path.parent)

    paired = paired_section(records, DEFAULT_ARM if DEFAULT_ARM in by_arm else best)
    target_line = ""
    if "ada_seq_balance" in by_arm and best != "ada_seq_balance":
        said = verdict(reaches["ada_seq_balance"], reaches[best])
        met = said.startswith(("faster", "tie"))
        target = (
            "**Target** (streaming Seq-Balance reaches GRPO-best's final accuracy with no more "
            f"rollouts than GRPO-best): {'met' if met else 'not met'}: ada_seq_balance is "
            f"{said} against {best}." + ("" if met else " Why: see the diagnosis below.")
        )
        target_line = paragraph(target) + "\n\n"
    curated = curation_target(records, best)
    if curated:
        target_line += curated + "\n\n"
    intro = paragraph(
        f"`{data.command}` ({setting['name']} setting: arms {', '.join(setting['arms'])}; "
        f"seeds {', '.join(map(str, seeds))}; {_count(setting['max_rollouts'])} training "
        f"rollouts per run; evaluation every {_count(setting['eval_every_rollouts'])} rollouts "
        f"on {setting['eval_num_prompts']} held-out prompts × "
        f"{setting['eval_samples_per_prompt']} samples at T = 1, no hint). Each run is the real "
        "launch command (Ray, vLLM CPU engine, DeepSpeed learner) from the same base model; a "
        "seed changes prompt order, sampling and learner randomness."
        + (
            f" Every arm also ran with `{' '.join(setting['overrides'])}`."
            if setting.get("overrides")
            else ""
        )
        + f" Written by the harness from {data_path} (`--report-only` redraws it without "
        "training)."
    )
    return f"""{SECTION_TITLE}

{intro}

{paragraph(setting["why"])}

Spread = sample standard deviation over seeds (n − 1). A difference smaller than the larger of
the two spreads is a **tie**. GRPO-best = the GRPO arm with the highest mean final accuracy
(here **{best}**). Target, per seed: GRPO-best's final accuracy on that seed (paired: the same
seed gives every arm the same prompt order and evaluation draws); "to target" is where the
seed's accuracy curve, linearly interpolated between evaluations, first reaches it; an arm that
misses it on any seed is "not reached (seeds reached / seeds)". Wall time is the training clock:
the sum of the steps' `timing/step_s`, evaluations and checkpoints (start-up, which every arm
pays alike, and work lost to an interruption are left out); it was measured on a shared 2-core
machine: read it as indicative.

### Headline

{target_line}{headline}{coverage_section(records, figures, docs_path)}{paired}
### Curves

![accuracy against steps, rollouts, tokens and wall time]({link("curves")})

### Signal

![mixed-group ratio per step and samples per prompt by p̃]({link("signal")})

### Difficulty

Final held-out accuracy (T = 1) by difficulty level; "base" is the step-0 evaluation.

{difficulty_table(records)}
![accuracy by difficulty level]({link("difficulty")})
{hints_section(records)}
### Time

Share of the driver's step time (`timing/step_s`: data, rollout phase, batch, learner, weight
sync; evaluation and checkpoints are outside it). Overhead share = time outside generation
(waiting for engines), reward, learner, weight sync and the passes an algorithm asks of the
engines or learners (GVM's statistics, DRO's rescoring, hint writing); see the Overhead section.

{time_table(records)}
![step-time breakdown]({link("time")})

### Diagnosis

{diagnosis_tables(records)}
Where an arm loses to {best}, and why:

{losses_explained(records, best)}"""


def write_report(
    data: ReportData, *, docs_path: Path, figures_dir: Path, data_path: Path, save: bool
) -> None:
    """Plot and write the docs section from `data`; `save` first writes it to `data_path`."""
    if save:
        data.save(data_path)
    figures = plot_figures(data.runs, figures_dir)
    if has_pass_at_k(data.runs):
        figures = {**figures, **plot_coverage(data.runs, figures_dir)}
    section = docs_section(data, figures, docs_path, data_path=data_path)
    write_section(docs_path, SECTION_TITLE, section)
