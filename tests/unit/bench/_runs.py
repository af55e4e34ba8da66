"""Synthetic adarl run directories for the bench tests: metrics written by the real
`MetricsLogger`, with the keys a finished run logs (base evaluation at step 0, one row per step)."""

from __future__ import annotations

import io
import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from adarl.logging import MetricsLogger

BINS = ("0", "0-0.25", "0.25-0.5", "0.5-0.75", "0.75-1", "1")


def write_run(
    run_dir: Path,
    *,
    rollouts_per_step: int,
    accuracy_at_step: Mapping[int, float],
    steps: int,
    mixed_fraction: float = 0.5,
    groups: int = 8,
    prompts_by_bin: Sequence[float] = (2, 2, 1, 1, 1, 1),
    samples_by_bin: Sequence[float] = (8, 6, 4, 4, 6, 8),
    tokens_per_rollout: int = 5,
    step_timing: Mapping[str, float] | None = None,
    by_difficulty: Mapping[int, Mapping[str, float]] | None = None,
    finished: bool = True,
    log_discarded: bool = True,
) -> Path:
    """A run whose evaluations happen at the steps of `accuracy_at_step` (0 = the base eval).

    Start-up (build + base evaluation) takes 13 s, then wall time grows 2 s per step; a later
    evaluation takes 0.5 s (`timing/eval_s`); every step has the same sampling/signal/timing
    metrics.
    """
    timing = dict(step_timing or {})
    by_difficulty = by_difficulty or {}
    with MetricsLogger(
        run_dir=run_dir, mode="disabled", progress_bar=False, console=io.StringIO()
    ) as logger:
        start_up = {"timing/build_s": 10.0, "timing/eval_s": 3.0}
        logger.log(0, {**_eval(accuracy_at_step[0], by_difficulty.get(0, {})), **start_up})
        for step in range(1, steps + 1):
            row: dict[str, float] = {
                "sampling/rollouts": float(rollouts_per_step),
                "sampling/requests": float(rollouts_per_step // 4),
                "sampling/tokens": float(rollouts_per_step * tokens_per_rollout),
                "signal/mixed_group_fraction": mixed_fraction,
                "signal/groups_trained": float(groups),
                "perf/rollouts_total": float(step * rollouts_per_step),
                "perf/tokens_total": float(step * rollouts_per_step * tokens_per_rollout),
                "perf/wall_s": 13.0 + 2.0 * step,
                **{f"timing/{name}_s": value for name, value in timing.items()},
            }
            if log_discarded:
                row["sampling/discarded_samples"] = 1.0
            for name, prompts, samples in zip(BINS, prompts_by_bin, samples_by_bin, strict=True):
                row[f"sampling/prompts_by_pass_rate/{name}"] = float(prompts)
                row[f"sampling/samples_per_prompt_by_pass_rate/{name}"] = float(samples)
            if step in accuracy_at_step:
                row.update(_eval(accuracy_at_step[step], by_difficulty.get(step, {})))
                row["timing/eval_s"] = 0.5
            logger.log(step, row)
    if finished:
        (run_dir / "summary.json").write_text(json.dumps({"steps": steps}) + "\n")
    return run_dir


def _eval(accuracy: float, by_difficulty: Mapping[str, float]) -> dict[str, float]:
    return {
        "eval/accuracy": accuracy,
        "eval/greedy_accuracy": min(1.0, accuracy + 0.1),
        **{f"eval/accuracy_by_difficulty/{level}": v for level, v in by_difficulty.items()},
    }
