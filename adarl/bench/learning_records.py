"""The data of `python -m adarl.bench learning`: the comparison's own statistics (GRPO-best, the
rollouts to reach a target, the tie rule) and its data file, on the per-run records of the core
(adarl/report/records.py, which `python -m adarl.report` reads too; its names are re-exported
here). Pure; no training, no plotting.

Definitions (adarl/bench/learning_report.py's docs section repeats them):

* curves: held-out accuracy (T = 1, no hint) at each evaluation, linearly interpolated onto a
  common grid from 0 to the smallest final x over the arm's seeds (never extrapolated); mean ±
  spread over seeds, where the spread is the sample standard deviation (n − 1) over seeds;
* GRPO-best: the GRPO arm (experiment `grpo`) with the highest mean final accuracy;
* to target, per seed: the first x where the seed's interpolated accuracy curve reaches
  GRPO-best's final accuracy *on the same seed* (the same root seed gives every arm the same
  prompt order and evaluation draws, so the comparison is paired); an arm reaches the target when
  all its seeds do, and is then reported as mean ± spread over seeds;
* tie: two means that differ by less than the larger of their two spreads;
* pass@k (adarl/evaluation): each evaluation's unbiased pass@k for k = 1, 2, 4, … up to its
  samples per prompt, the guesser's beside it, overall and by level; the base (step 0) and the
  final evaluation draw `eval.final_samples_per_prompt` samples with the same seeds.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from adarl.report.records import (
    AXES,
    AXIS_LABELS,
    GRID_POINTS,
    HINT_METRICS,
    PASS_RATE_BINS,
    Band,
    EvalPoint,
    PromptCounts,
    RunRecord,
    common_grid,
    interpolate,
    mean_and_spread,
    prompt_set,
    record_from_rows,
    runs_by_arm,
    samples_per_prompt_by_bin,
    seed_band,
)

__all__ = [
    "AXES",
    "AXIS_LABELS",
    "CURATED_ARM",
    "CURATION_ANCHORS",
    "GRID_POINTS",
    "GRPO_EXPERIMENT",
    "GRPO_EXPERIMENTS",
    "HINT_METRICS",
    "PASS_RATE_BINS",
    "Band",
    "EvalPoint",
    "PromptCounts",
    "Reach",
    "ReportData",
    "RunRecord",
    "common_grid",
    "first_reach",
    "grpo_best",
    "interpolate",
    "is_tie",
    "load_run",
    "mean_and_spread",
    "prompt_set",
    "reach_to_reference",
    "record_from_rows",
    "runs_by_arm",
    "samples_per_prompt_by_bin",
    "seed_band",
    "verdict",
]

GRPO_EXPERIMENT = "grpo"  # arms of this experiment compete for GRPO-best
# ... and of these: GRPO on make run's anchored update is the best-tuned GRPO baseline.
GRPO_EXPERIMENTS = (GRPO_EXPERIMENT, "grpo_anchored")
CURATED_ARM = "ada_curated"  # adarl's history-aware arm (issue 19)
CURATION_ANCHORS = ("greso", "knapsack_grpo")  # the published curation arms (issue 19)


def _numbers_inline(text: str) -> str:
    """Lists of numbers on one line each (indent=1 puts every element on its own line: the
    per-prompt counts of a report would take a line per prompt)."""
    return _NUMBER_LIST.sub(
        lambda m: "[" + ", ".join(m.group(1).split()).replace(",,", ",") + "]", text
    )


_NUMBER_LIST = re.compile(r"\[\s*((?:-?[\d.e+-]+,?\s*)+)\]")


def load_run(run_dir: Path, *, arm: str, experiment: str, seed: int) -> RunRecord:
    from adarl.logging import read_metrics_jsonl

    if not (run_dir / "summary.json").exists():
        raise FileNotFoundError(
            f"{run_dir} has no summary.json: the run has not finished; run "
            "`python -m adarl.bench learning` with the same settings to finish it"
        )
    rows = read_metrics_jsonl(run_dir / "metrics.jsonl")
    record = record_from_rows(rows, arm=arm, experiment=experiment, seed=seed)
    record.optimizer_steps_per_step = _optimizer_steps_per_step(run_dir)
    base, final = _base_and_final_prompts(run_dir)
    record.base_prompts, record.final_prompts = base, final
    return record


def _optimizer_steps_per_step(run_dir: Path) -> int:
    """learner.mini_batches_per_step × epochs_per_step of the run's resolved config.yaml."""
    import yaml

    path = run_dir / "config.yaml"
    if not path.exists():
        return 1
    learner = (yaml.safe_load(path.read_text()) or {}).get("learner", {})
    return int(learner.get("mini_batches_per_step", 1)) * int(learner.get("epochs_per_step", 1))


