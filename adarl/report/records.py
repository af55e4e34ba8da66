"""A run's record for reports, read from its `metrics.jsonl`, and the statistics over seeds
the reports draw on (pure; no training, no plotting). `python -m adarl.report` and the benchmark
reports (`python -m adarl.bench learning`, adarl/bench/learning_records.py) both stand on it.

Definitions:

* an evaluation point (`EvalPoint`): one row of `metrics.jsonl` that holds `eval/accuracy`
  (pass@1 at T = 1, no hint), with its pass@k for k = 1, 2, 4, … up to its samples per prompt,
  the guesser's beside it, overall and by level (adarl/evaluation names them); step 0 is the
  base evaluation, and the base and the final one draw `eval.final_samples_per_prompt` samples
  with the same seeds;
* an evaluation prompt by prompt (`PromptCounts`): the base and final evaluations' rows of
  `RUN_DIR/evaluations.jsonl` (adarl/evaluation/records.py), read by the bench's `load_run`, so
  that two runs on the same prompts compare prompt by prompt (adarl/bench/paired_report.py);
* curves over seeds: each seed's curve linearly interpolated onto a common grid from 0 to the
  smallest final x over the seeds (never extrapolated); mean ± spread, the spread being the
  sample standard deviation (n − 1) over seeds (0 for one seed).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

# p̃ bins in the order the allocator logs them (adarl/allocator/metrics.py PASS_RATE_BINS).
PASS_RATE_BINS: tuple[str, ...] = ("0", "0-0.25", "0.25-0.5", "0.5-0.75", "0.75-1", "1")
AXES: tuple[str, ...] = ("step", "rollouts", "tokens", "wall_s")
AXIS_LABELS: dict[str, str] = {
    "step": "training steps",
    "rollouts": "training rollouts",
    "tokens": "generated tokens",
    "wall_s": "training wall time (s: steps, evaluations, checkpoints)",
}
GRID_POINTS = 60
# The hint stage's per-step metrics the report sums (adarl/allocator/hint_stage.py).
HINT_METRICS = (
    "signal/zero_pass_share_unhinted",
    "signal/zero_pass_share_after_hints",
    "signal/prompts_rescued_by_hints",
    "sampling/hinted_rollouts",
)


@dataclass
class EvalPoint:
    step: int
    rollouts: float
    tokens: float
    wall_s: float
    accuracy: float
    greedy_accuracy: float | None
    by_difficulty: dict[str, float] = field(default_factory=dict)
    # pass@k by k (as a string, "1" = accuracy), the guesser's, and pass@k by level then k; empty
    # for runs logged before pass@k was (the report then shows accuracy only).
    pass_at_k: dict[str, float] = field(default_factory=dict)
    guess_pass_at_k: dict[str, float] = field(default_factory=dict)
    pass_at_k_by_difficulty: dict[str, dict[str, float]] = field(default_factory=dict)
    samples_per_prompt: int | None = None

    def x(self, axis: str) -> float:
        return float(getattr(self, axis))

    def pass_at(self, k: int, *, level: str | None = None) -> float | None:
        """pass@k of this evaluation (of one level); None where it drew fewer than k samples."""
        table = self.pass_at_k if level is None else self.pass_at_k_by_difficulty.get(level, {})
        return table.get(str(k))


def prompt_set(prompt_ids: Sequence[str]) -> str:
    """A digest of an evaluation's prompts in order: two evaluations pair iff their digests do."""
    digest = hashlib.sha256("\0".join(prompt_ids).encode()).hexdigest()[:16]
    return f"{len(prompt_ids)}:{digest}"


