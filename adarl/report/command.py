"""`python -m adarl.report RUN_DIR [RUN_DIR ...] [--out DIR]`: look at finished (or running) runs.

For each run directory it prints the held-out evaluations over training (one row per evaluation:
step, training rollouts, pass@1, pass@8, pass@k at the most samples drawn, greedy, the best
constant answer), then the final evaluation's table by level and the run's outcome as
`summary.json` states it, and it writes PNG figures with every run given overlaid, one colour
each (the label is the run's name, with its directory when two runs share one):

* `pass_at_k.png`: held-out pass@1, pass@8 and greedy against training steps and rollouts;
* `reward.png`: the training reward per step, and the shares of the step's prompts whose samples
  were all wrong (p̃ = 0) or all right (p̃ = 1), moving averages;
* `signal.png`: the share of trained groups with mixed outcomes per step, and the samples drawn
  per prompt by p̃;
* `time.png`: seconds per training step by part (generation, reward, learner, weight sync, ...);

into `--out` (default: `RUN_DIR/report/` for one run, `./report/` for several). Everything is
read from each run's `metrics.jsonl`, `config.yaml` and `summary.json` (adarl/logging.py,
adarl/run_summary.py): nothing is recomputed, no model is loaded, a run that is still going is
shown as far as it got. The records and figures are those the benchmark reports draw
(adarl/report/records.py, adarl/report/figures.py).

Exit status: 0 done; 2 when a directory is not a run directory (no `metrics.jsonl`), naming it.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from adarl.evaluation.table import format_table
from adarl.report.records import EvalPoint, RunRecord, record_from_rows

FIGURES = {
    "pass_at_k": "pass_at_k.png",
    "reward": "reward.png",
    "signal": "signal.png",
    "time": "time.png",
}
REPORT_DIR = "report"  # inside a run directory, for a report of that run alone
RUNS_SHOWN = 5  # run directories a wrong path's message names (the last, by name: by time)


@dataclass
class LoadedRun:
    """One run directory as the report reads it."""

    run_dir: Path
    name: str
    rows: list[dict[str, Any]]  # metrics.jsonl
    record: RunRecord
    summary: dict[str, Any] | None  # summary.json; None while the run is going


def load_run_dir(run_dir: Path) -> LoadedRun:
    """Read a run directory; ValueError naming it when it is not one."""
    from adarl.logging import METRICS_FILE, read_metrics_jsonl

    metrics = run_dir / METRICS_FILE
    if not metrics.is_file():
        what = "does not exist" if not run_dir.exists() else f"has no {METRICS_FILE}"
        inside = sorted(str(p.parent) for p in run_dir.glob(f"*/{METRICS_FILE}"))
        if run_dir.is_dir() and not inside:
            inside = sorted(str(p.parent) for p in run_dir.glob(f"*/*/{METRICS_FILE}"))
        hint = f"; the runs inside it: {' '.join(inside[-RUNS_SHOWN:])}" if inside else ""
        raise ValueError(
            f"{run_dir} {what}: give the directory of a run (runs/<name>/<time>/, or the "
            f"hydra.run.dir a run was started with){hint}"
        )
    rows = read_metrics_jsonl(metrics)
    summary_path = run_dir / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.is_file() else None
    name = (summary or {}).get("name") or _config_name(run_dir)
    record = record_from_rows(rows, arm=name, experiment=name, seed=0, require_evaluations=False)
    return LoadedRun(run_dir=run_dir, name=name, rows=rows, record=record, summary=summary)


def _config_name(run_dir: Path) -> str:
    config = run_dir / "config.yaml"
    if config.is_file():
        for line in config.read_text().splitlines():
            if line.startswith("name:"):
                return line.partition(":")[2].strip().strip("'\"")
    return run_dir.name


def labels(runs: Sequence[LoadedRun]) -> list[str]:
    """Each run's label: its name, with its directory where names repeat."""
    names = [run.name for run in runs]
    return [
        run.name if names.count(run.name) == 1 else f"{run.name} ({run.run_dir})" for run in runs
    ]


