"""Figures of runs' records (adarl/report/records.py), each a PNG, runs (or arms of several
seeds) overlaid in one colour each: `python -m adarl.report` draws them for the runs it is given,
`python -m adarl.bench learning` for its arms (adarl/bench/learning_report.py).

* `plot_curves`: evaluation figures (pass@1, pass@8, ...) against training steps, rollouts,
  tokens or wall time, mean ± 1 sd over an arm's seeds (a band of one seed is its curve);
* `plot_signal`: the share of trained groups with mixed outcomes per step (the groups that carry
  a gradient; a moving average) and the samples drawn per prompt by its pool's pass rate p̃;
* `plot_time`: where a training step's time goes (`TIME_PARTS`), seconds per step.

matplotlib draws off-screen (the Agg backend); nothing here trains or reads files.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from adarl.report.records import (
    AXIS_LABELS,
    GRID_POINTS,
    PASS_RATE_BINS,
    EvalPoint,
    RunRecord,
    samples_per_prompt_by_bin,
    seed_band,
)

# The step's work that is not orchestration: generation (waiting for engines), reward, and the
# engine or learner passes an algorithm asks for (statistics, pool rescoring, hint writing), the
# learner's update and the weight sync. Orchestration overhead is the rest of the step.
WORKLOADS = (
    "rollout_wait",
    "reward",
    "train",
    "weight_sync",
    "statistics",
    "pool_reward",
    "hint",
    "hint_ahead",
)

# Step-time breakdown: (label, how it is computed from the summed timing/<name>_s).
TIME_PARTS: tuple[tuple[str, Callable[[Mapping[str, float]], float]], ...] = (
    ("generation (waiting for engines)", lambda t: t.get("rollout_wait", 0.0)),
    ("reward", lambda t: t.get("reward", 0.0)),
    ("allocator + group building", lambda t: t.get("allocator", 0.0)),
    ("dispatch", lambda t: t.get("dispatch", 0.0)),
    ("train batch", lambda t: t.get("batch", 0.0)),
    ("learner", lambda t: t.get("train", 0.0)),
    ("weight sync", lambda t: t.get("weight_sync", 0.0)),
    ("statistics pass (GVM)", lambda t: t.get("statistics", 0.0)),
    ("pool reward (DRO's scoring)", lambda t: t.get("pool_reward", 0.0)),
    ("hint generation", lambda t: t.get("hint", 0.0) + t.get("hint_ahead", 0.0)),
    (
        "other (data, loop)",
        lambda t: (
            t.get("step", 0.0)
            - sum(t.get(k, 0.0) for k in ("allocator", "dispatch", "batch", *WORKLOADS))
        ),
    ),
)

Arms = Mapping[str, Sequence[RunRecord]]  # label -> its runs (seeds), in drawing order


def pyplot() -> Any:
    """matplotlib's pyplot on the off-screen backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def arm_colors(arms: Sequence[str]) -> dict[str, Any]:
    cmap = pyplot().get_cmap("tab10")
    return {arm: cmap(i % 10) for i, arm in enumerate(arms)}


def moving_average(values: Sequence[float], *, window: int) -> tuple[np.ndarray, np.ndarray]:
    """(x, y): the mean of each `window` consecutive values, x at the window's centre (steps
    numbered from 1)."""
    window = max(1, min(window, len(values)))
    smooth = np.convolve(np.asarray(values, dtype=float), np.ones(window) / window, mode="valid")
    return np.arange(len(smooth)) + 1 + (window - 1) / 2, smooth


Panel = tuple[str, Callable[[EvalPoint], "float | None"], str]  # (y label, value, x axis)