@dataclass
class PromptCounts:
    """One evaluation prompt by prompt (adarl/evaluation/records.py): lists aligned by prompt;
    the prompts themselves as a digest (`prompt_set`), which is all pairing needs."""

    samples: int  # samples drawn per prompt
    prompts: str  # prompt_set(prompt ids)
    levels: list[str]
    correct: list[int]
    distinct_correct: list[int] = field(default_factory=list)
    response_tokens: list[float] = field(default_factory=list)

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> PromptCounts:
        return cls(
            samples=int(row["samples_per_prompt"]),
            prompts=prompt_set(row["prompt_ids"]),
            levels=list(row["levels"]),
            correct=[int(c) for c in row["correct"]],
            distinct_correct=[int(c) for c in row.get("distinct_correct", [])],
            response_tokens=[round(float(t), 1) for t in row.get("response_tokens", [])],
        )


@dataclass
class RunRecord:
    """What the report needs from one run, small enough to commit for every run."""

    arm: str
    experiment: str
    seed: int
    evals: list[EvalPoint]
    mixed_fraction: list[float]  # per training step, in step order
    steps: int
    rollouts: float  # Σ sampling/rollouts over steps (training rollouts)
    tokens: float
    groups_trained: float
    mixed_groups: float  # Σ mixed fraction × groups trained
    discarded_samples: float | None  # None when the run does not log them
    start_up_s: float  # build + base evaluation (step 0's timing/build_s + timing/eval_s)
    prompts_by_bin: dict[str, float]  # Σ over steps, by p̃ bin
    rollouts_by_bin: dict[str, float]  # Σ prompts × samples per prompt, by p̃ bin
    timing_s: dict[str, float]  # Σ over training steps of every per-step `timing/<name>_s`
    # Σ over training steps of the hint stage's metrics (`HINT_METRICS`); empty without hints.
    hints: dict[str, float] = field(default_factory=dict)
    # Optimizer steps per training step (learner.mini_batches_per_step × epochs_per_step).
    optimizer_steps_per_step: int = 1
    # The base and final evaluations prompt by prompt (RUN_DIR/evaluations.jsonl); None for
    # runs from before it existed (paired comparisons then show nothing for them).
    base_prompts: PromptCounts | None = None
    final_prompts: PromptCounts | None = None

    @property
    def final_accuracy(self) -> float:
        return self.evals[-1].accuracy

    @property
    def base_accuracy(self) -> float:
        return self.evals[0].accuracy

    def to_json(self) -> dict[str, Any]:
        return _rounded(asdict(self))

    @property
    def optimizer_steps(self) -> int:
        return self.steps * self.optimizer_steps_per_step

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunRecord:
        values = dict(data)
        values["evals"] = [EvalPoint(**e) for e in data["evals"]]
        for key in ("base_prompts", "final_prompts"):
            if values.get(key) is not None:
                values[key] = PromptCounts(**values[key])
        return cls(**values)


def _rounded(value: Any) -> Any:
    """Six significant digits: the JSON stays small and diffs stay readable."""
    if isinstance(value, float):
        return float(f"{value:.6g}")
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return value