def _pct(value: float | None) -> str:
    return "" if value is None else f"{100 * value:.1f}%"


def evaluation_table(run: LoadedRun) -> str:
    """One row per held-out evaluation: step, rollouts, pass@1 / 8 / k_max, greedy, and the best
    constant answer's accuracy; a column is blank where the evaluation drew fewer samples."""
    evals = run.record.evals
    if not evals:
        return "  no held-out evaluation (task.test_fraction=0 and no task.test_path)"
    top = max((int(k) for e in evals for k in e.pass_at_k), default=1)
    ks = list(dict.fromkeys(k for k in (1, 8, top) if k <= top))
    constants = {
        int(row["step"]): row.get("eval/best_constant_accuracy")
        for row in run.rows
        if "eval/accuracy" in row
    }
    header = ["step", "rollouts", *(f"pass@{k}" for k in ks), "greedy", "constant"]
    body = [
        [
            str(e.step),
            f"{e.rollouts:,.0f}",
            *(_pct(_pass_at(e, k)) for k in ks),
            _pct(e.greedy_accuracy),
            _pct(constants.get(e.step)),
        ]
        for e in evals
    ]
    widths = [max(len(row[i]) for row in [header, *body]) for i in range(len(header))]
    return "\n".join(
        "  " + "  ".join(cell.rjust(width) for cell, width in zip(row, widths, strict=True))
        for row in [header, *body]
    )


def _pass_at(point: EvalPoint, k: int) -> float | None:
    return point.accuracy if k == 1 else point.pass_at(k)


def describe(run: LoadedRun, label: str) -> str:
    """The run's text: its evaluations over steps, the final table by level, its outcome."""
    lines = [f"{label}: {run.run_dir}", evaluation_table(run)]
    summary = run.summary
    if summary is None:
        steps = max((int(row["step"]) for row in run.rows), default=0)
        lines.append(f"  still running (no summary.json): {steps} steps logged")
        return "\n".join(lines)
    final = summary.get("final_evaluation")
    if final:
        from adarl.evaluation import level_names

        names = (
            level_names(_task_config(run.run_dir))
            if (run.run_dir / "config.yaml").is_file()
            else {}
        )
        lines += [
            "  final evaluation, by level (guesser below each row):",
            format_table(final, names),
        ]
    lead = summary.get("lead_over_best_constant")
    if lead is not None and lead.get("se"):
        lines.append(
            f"  pass@1 above the best constant answer: {100 * lead['lead']:+.1f} points "
            f"({lead['lead'] / lead['se']:+.1f} paired SE over {int(lead['prompts'])} prompts)"
        )
    lines.append(
        f"  {summary['steps']} steps, {summary['rollouts_generated']:,} training rollouts, "
        f"{summary['wall_time_s']:.0f} s; stopped by {summary.get('stop_reason', 'n/a')}"
    )
    return "\n".join(lines)


def _task_config(run_dir: Path) -> Any:
    from adarl.export import read_run_config

    return read_run_config(run_dir / "config.yaml").task


def write_figures(runs: Sequence[LoadedRun], out: Path) -> dict[str, Path]:
    """The report's PNGs (module docstring), every run overlaid; returns their paths by name."""
    from adarl.report.figures import plot_curves, plot_signal, plot_time

    out.mkdir(parents=True, exist_ok=True)
    paths = {name: out / file for name, file in FIGURES.items()}
    arms = {label: [run.record] for label, run in zip(labels(runs), runs, strict=True)}
    plot_curves(
        arms,
        paths["pass_at_k"],
        panels=PASS_AT_K_PANELS,
        title="Held-out evaluation over training (T = 1; greedy: one sample at T = 0)",
    )
    _plot_reward(
        {label: run.rows for label, run in zip(labels(runs), runs, strict=True)}, paths["reward"]
    )
    trained = {label: records for label, records in arms.items() if records[0].steps}
    if trained:
        plot_signal(trained, paths["signal"])
        plot_time(trained, paths["time"])
    else:  # no training step yet: nothing to draw
        del paths["signal"], paths["time"]
    return paths


