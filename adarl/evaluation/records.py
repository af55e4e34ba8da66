"""Every evaluation's per-prompt counts, one JSON row each, in `RUN_DIR/evaluations.jsonl`.

metrics.jsonl holds each evaluation's means; comparing two runs prompt by prompt (a paired
standard error, which prompts a method moved) needs the counts behind them: for every held-out
prompt, its id, level, samples drawn, correct samples, distinct correct responses and mean
response length. A run resumed from a checkpoint may write a step twice; `read_evaluations`
keeps the last row of each (step, kind).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from adarl.evaluation.evaluator import EvalKind, EvalResult

EVALUATIONS_FILE = "evaluations.jsonl"


def evaluation_row(*, step: int, kind: EvalKind, result: EvalResult) -> dict[str, Any]:
    """One evaluation as a JSON row (lists aligned by prompt)."""
    return {
        "step": step,
        "kind": kind.value,
        "samples_per_prompt": result.samples_per_prompt,
        "prompt_ids": list(result.prompt_ids),
        "levels": list(result.levels),
        "correct": list(result.correct),
        "distinct_correct": list(result.distinct_correct),
        "response_tokens": [round(t, 3) for t in result.response_tokens],
    }


def append_evaluation(run_dir: Path, *, step: int, kind: EvalKind, result: EvalResult) -> None:
    with (Path(run_dir) / EVALUATIONS_FILE).open("a", encoding="utf-8") as file:
        file.write(json.dumps(evaluation_row(step=step, kind=kind, result=result)) + "\n")


def read_evaluations(run_dir: Path) -> list[dict[str, Any]]:
    """The rows of `run_dir`'s evaluations.jsonl in step order, the last of each (step, kind);
    [] when the run wrote none."""
    path = Path(run_dir) / EVALUATIONS_FILE
    if not path.exists():
        return []
    rows: dict[tuple[int, str], dict[str, Any]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            rows[(int(row["step"]), str(row["kind"]))] = row
    return [rows[key] for key in sorted(rows)]