def _base_and_final_prompts(run_dir: Path) -> tuple[PromptCounts | None, PromptCounts | None]:
    from adarl.evaluation.records import read_evaluations

    rows = read_evaluations(run_dir)
    base = next((r for r in rows if r["kind"] == "base"), None)
    final = next((r for r in reversed(rows) if r["kind"] == "final"), None)
    return (
        None if base is None else PromptCounts.from_row(base),
        None if final is None else PromptCounts.from_row(final),
    )


# -- the comparison's statistics (pure) ------------------------------------------------------


def first_reach(xs: Sequence[float], ys: Sequence[float], target: float) -> float | None:
    """The smallest x at which the piecewise-linear curve through (xs, ys) reaches `target`."""
    if ys[0] >= target:
        return float(xs[0])
    for i in range(1, len(xs)):
        x0, y0, x1, y1 = xs[i - 1], ys[i - 1], xs[i], ys[i]
        if y1 >= target > y0:
            return float(x0 + (target - y0) / (y1 - y0) * (x1 - x0))
    return None


def is_tie(a: tuple[float, float], b: tuple[float, float]) -> bool:
    """Means differ by less than the larger of the two spreads (each (mean, spread))."""
    return abs(a[0] - b[0]) < max(a[1], b[1])


@dataclass(frozen=True)
class Reach:
    """Per seed: the x at which an arm reached that seed's target, or None."""

    arm: str
    per_seed: dict[int, float | None]

    @property
    def reached(self) -> bool:
        return bool(self.per_seed) and all(v is not None for v in self.per_seed.values())

    @property
    def seeds_reached(self) -> int:
        return sum(v is not None for v in self.per_seed.values())

    def summary(self) -> tuple[float, float]:
        if not self.reached:
            raise ValueError(f"{self.arm} did not reach the target on every seed")
        return mean_and_spread(v for v in self.per_seed.values() if v is not None)


def grpo_best(records: Sequence[RunRecord], *, exclude: str | None = None) -> str:
    """The GRPO arm with the highest mean final accuracy over its seeds (other than `exclude`:
    the arm compared with GRPO-best, when it is a GRPO arm itself)."""
    grpo = {
        arm: mean_and_spread(r.final_accuracy for r in runs)[0]
        for arm, runs in runs_by_arm(records).items()
        if runs[0].experiment in GRPO_EXPERIMENTS and arm != exclude
    }
    if not grpo:
        raise ValueError("no GRPO arm among the runs: GRPO-best is undefined; add a grpo arm")
    return max(grpo, key=lambda arm: grpo[arm])


def reach_to_reference(
    records: Sequence[RunRecord], reference: str, axis: str = "rollouts"
) -> dict[str, Reach]:
    """Per arm: on each seed the reference ran, where the arm reached the reference's final
    accuracy on that seed (paired targets)."""
    by_arm = runs_by_arm(records)
    targets = {r.seed: r.final_accuracy for r in by_arm[reference]}
    out: dict[str, Reach] = {}
    for arm, runs in by_arm.items():
        out[arm] = Reach(
            arm=arm,
            per_seed={
                r.seed: first_reach(
                    [e.x(axis) for e in r.evals], [e.accuracy for e in r.evals], targets[r.seed]
                )
                for r in runs
                if r.seed in targets
            },
        )
    return out


def verdict(arm: Reach, reference: Reach) -> str:
    """ "faster (0.62×)", "slower (1.40×)", "tie (0.95×)" or "not reached (k/n seeds)"."""
    if not arm.reached:
        return f"not reached ({arm.seeds_reached}/{len(arm.per_seed)} seeds)"
    mine, theirs = arm.summary(), reference.summary()
    ratio = f"{mine[0] / theirs[0]:.2f}×" if theirs[0] > 0 else "n/a"
    if is_tie(mine, theirs):
        return f"tie ({ratio})"
    return f"{'faster' if mine[0] < theirs[0] else 'slower'} ({ratio})"


@dataclass
class ReportData:
    """docs/data/learning.json: everything the section and plots are drawn from."""

    setting: dict[str, Any]
    command: str
    runs: list[RunRecord]

    def to_json(self) -> dict[str, Any]:
        return {
            "setting": self.setting,
            "command": self.command,
            "runs": [r.to_json() for r in self.runs],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ReportData:
        return cls(
            setting=dict(data["setting"]),
            command=str(data["command"]),
            runs=[RunRecord.from_json(r) for r in data["runs"]],
        )

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(_numbers_inline(json.dumps(self.to_json(), indent=1)) + "\n")

    @classmethod
    def load(cls, path: Path) -> ReportData:
        if not path.exists():
            raise FileNotFoundError(
                f"{path} does not exist; run `python -m adarl.bench learning` (without "
                "--report-only) first, or point --data at an existing learning.json"
            )
        return cls.from_json(json.loads(path.read_text()))