def record_from_rows(
    rows: Sequence[Mapping[str, Any]],
    *,
    arm: str,
    experiment: str,
    seed: int,
    require_evaluations: bool = True,
) -> RunRecord:
    """Extract a `RunRecord` from a run's `metrics.jsonl` rows (step 0 = the base evaluation).
    `require_evaluations`: refuse a run without a base evaluation and one after training (what a
    comparison needs); False reads whatever evaluations it has, none included.

    An evaluation's wall time is the training clock when it started: the sum of the earlier
    steps' `timing/step_s`, evaluations and checkpoints, plus its own step. Start-up is left out
    (every arm pays it alike), and so is the work a crash threw away: a resumed run's metrics
    are truncated to its checkpoint, so the clock is what the finished run really needed.
    """
    evals: list[EvalPoint] = []
    mixed: list[float] = []
    totals = {"rollouts": 0.0, "tokens": 0.0, "groups": 0.0, "mixed": 0.0}
    discarded: float | None = None  # None: the run does not log sampling/discarded_samples
    start_up_s = 0.0
    prompts_by_bin = dict.fromkeys(PASS_RATE_BINS, 0.0)
    rollouts_by_bin = dict.fromkeys(PASS_RATE_BINS, 0.0)
    timing: dict[str, float] = {}
    hints: dict[str, float] = {}
    steps = 0
    clock_s = 0.0
    for row in rows:
        step = int(row["step"])
        if step > 0:
            steps += 1
            for key in HINT_METRICS:
                if key in row:
                    hints[key] = hints.get(key, 0.0) + float(row[key])
            fraction = float(row.get("signal/mixed_group_fraction", 0.0))
            groups = float(row.get("signal/groups_trained", 0.0))
            mixed.append(fraction)
            totals["rollouts"] += float(row.get("sampling/rollouts", 0.0))
            totals["tokens"] += float(row.get("sampling/tokens", 0.0))
            totals["groups"] += groups
            totals["mixed"] += fraction * groups
            if "sampling/discarded_samples" in row:
                discarded = (discarded or 0.0) + float(row["sampling/discarded_samples"])
            for name in PASS_RATE_BINS:
                prompts = float(row.get(f"sampling/prompts_by_pass_rate/{name}", 0.0))
                per_prompt = float(row.get(f"sampling/samples_per_prompt_by_pass_rate/{name}", 0.0))
                prompts_by_bin[name] += prompts
                rollouts_by_bin[name] += prompts * per_prompt
            for key, value in row.items():
                if key.startswith("timing/") and key.endswith("_s"):
                    name = key.removeprefix("timing/").removesuffix("_s")
                    timing[name] = timing.get(name, 0.0) + float(value)
            clock_s += float(row.get("timing/step_s", 0.0))
        else:
            # Start-up and the base evaluation: excluded from the training wall time.
            start_up_s = float(row.get("timing/build_s", 0.0)) + float(
                row.get("timing/eval_s", 0.0)
            )
        if "eval/accuracy" in row:
            greedy = row.get("eval/greedy_accuracy")
            evals.append(
                EvalPoint(
                    **_pass_at_k_fields(row),
                    step=step,
                    rollouts=float(row.get("perf/rollouts_total", 0.0)),
                    tokens=float(row.get("perf/tokens_total", 0.0)),
                    wall_s=clock_s if step > 0 else 0.0,
                    accuracy=float(row["eval/accuracy"]),
                    greedy_accuracy=None if greedy is None else float(greedy),
                    by_difficulty={
                        key.removeprefix("eval/accuracy_by_difficulty/"): float(value)
                        for key, value in row.items()
                        if key.startswith("eval/accuracy_by_difficulty/")
                    },
                )
            )
        if step > 0:
            clock_s += float(row.get("timing/eval_s", 0.0)) + float(
                row.get("timing/checkpoint_s", 0.0)
            )
    if require_evaluations and (not evals or evals[0].step != 0):
        raise ValueError(
            f"{arm} seed {seed}: metrics have no base evaluation at step 0 (eval/accuracy); "
            "is this an adarl run directory that finished?"
        )
    if require_evaluations and len(evals) < 2:
        raise ValueError(f"{arm} seed {seed}: metrics have no evaluation after training")
    return RunRecord(
        arm=arm,
        experiment=experiment,
        seed=seed,
        evals=evals,
        mixed_fraction=mixed,
        steps=steps,
        rollouts=totals["rollouts"],
        tokens=totals["tokens"],
        groups_trained=totals["groups"],
        mixed_groups=totals["mixed"],
        discarded_samples=discarded,
        start_up_s=start_up_s,
        prompts_by_bin=prompts_by_bin,
        rollouts_by_bin=rollouts_by_bin,
        timing_s=timing,
        hints=hints,
    )


