"""Coverage in `python -m adarl.bench learning`'s report: pass@k of every arm against the base model
and the guesser, the default's targets, by level, and two plots. Pure functions of the per-run
records (adarl/bench/learning_records.py), apart from drawing the PNGs.

Every figure is per seed and paired: a root seed gives every arm the same base model, held-out
prompts and evaluation seeds, so an arm's final pass@k and the base's are drawn with the same
seeds (adarl/evaluation). "k_max" is the largest k every run's final evaluation reached (64 with
`eval.final_samples_per_prompt=64`).

The targets (issue 30), checked per seed at equal rollouts, for the arm `make run` runs
(`DEFAULT_ARM`):
* pass@1 at or above GRPO-best's (GRPO-best: the GRPO arm with the highest mean final pass@1);
* pass@8 and pass@k_max above every GRPO arm's and every curation anchor's;
* moonshot: pass@k_max at or above the base model's, with pass@1 at or above GRPO-best's.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from adarl.bench.learning_records import (
    CURATION_ANCHORS,
    GRPO_EXPERIMENTS,
    RunRecord,
    grpo_best,
    mean_and_spread,
    runs_by_arm,
    seed_band,
)
from adarl.config import DEFAULT_EXPERIMENT
from adarl.evaluation.evaluator import level_key

# The arm whose experiment `make run` runs, drawn bold in the figures.
DEFAULT_ARM = DEFAULT_EXPERIMENT
FIGURES = {"coverage": "coverage_pass_at_k.png", "coverage_training": "coverage_training.png"}


def has_pass_at_k(records: Sequence[RunRecord]) -> bool:
    """Every run logged pass@k at its base and final evaluation."""
    return bool(records) and all(r.evals[0].pass_at_k and r.evals[-1].pass_at_k for r in records)


def k_max(records: Sequence[RunRecord]) -> int:
    """The largest k every run's base and final evaluation reached."""
    return min(max(int(k) for k in e.pass_at_k) for r in records for e in (r.evals[0], r.evals[-1]))


def shown_ks(records: Sequence[RunRecord]) -> tuple[int, ...]:
    """pass@1, pass@8 and pass@k_max (fewer when the runs drew fewer samples)."""
    top = k_max(records)
    return tuple(dict.fromkeys(k for k in (1, 8, top) if k <= top))


def _final(run: RunRecord, k: int, level: str | None = None) -> float:
    value = run.evals[-1].pass_at(k, level=level)
    return float("nan") if value is None else value


def _base(run: RunRecord, k: int, level: str | None = None) -> float:
    value = run.evals[0].pass_at(k, level=level)
    return float("nan") if value is None else value


def _guess(run: RunRecord, k: int) -> float:
    return run.evals[-1].guess_pass_at_k.get(str(k), float("nan"))


def _pm(values: Sequence[float]) -> str:
    mean, spread = mean_and_spread(values)
    return f"{100 * mean:.1f} ± {100 * spread:.1f}%"


def _mean(values: Sequence[float]) -> str:
    return f"{100 * float(np.mean(values)):.1f}%"


def coverage_table(records: Sequence[RunRecord]) -> str:
    """Per arm: pass@1, pass@8, pass@k_max base → final, the guesser's pass@k_max, what the arm
    covers above it, and its distance from the base's pass@k_max (the moonshot)."""
    by_arm = runs_by_arm(records)
    ks = shown_ks(records)
    top = ks[-1]
    head = " | ".join(f"pass@{k} base → final" for k in ks)
    lines = [
        f"| arm | seeds | steps | {head} | guesser pass@{top} | pass@{top} above guesser "
        f"| pass@{top} − base's |",
        "|---" * (6 + len(ks)) + "|",
    ]
    for arm, runs in by_arm.items():
        cells = [
            f"{_mean([_base(r, k) for r in runs])} → {_pm([_final(r, k) for r in runs])}"
            for k in ks
        ]
        name = f"**{arm}** (make run)" if arm == DEFAULT_ARM else arm
        lines.append(
            f"| {name} | {len(runs)} | {np.mean([r.steps for r in runs]):.0f} | "
            + " | ".join(cells)
            + f" | {_mean([_guess(r, top) for r in runs])} | "
            f"{_pm([_final(r, top) - _guess(r, top) for r in runs])} | "
            f"{_pm([_final(r, top) - _base(r, top) for r in runs])} |"
        )
    return "\n".join(lines) + "\n"