def plot_curves(arms: Arms, path: Path, *, panels: Sequence[Panel], title: str) -> None:
    """One panel per (y label, value of an evaluation, x axis of records.AXES), two per row: the
    value (a share, drawn in %) against the axis, mean ± 1 sd over each arm's seeds. An arm whose
    seeds have fewer than two evaluations with a value is left out of that panel."""
    plt = pyplot()
    colors = arm_colors(list(arms))
    columns = 2 if len(panels) > 1 else 1
    rows = -(-len(panels) // columns)
    fig, grid = plt.subplots(rows, columns, figsize=(5.5 * columns, 4 * rows), sharey="row")
    axes = list(np.atleast_1d(grid).flat)
    for ax, (ylabel, value, axis) in zip(axes, panels, strict=False):
        for arm, runs in arms.items():
            curves = [
                ([e.x(axis) for e in points], [value(e) or 0.0 for e in points])
                for points in ([e for e in r.evals if value(e) is not None] for r in runs)
            ]
            if any(len(xs) < 2 for xs, _ in curves):
                continue
            band = seed_band(curves, GRID_POINTS)
            ax.plot(band.grid, 100 * band.mean, color=colors[arm], label=arm)
            ax.fill_between(
                band.grid,
                100 * (band.mean - band.spread),
                100 * (band.mean + band.spread),
                color=colors[arm],
                alpha=0.2,
                linewidth=0,
            )
        ax.set_xlabel(AXIS_LABELS[axis])
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def plot_signal(arms: Arms, path: Path) -> None:
    """Mixed-outcome groups per step (seed mean, moving average) beside samples per prompt by
    the pool's pass rate p̃."""
    plt = pyplot()
    colors = arm_colors(list(arms))
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    for arm, runs in arms.items():
        length = min(len(r.mixed_fraction) for r in runs)
        if not length:
            continue
        mean = np.mean([r.mixed_fraction[:length] for r in runs], axis=0)
        x, smooth = moving_average(mean, window=max(1, min(9, length // 10)))
        left.plot(x, smooth, color=colors[arm], label=arm)
    left.set_xlabel("training step")
    left.set_ylabel("mixed-outcome groups / trained groups")
    left.set_title("Effective group ratio (seed mean, moving average)")
    left.set_ylim(0.0, 1.0)
    left.grid(alpha=0.3)
    left.legend(fontsize=8)
    width = 0.8 / max(1, len(arms))
    for i, (arm, runs) in enumerate(arms.items()):
        by_bin = samples_per_prompt_by_bin(runs)
        right.bar(
            np.arange(len(PASS_RATE_BINS)) + (i - (len(arms) - 1) / 2) * width,
            [by_bin[b] or 0.0 for b in PASS_RATE_BINS],
            width=width,
            color=colors[arm],
            label=arm,
        )
    right.set_xticks(range(len(PASS_RATE_BINS)), [f"p̃ {b}" for b in PASS_RATE_BINS])
    right.set_ylabel("samples drawn per prompt")
    right.set_title("Samples per prompt by pool pass rate p̃")
    right.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def plot_time(arms: Arms, path: Path) -> None:
    """Seconds per training step by part (`TIME_PARTS`), one stacked bar per arm."""
    plt = pyplot()
    order = list(arms)
    fig, ax = plt.subplots(figsize=(12, 4.5))
    bottoms = np.zeros(len(order))
    part_colors = plt.get_cmap("tab20")  # one colour per part (there are more than 8)
    for j, (label, part) in enumerate(TIME_PARTS):
        heights = []
        for arm in order:
            runs = arms[arm]
            timing = {k: sum(r.timing_s.get(k, 0.0) for r in runs) for k in runs[0].timing_s}
            heights.append(part(timing) / max(1, sum(r.steps for r in runs)))
        ax.bar(order, heights, bottom=bottoms, label=label, color=part_colors(j % 20))
        bottoms += np.asarray(heights)
    ax.set_ylabel("seconds per training step")
    ax.set_title("Where a step's time goes (driver's view; eval and checkpoints excluded)")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside the bars
    ax.tick_params(axis="x", labelrotation=20)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
