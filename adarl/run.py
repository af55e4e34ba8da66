"""Run a validated `AdarlConfig`: its training session, then the outcome written and printed.

The composition root is `adarl.session.TrainingSession` (adarl/session.py): the only place
that turns configuration into objects and decides where they run (in this process, or as Ray
actors through `adarl.cluster`). The loop itself is `adarl.driver.step_loop.Driver`; everything
algorithm-specific was decided by the builders the session calls.

Run directory, at the end: `config.yaml`, `console.log` (what the console showed, written by the
launcher: adarl/console.py), `metrics.jsonl`, `completions.jsonl`, `wandb/`, `checkpoints/`,
`model/` (the final policy as a Hugging Face model: adarl/export.py), `logs/` (each actor's
library output, `logger.library_logs=file`), `summary.json`; later, on demand,
`exports/step_NNNNNN/` (`python -m adarl.export`), `*.evaluation.json` (`python -m
adarl.evaluate`) and `report/` (tables and plots: `python -m adarl.report`).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path

from adarl.config import AdarlConfig
from adarl.run_summary import RunSummary, paired_text

log = logging.getLogger("adarl")

# One thread per process: two threads collapse when another process holds a core.
for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def run(config: AdarlConfig, *, run_dir: Path) -> RunSummary:
    """Train as `config` says; resumable from `run_dir`'s checkpoints. Returns the summary."""
    from adarl.session import TrainingSession

    with TrainingSession(config, run_dir=run_dir) as session:
        summary = session.train()
    (run_dir / "summary.json").write_text(json.dumps(summary.to_json(), indent=2) + "\n")
    from adarl.evaluation import level_names

    print(_format_summary(summary, run_dir, level_names(config.task)))
    return summary


def _format_summary(
    summary: RunSummary, run_dir: Path, level_names: Mapping[str, str] | None = None
) -> str:
    """The run's last lines: what it did, base -> final, the final evaluation's table by level,
    where its outputs are, and why it stopped early if it did."""

    def pct(x: float | None) -> str:
        return "n/a" if x is None else f"{100 * x:.1f}%"

    stages = ", ".join(f"{k} {v:.0f}s" for k, v in summary.time_per_stage_s.items())
    if summary.base_accuracy is None:
        accuracy = (
            "  held-out accuracy: n/a (no held-out set: set task.test_path, or task.test_fraction "
            "above 0)\n"
        )
    else:
        accuracy = (
            f"  held-out accuracy (T=1 mean): {pct(summary.base_accuracy)} -> "
            f"{pct(summary.final_accuracy)}\n"
            f"  held-out accuracy (greedy):   {pct(summary.base_greedy_accuracy)} -> "
            f"{pct(summary.final_greedy_accuracy)}\n"
        )
    accuracy += _format_pass_at_k(summary)
    if summary.final_evaluation:
        from adarl.evaluation import format_table

        accuracy += (
            "  final evaluation, by level (T=1, guesser below each row):\n"
            + format_table(summary.final_evaluation, level_names)
            + "\n"
        )
    return (
        f"\nadarl run '{summary.name}' finished: {summary.steps} steps in "
        f"{summary.wall_time_s:.0f}s ({stages})\n"
        f"{accuracy}"
        f"  objective: {summary.objective.get('statement', 'n/a')}\n"
        f"  rollouts generated: {summary.rollouts_generated}, tokens: "
        f"{summary.tokens_generated}\n"
        f"  run directory: {run_dir}" + _format_model(summary, run_dir) + _format_stop(summary)
    )


def _format_stop(summary: RunSummary) -> str:
    """A run stopped for want of a learning signal ends its summary with why and what helps."""
    if summary.stop_message is None:
        return ""
    return "\n\n" + summary.stop_message


def _format_model(summary: RunSummary, run_dir: Path) -> str:
    if summary.model_dir is None:
        return ""
    return (
        f"\n  final model (Hugging Face: transformers, vLLM): {summary.model_dir}\n"
        f"  evaluate it: python -m adarl.evaluate {run_dir} [task overrides]"
    )


def _format_pass_at_k(summary: RunSummary) -> str:
    """pass@k base -> final at k = 1, 8 and the largest, each beside the guesser's (answers
    drawn from the training answers of the prompt's level): what the run gained in accuracy and
    what it kept of the coverage the base model had."""
    base, final = summary.base_evaluation, summary.final_evaluation
    if not base or not final or base["samples_per_prompt"] != final["samples_per_prompt"]:
        return ""
    largest = max(int(k) for k in final["pass_at_k"])
    shown = [k for k in (1, 8, largest) if str(k) in final["pass_at_k"]]
    lines = [
        f"  held-out pass@k (T=1, {final['samples_per_prompt']} samples/prompt, base -> final):"
    ]
    for k in dict.fromkeys(shown):
        guess = final["guess_pass_at_k"].get(str(k))
        guessed = "" if guess is None else f"   (guesser {100 * guess:.1f}%)"
        lines.append(
            f"    pass@{k:<3} {100 * base['pass_at_k'][str(k)]:5.1f}% -> "
            f"{100 * final['pass_at_k'][str(k)]:5.1f}%{guessed}"
        )
    rise = summary.pass_at_1_rise
    if rise is not None and rise["se"] > 0:
        lines.append(f"    pass@1 rise {paired_text(rise['rise'], rise['se'], rise['prompts'])}")
    constant = final.get("best_constant")
    if constant is not None:  # a policy that learned only the answers' prior scores this
        lines.append(
            f"    best constant answer {constant['answer']!r}: {100 * constant['accuracy']:.1f}%"
        )
        lead = summary.lead_over_best_constant
        if lead is not None and lead["se"] > 0:
            lines.append(
                f"    pass@1 above it {paired_text(lead['lead'], lead['se'], lead['prompts'])}"
            )
    return "\n".join(lines) + "\n"