def per_seed_table(records: Sequence[RunRecord]) -> str:
    """pass@1 / pass@8 / pass@k_max per seed: the paired numbers the targets are checked on."""
    by_arm = runs_by_arm(records)
    ks = shown_ks(records)
    seeds = sorted({r.seed for r in records})
    label = " / ".join(f"pass@{k}" for k in ks)
    lines = [
        "| arm | " + " | ".join(f"seed {s}: {label}" for s in seeds) + " |",
        "|---" * (len(seeds) + 1) + "|",
    ]
    base_runs = {r.seed: r for r in next(iter(by_arm.values()))}

    def cell(run: RunRecord | None, pick: str) -> str:
        if run is None:
            return "–"
        values = [_base(run, k) if pick == "base" else _final(run, k) for k in ks]
        return " / ".join(f"{100 * v:.1f}" for v in values)

    lines.append("| base | " + " | ".join(cell(base_runs.get(s), "base") for s in seeds) + " |")
    for arm, runs in by_arm.items():
        seed_runs = {r.seed: r for r in runs}
        lines.append(
            f"| {arm} | " + " | ".join(cell(seed_runs.get(s), "final") for s in seeds) + " |"
        )
    return "\n".join(lines) + "\n"


def by_level_table(records: Sequence[RunRecord]) -> str:
    """Final pass@1 / pass@k_max by difficulty level (seed means), the base's and the guesser's
    first: where each arm gained accuracy and where it lost coverage."""
    by_arm = runs_by_arm(records)
    top = k_max(records)
    levels = sorted(
        {lv for r in records for lv in r.evals[-1].pass_at_k_by_difficulty}, key=level_key
    )
    if not levels:
        return "(the runs logged no pass@k by level)\n"
    lines = [
        "| arm | " + " | ".join(f"level {lv}" for lv in levels) + " |",
        "|---" * (len(levels) + 1) + "|",
    ]
    first = next(iter(by_arm.values()))

    def cell(values_1: list[float], values_top: list[float]) -> str:
        return f"{100 * np.nanmean(values_1):.0f} / {100 * np.nanmean(values_top):.0f}"

    lines.append(
        "| base | "
        + " | ".join(
            cell([_base(r, 1, lv) for r in first], [_base(r, top, lv) for r in first])
            for lv in levels
        )
        + " |"
    )
    for arm, runs in by_arm.items():
        lines.append(
            f"| {arm} | "
            + " | ".join(
                cell([_final(r, 1, lv) for r in runs], [_final(r, top, lv) for r in runs])
                for lv in levels
            )
            + " |"
        )
    return "\n".join(lines) + "\n"