def _pass_at_k_fields(row: Mapping[str, Any]) -> dict[str, Any]:
    """An evaluation row's pass@k figures (adarl/evaluation/evaluator.py names them)."""
    passes: dict[str, float] = {"1": float(row["eval/accuracy"])}
    guess: dict[str, float] = {}
    by_level: dict[str, dict[str, float]] = {}
    for key, value in row.items():
        if not key.startswith(("eval/pass@", "eval/guess_pass@")) or key.endswith("_above_guess"):
            continue
        name, _, level = key.partition("_by_difficulty/")
        guessed = name.startswith("eval/guess_pass@")
        k = name.rpartition("@")[2]
        if level:
            if not guessed:
                by_level.setdefault(level, {})[k] = float(value)
        elif guessed:
            guess[k] = float(value)
        else:
            passes[k] = float(value)
    samples = row.get("eval/samples_per_prompt")
    return {
        "pass_at_k": passes if len(passes) > 1 or samples is not None else {},
        "guess_pass_at_k": guess,
        "pass_at_k_by_difficulty": by_level,
        "samples_per_prompt": None if samples is None else int(samples),
    }


# -- statistics over seeds (pure) ---------------------------------------------------------------


def mean_and_spread(values: Iterable[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (n − 1) over seeds; the spread of one seed is 0."""
    array = np.asarray(list(values), dtype=float)
    if array.size == 0:
        raise ValueError("mean_and_spread of no values")
    spread = float(array.std(ddof=1)) if array.size > 1 else 0.0
    return float(array.mean()), spread


def interpolate(xs: Sequence[float], ys: Sequence[float], grid: np.ndarray) -> np.ndarray:
    """Piecewise-linear y(x) on `grid`; NaN outside [xs[0], xs[-1]] (never extrapolated)."""
    x = np.asarray(xs, dtype=float)
    if np.any(np.diff(x) < 0):
        raise ValueError(f"interpolate: x must be non-decreasing, got {list(xs)}")
    return np.interp(grid, x, np.asarray(ys, dtype=float), left=np.nan, right=np.nan)


def common_grid(
    curves: Sequence[tuple[Sequence[float], Sequence[float]]], points: int
) -> np.ndarray:
    """0 .. the smallest last x over `curves`: where every seed has a value."""
    upper = min(float(xs[-1]) for xs, _ in curves)
    return np.linspace(0.0, upper, points)


@dataclass(frozen=True)
class Band:
    grid: np.ndarray
    mean: np.ndarray
    spread: np.ndarray
    seeds: int


def seed_band(curves: Sequence[tuple[Sequence[float], Sequence[float]]], points: int) -> Band:
    """Mean ± spread of several seeds' curves, each interpolated onto their common grid."""
    grid = common_grid(curves, points)
    values = np.stack([interpolate(xs, ys, grid) for xs, ys in curves])
    spread = values.std(axis=0, ddof=1) if len(curves) > 1 else np.zeros_like(grid)
    return Band(grid=grid, mean=values.mean(axis=0), spread=spread, seeds=len(curves))


def samples_per_prompt_by_bin(runs: Sequence[RunRecord]) -> dict[str, float | None]:
    """Samples drawn per prompt, by its pool's pass rate p̃, over `runs` (None for a bin no
    prompt fell in)."""
    drawn = {b: sum(r.rollouts_by_bin[b] for r in runs) for b in PASS_RATE_BINS}
    prompts = {b: sum(r.prompts_by_bin[b] for r in runs) for b in PASS_RATE_BINS}
    return {b: drawn[b] / prompts[b] if prompts[b] else None for b in PASS_RATE_BINS}


def runs_by_arm(records: Sequence[RunRecord]) -> dict[str, list[RunRecord]]:
    """Runs grouped by arm: arms in order of first appearance, each arm's runs by seed."""
    out: dict[str, list[RunRecord]] = {}
    for record in records:
        out.setdefault(record.arm, []).append(record)
    return {arm: sorted(runs, key=lambda r: r.seed) for arm, runs in out.items()}