def _pass_at_8(point: EvalPoint) -> float | None:
    return point.pass_at(8)


def _greedy(point: EvalPoint) -> float | None:
    return point.greedy_accuracy


def _accuracy(point: EvalPoint) -> float:
    return point.accuracy


# pass@k figure: each metric (rows) against steps and rollouts (columns).
PASS_AT_K_PANELS = tuple(
    (f"held-out {name} (%)", value, axis)
    for name, value in (("pass@1", _accuracy), ("pass@8", _pass_at_8), ("greedy", _greedy))
    for axis in ("step", "rollouts")
)


def _plot_reward(rows_by_run: Mapping[str, Sequence[Mapping[str, Any]]], path: Path) -> None:
    """Training reward per step beside the shares of the step's prompts at p̃ = 0 and p̃ = 1."""
    from adarl.report.figures import arm_colors, moving_average, pyplot

    plt = pyplot()
    colors = arm_colors(list(rows_by_run))
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    drawn = False
    for arm, rows in rows_by_run.items():
        steps = [row for row in rows if int(row["step"]) > 0 and "signal/reward_mean" in row]
        if not steps:
            continue
        drawn = True
        window = max(1, min(9, len(steps) // 10))
        left.plot(
            *moving_average([float(r["signal/reward_mean"]) for r in steps], window=window),
            color=colors[arm],
            label=arm,
        )
        for share, style in (("0", "-"), ("1", "--")):
            values = []
            for r in steps:
                prompts = float(r.get("sampling/prompts", 0.0)) or 1.0
                values.append(float(r.get(f"sampling/prompts_by_pass_rate/{share}", 0.0)) / prompts)
            right.plot(
                *moving_average(values, window=window),
                style,
                color=colors[arm],
                label=f"{arm}: p̃ = {share}",
            )
    left.set_xlabel("training step")
    left.set_ylabel("mean reward of the step's training rollouts")
    left.set_title("Training reward (moving average)")
    left.grid(alpha=0.3)
    right.set_xlabel("training step")
    right.set_ylabel("share of the step's prompts")
    right.set_title("No-signal prompts: all wrong (p̃ = 0, solid), all right (p̃ = 1, dashed)")
    right.set_ylim(0.0, 1.0)
    right.grid(alpha=0.3)
    if drawn:
        left.legend(fontsize=8)
        right.legend(fontsize=7)
    else:  # a run from before signal/reward_mean was logged, or one with no training step
        left.text(
            0.5, 0.5, "no step logged signal/reward_mean", ha="center", transform=left.transAxes
        )
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m adarl.report",
        description="Print each run's held-out evaluations over training and its final table, "
        "and write PNG figures (pass@k, reward, signal, time per step) with the runs overlaid.",
    )
    parser.add_argument("run_dirs", nargs="+", type=Path, help="run directories")
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help=f"where the PNGs go (default: RUN_DIR/{REPORT_DIR} for one run, ./{REPORT_DIR} "
        "for several)",
    )
    args = parser.parse_args(argv)
    try:
        runs = [load_run_dir(run_dir) for run_dir in args.run_dirs]
    except ValueError as error:
        print(f"adarl.report: {error}", file=sys.stderr)
        return 2
    for run, label in zip(runs, labels(runs), strict=True):
        print(describe(run, label) + "\n")
    out = args.out or (runs[0].run_dir / REPORT_DIR if len(runs) == 1 else Path(REPORT_DIR))
    paths = write_figures(runs, out)
    print("figures: " + ", ".join(str(path) for path in paths.values()))
    return 0