def coverage_targets(records: Sequence[RunRecord], *, default_arm: str = DEFAULT_ARM) -> str:
    """The default's targets and the moonshot, per seed (module docstring); "" when the default
    or GRPO did not run."""
    by_arm = runs_by_arm(records)
    grpo_arms = [
        a
        for a, runs in by_arm.items()
        if runs[0].experiment in GRPO_EXPERIMENTS and a != default_arm
    ]
    if default_arm not in by_arm or not grpo_arms:
        return ""
    best = grpo_best(records, exclude=default_arm)
    top = k_max(records)
    rivals = [a for a in (*grpo_arms, *CURATION_ANCHORS) if a in by_arm and a != default_arm]
    mine = {r.seed: r for r in by_arm[default_arm]}
    parts: list[str] = []
    met = {"pass@1": True, "coverage": True, "moonshot": True}
    for seed, run in sorted(mine.items()):
        best_run = next((r for r in by_arm[best] if r.seed == seed), None)
        if best_run is None:
            continue
        p1, p1_best = _final(run, 1), _final(best_run, 1)
        met["pass@1"] &= p1 >= p1_best
        beaten = []
        for k in (8, top):
            top_rival = max(
                ((_final(r, k), arm) for arm in rivals for r in by_arm[arm] if r.seed == seed),
                default=(float("-inf"), ""),
            )
            above = _final(run, k) > top_rival[0]
            met["coverage"] &= above
            beaten.append(
                f"pass@{k} {100 * _final(run, k):.1f}% vs {100 * top_rival[0]:.1f}% "
                f"({top_rival[1]}{'' if above else ': not above'})"
            )
        moon = _final(run, top) >= _base(run, top) and p1 >= p1_best
        met["moonshot"] &= moon
        parts.append(
            f"seed {seed}: pass@1 {100 * p1:.1f}% vs {best}'s {100 * p1_best:.1f}% "
            f"({'at or above' if p1 >= p1_best else 'below'}); "
            + "; ".join(beaten)
            + f"; pass@{top} {100 * (_final(run, top) - _base(run, top)):+.1f} points from the "
            "base's"
        )
    verdicts = (
        f"pass@1 at or above GRPO-best's on every seed: {'met' if met['pass@1'] else 'not met'}; "
        f"pass@8 and pass@{top} above every GRPO arm's and curation anchor's on every seed: "
        f"{'met' if met['coverage'] else 'not met'}; moonshot (pass@{top} at or above the "
        f"base's with GRPO-best's pass@1): {'met' if met['moonshot'] else 'not met'}"
    )
    return (
        f"**Coverage targets** ({default_arm}, the `make run` default; pass@1 against GRPO-best "
        f"= {best}, pass@8 and pass@{top} against {', '.join(rivals)}): {verdicts}.\n\n"
        + "\n".join(f"- {p}" for p in parts)
        + "\n"
    )


def moonshot_distance_table(records: Sequence[RunRecord]) -> str:
    """How far each arm ends from the moonshot: its pass@k_max minus the base's and its pass@1
    minus GRPO-best's (the best GRPO arm other than the default), per seed mean ± spread."""
    by_arm = runs_by_arm(records)
    others = [a for a, runs in by_arm.items() if runs[0].experiment in GRPO_EXPERIMENTS]
    best = grpo_best(records, exclude=DEFAULT_ARM if len(set(others) - {DEFAULT_ARM}) else None)
    top = k_max(records)
    best_p1 = {r.seed: _final(r, 1) for r in by_arm[best]}
    lines = [
        f"| arm | pass@{top} − base's | pass@1 − GRPO-best's ({best}) | seeds at the moonshot |",
        "|---|---|---|---|",
    ]
    for arm, runs in by_arm.items():
        coverage_gap = [_final(r, top) - _base(r, top) for r in runs]
        accuracy_gap = [_final(r, 1) - best_p1[r.seed] for r in runs if r.seed in best_p1]
        at = sum(c >= 0 and a >= 0 for c, a in zip(coverage_gap, accuracy_gap, strict=False))
        lines.append(
            f"| {arm} | {_pm(coverage_gap)} | {_pm(accuracy_gap) if accuracy_gap else '–'} | "
            f"{at}/{len(runs)} |"
        )
    return "\n".join(lines) + "\n"


def plot_coverage(records: Sequence[RunRecord], figures_dir: Path) -> dict[str, Path]:
    """pass@k against k at the end (base, guesser, every arm) beside final pass@1 against
    pass@k_max per seed; and pass@8 along training. Returns the paths by name."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figures_dir.mkdir(parents=True, exist_ok=True)
    paths = {name: figures_dir / file for name, file in FIGURES.items()}
    by_arm = runs_by_arm(records)
    cmap = plt.get_cmap("tab20")
    colors = {arm: cmap(i % 20) for i, arm in enumerate(by_arm)}
    top = k_max(records)
    ks = [k for k in sorted({int(k) for r in records for k in r.evals[-1].pass_at_k}) if k <= top]
    first = next(iter(by_arm.values()))

    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5))
    left.plot(ks, [100 * np.mean([_base(r, k) for r in first]) for k in ks], "k--", label="base")
    left.plot(
        ks,
        [100 * np.mean([_guess(r, k) for r in first]) for k in ks],
        ":",
        color="0.5",
        label="guesser",
    )
    for arm, runs in by_arm.items():
        left.plot(
            ks,
            [100 * np.mean([_final(r, k) for r in runs]) for k in ks],
            color=colors[arm],
            label=arm,
            linewidth=2.5 if arm == DEFAULT_ARM else 1.2,
        )
    left.set_xscale("log", base=2)
    left.set_xlabel("k (samples per held-out prompt)")
    left.set_ylabel("pass@k at the end (%)")
    left.set_title("pass@k, seed mean, at equal rollouts")
    left.grid(alpha=0.3)
    left.legend(fontsize=7)
    for arm, runs in by_arm.items():
        xs = [100 * _final(r, 1) for r in runs]
        ys = [100 * _final(r, top) for r in runs]
        right.scatter(xs, ys, color=colors[arm], alpha=0.4, s=18)
        right.scatter(
            [np.mean(xs)],
            [np.mean(ys)],
            color=colors[arm],
            s=90,
            label=arm,
            marker="*" if arm == DEFAULT_ARM else "o",
            edgecolors="k",
        )
    right.scatter(
        [100 * np.mean([_base(r, 1) for r in first])],
        [100 * np.mean([_base(r, top) for r in first])],
        color="k",
        marker="X",
        s=90,
        label="base",
    )
    right.set_xlabel("final pass@1 (%)")
    right.set_ylabel(f"final pass@{top} (%)")
    right.set_title(f"pass@1 against pass@{top} at the end (dots: seeds; large: mean)")
    right.grid(alpha=0.3)
    right.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(paths["coverage"], dpi=90)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for arm, runs in by_arm.items():
        curves = [
            (
                [e.rollouts for e in r.evals if e.pass_at(8) is not None],
                [e.pass_at(8) or 0.0 for e in r.evals if e.pass_at(8) is not None],
            )
            for r in runs
        ]
        if any(len(xs) < 2 for xs, _ in curves):
            continue
        band = seed_band(curves, 40)
        ax.plot(
            band.grid,
            100 * band.mean,
            color=colors[arm],
            label=arm,
            linewidth=2.5 if arm == DEFAULT_ARM else 1.2,
        )
    ax.set_xlabel("training rollouts")
    ax.set_ylabel("held-out pass@8 (%)")
    ax.set_title("pass@8 along training (seed mean)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(paths["coverage_training"], dpi=90)
    plt.close(fig)
    return paths


def coverage_section(
    records: Sequence[RunRecord], figures: Mapping[str, Path], docs_path: Path
) -> str:
    """The "### Coverage" subsection of the Learning report; "" for runs without pass@k."""
    if not has_pass_at_k(records):
        return ""

    def link(name: str) -> str:
        return os.path.relpath(figures[name], docs_path.parent)

    top = k_max(records)
    return f"""
### Coverage

Held-out pass@k (unbiased estimator, adarl/evaluation) at the end of each run, from
{top} samples per prompt drawn with the same seeds as the base model's at step 0; the guesser
draws each answer from the training answers of the prompt's level (pass@k above it is what the
policy covers beyond chance). Mean ± spread over seeds; "base" is the seed mean of the step-0
evaluations.

{coverage_targets(records)}
{coverage_table(records)}
Per seed (base at step 0; every arm at the end):

{per_seed_table(records)}
Distance from the moonshot (pass@{top} at or above the base's, pass@1 at GRPO-best's):

{moonshot_distance_table(records)}
Final pass@1 / pass@{top} by difficulty level (%, seed means):

{by_level_table(records)}
![pass@k at the end, and pass@1 against pass@{top}]({link("coverage")})

![pass@8 along training]({link("coverage_training")})
"""
