"""`python -m adarl.bench overhead`: the share of step time spent outside the real work.

Runs the embedded default (`python -m adarl.launch +experiment=ada_seq_balance`, the real path:
Ray, vLLM CPU engine, DeepSpeed learner) for `--steps` steps, or reads an existing run
(`--run-dir`), and splits each training step's wall time `timing/step_s` (the driver's whole
step; evaluation, logging and checkpoints happen outside it) into:

* the work: generation (`timing/rollout_wait_s`, the driver blocked waiting for engines),
  reward (`timing/reward_s`, scoring training rollouts), learning (`timing/train_s`) and weight
  sync (`timing/weight_sync_s`);
* the orchestration overhead: everything else in the step, i.e. allocator calls
  (`timing/allocator_s`, split into the allocator's own compute, `timing/allocator_compute_s`:
  sampling decisions and group building, and the rest: the round trips to the allocator actor,
  `perf/allocator_calls` of them), building and submitting requests
  (`timing/dispatch_s`), building the train batch (`timing/batch_s`), drawing prompts
  (`timing/data_s`) and the rest of the driver's loop.

    overhead share = Σ_steps (step_s − rollout_wait_s − reward_s − train_s − weight_sync_s)
                     / Σ_steps step_s

over the steps after `--warmup-steps` (the first steps pay one-time costs: lazy imports, the
engine's first batches). Target: ≤ 3%. Written as the `## Overhead` section of
docs/benchmarks.md with `--write-docs`.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from adarl.bench.docs_section import paragraph, write_section
from adarl.bench.learning import (
    CONSOLE_LOG,
    DOCS_PATH,
    RunState,
    launch_command,
    launch_env,
    prepare_run_dir,
    run_subprocess,
)
from adarl.bench.learning_report import overhead_share

SECTION_TITLE = "## Overhead"
LOAD_FILE = "bench_load.json"  # the machine's load average while the run ran
TARGET_SHARE = 0.03
WORK = ("rollout_wait", "reward", "train", "weight_sync")
OVERHEAD_PARTS = ("allocator_compute", "allocator_transport", "dispatch", "batch", "data")
LABELS = {
    "rollout_wait": "generation (waiting for engines)",
    "reward": "reward",
    "train": "learner",
    "weight_sync": "weight sync",
    "allocator_compute": "allocator compute (sampling, group building)",
    "allocator_transport": "allocator round trips (Ray actor calls)",
    "dispatch": "dispatch (build + submit requests)",
    "batch": "train batch",
    "data": "prompt draws",
    "rest": "rest of the driver loop",
}


@dataclass(frozen=True)
class Overhead:
    steps: int  # steps measured (after the warm-up)
    seconds: dict[str, float]  # Σ over measured steps, by part (LABELS keys and "step")
    per_step_share: list[float]  # each measured step's overhead share
    rollouts_per_step: float  # mean sampling/rollouts of the measured steps
    requests_per_step: float  # mean sampling/requests (engine requests the allocator made)
    allocator_calls_per_step: float  # mean perf/allocator_calls (driver ─► allocator calls)

    @property
    def share(self) -> float:
        return overhead_share(self.seconds)


def measure_overhead(rows: Sequence[Mapping[str, Any]], *, warmup_steps: int) -> Overhead:
    """Overhead of the training steps in `rows` (metrics.jsonl) after the first `warmup_steps`."""
    steps = [row for row in rows if int(row["step"]) > warmup_steps and "timing/step_s" in row]
    if not steps:
        have = sorted({k for row in rows for k in row if k.startswith("timing/")})
        raise ValueError(
            f"no training step after --warmup-steps={warmup_steps} has timing/step_s (timing "
            f"keys present: {have}); run more steps (--steps) or a newer adarl"
        )
    missing = [k for k in WORK if f"timing/{k}_s" not in steps[0]]
    if missing:
        raise ValueError(
            f"the metrics lack {[f'timing/{k}_s' for k in missing]}: this run predates the "
            "per-stage rollout timings; rerun it with the current adarl"
        )
    seconds = {
        name: sum(float(row.get(f"timing/{name}_s", 0.0)) for row in steps)
        for name in ("step", *WORK, "allocator", "allocator_compute", "dispatch", "batch", "data")
    }
    # The driver times each allocator call from outside; the allocator times its own work.
    seconds["allocator_transport"] = seconds.pop("allocator") - seconds["allocator_compute"]
    seconds["rest"] = seconds["step"] - sum(seconds[k] for k in (*WORK, *OVERHEAD_PARTS))
    per_step = []
    for row in steps:
        step_s = float(row["timing/step_s"])
        work = sum(float(row.get(f"timing/{k}_s", 0.0)) for k in WORK)
        per_step.append((step_s - work) / step_s if step_s > 0 else 0.0)
    return Overhead(
        steps=len(steps),
        seconds=seconds,
        per_step_share=per_step,
        rollouts_per_step=statistics.mean(float(r.get("sampling/rollouts", 0.0)) for r in steps),
        requests_per_step=statistics.mean(float(r.get("sampling/requests", 0.0)) for r in steps),
        allocator_calls_per_step=statistics.mean(
            float(r.get("perf/allocator_calls", 0.0)) for r in steps
        ),
    )


def overhead_table(overhead: Overhead) -> str:
    total = overhead.seconds["step"]
    lines = ["| part | s per step | share of step time |", "|---|---|---|"]
    for name in (*WORK, *OVERHEAD_PARTS, "rest"):
        value = overhead.seconds[name]
        lines.append(
            f"| {LABELS[name]} | {value / overhead.steps:.4f} | {100 * value / total:.2f}% |"
        )
    lines.append(f"| **step** | {total / overhead.steps:.4f} | 100% |")
    return "\n".join(lines) + "\n"


def docs_section(overhead: Overhead, *, command: str, run_detail: str) -> str:
    share = overhead.share
    verdict = "met" if share <= TARGET_SHARE else "not met"
    per_step = overhead.per_step_share
    largest = max((*OVERHEAD_PARTS, "rest"), key=lambda name: overhead.seconds[name])
    intro = paragraph(
        f"`{command}` ({run_detail}). Each training step's wall time `timing/step_s` (the "
        "driver's whole step; evaluation, logging and checkpoints are outside it) is split into "
        "the work (generation = the driver blocked waiting for engines, reward, learner, weight "
        "sync) and the orchestration overhead (everything else: allocator calls, building and "
        "submitting requests, the train batch, prompt draws, the driver's loop):"
    )
    result = paragraph(
        f"**Overhead share: {100 * share:.2f}%** (target ≤ {100 * TARGET_SHARE:.0f}%: "
        f"{verdict}); per step: median {100 * statistics.median(per_step):.2f}%, max "
        f"{100 * max(per_step):.2f}%. The largest part outside the work is "
        f"{LABELS[largest]}: {100 * overhead.seconds[largest] / overhead.seconds['step']:.2f}% "
        f"of step time, {overhead.seconds[largest] / overhead.steps:.4f} s per step, for steps "
        f"of {overhead.rollouts_per_step:.0f} rollouts in {overhead.requests_per_step:.0f} "
        f"engine requests and {overhead.allocator_calls_per_step:.0f} allocator calls."
    )
    return f"""{SECTION_TITLE}

{intro}

    overhead share = Σ (step_s − rollout_wait_s − reward_s − train_s − weight_sync_s) / Σ step_s

over {overhead.steps} steps after the warm-up.

{overhead_table(overhead)}
{result}
"""


PLACEMENT_OVERRIDE = "cluster.allocator_in_driver=true"


def placement_paragraph(placement: str, overhead: Overhead, detail: str) -> str:
    """The same measurement with the allocator placed otherwise, for comparison."""
    where = (
        f"in the driver process (`{PLACEMENT_OVERRIDE}`, no actor round trips"
        if placement == "driver"
        else "as its own Ray actor (the default"
    )
    parts = ", ".join(
        f"{LABELS[name]} {100 * overhead.seconds[name] / overhead.seconds['step']:.2f}%"
        for name in (*OVERHEAD_PARTS, "rest")
    )
    return "\n" + paragraph(
        f"With the allocator {where}; {detail}): **overhead share "
        f"{100 * overhead.share:.2f}%** ({parts}), steps of "
        f"{overhead.seconds['step'] / overhead.steps:.4f} s."
    )


def _run_embedded_default(args: argparse.Namespace, *, in_driver: bool) -> tuple[Path, str]:
    """Run (or reuse) the embedded default for `args.steps` steps; its dir and a description."""
    suffix = "_allocator_in_driver" if in_driver else ""
    run_dir = args.results_dir / f"steps{args.steps}{suffix}"
    overrides = [
        "+experiment=ada_seq_balance",
        f"trainer.total_steps={args.steps}",
        "eval.every_steps=0",
        *([PLACEMENT_OVERRIDE] if in_driver else []),
        "checkpoint.resume=auto",
        "logger.progress_bar=false",
        f"hydra.run.dir={run_dir.resolve()}",
    ]
    load_file = run_dir / LOAD_FILE
    if prepare_run_dir(run_dir, overrides) is not RunState.DONE:
        # Other processes on the cores slow the allocator's round trips: record the load.
        loads: list[float] = []
        code = run_subprocess(
            launch_command(overrides),
            log_path=run_dir / CONSOLE_LOG,
            env=launch_env(),
            on_poll=lambda: loads.append(os.getloadavg()[0]),
        )
        if code != 0:
            raise SystemExit(
                f"the embedded-default run failed (exit code {code}); see {run_dir / CONSOLE_LOG}"
            )
        if loads:
            load_file.write_text(json.dumps({"mean_load_1min": statistics.mean(loads)}))
    shown = overrides[: 4 if in_driver else 3]
    detail = (
        f"the embedded default, {args.steps} steps, steps 1-{args.warmup_steps} not "
        f"measured: `{shlex.join(['python', '-m', 'adarl.launch', *shown])}`; "
        f"{os.cpu_count()} CPU cores"
    )
    if load_file.exists():
        load = json.loads(load_file.read_text())["mean_load_1min"]
        detail += f", mean 1-minute load average {load:.1f} during the run"
    return run_dir, detail


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m adarl.bench overhead", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--steps", type=int, default=50, help="training steps to run")
    parser.add_argument("--warmup-steps", type=int, default=2, help="first steps not measured")
    parser.add_argument(
        "--run-dir",
        type=Path,
        default=None,
        help="measure this existing run instead of running one (any adarl run directory)",
    )
    parser.add_argument(
        "--results-dir",
        type=Path,
        default=Path("runs") / "bench_overhead",
        help="where the run lives (reused if it finished with the same settings)",
    )
    parser.add_argument(
        "--write-docs",
        type=Path,
        default=None,
        help=f"replace the Overhead section (e.g. {DOCS_PATH})",
    )
    parser.add_argument(
        "--placements",
        nargs="+",
        choices=("actor", "driver"),
        default=["actor", "driver"],
        help="where the allocator runs, measured in this order (the first is the headline): "
        "its own Ray actor (the default), or the driver process (cluster.allocator_in_driver)",
    )
    args = parser.parse_args(argv)
    if args.steps <= args.warmup_steps:
        parser.error(f"--steps={args.steps} must exceed --warmup-steps={args.warmup_steps}")

    from adarl.logging import read_metrics_jsonl

    command = (
        f"python -m adarl.bench overhead --steps {args.steps} --warmup-steps {args.warmup_steps}"
    )
    if args.run_dir is not None:
        run_dir = args.run_dir
        command = (
            f"python -m adarl.bench overhead --run-dir {run_dir} --warmup-steps {args.warmup_steps}"
        )
        detail = f"an existing run, {run_dir}"
    else:
        measured: dict[str, tuple[Overhead, str]] = {}
        for placement in args.placements:
            run_dir, detail = _run_embedded_default(args, in_driver=placement == "driver")
            overhead = measure_overhead(
                read_metrics_jsonl(run_dir / "metrics.jsonl"), warmup_steps=args.warmup_steps
            )
            measured[placement] = (overhead, detail)
            print(f"allocator placement: {placement}")
            print(overhead_table(overhead))
            print(
                f"overhead share: {100 * overhead.share:.2f}% (target <= {100 * TARGET_SHARE:.0f}%)"
            )
        if args.write_docs is not None:
            first = args.placements[0]
            section = docs_section(
                measured[first][0], command=command, run_detail=measured[first][1]
            )
            for placement in args.placements[1:]:
                section += placement_paragraph(placement, *measured[placement])
            write_section(args.write_docs, SECTION_TITLE, section)
            print(f"wrote the Overhead section of {args.write_docs}")
        return 0
    overhead = measure_overhead(
        read_metrics_jsonl(run_dir / "metrics.jsonl"), warmup_steps=args.warmup_steps
    )
    print(overhead_table(overhead))
    print(f"overhead share: {100 * overhead.share:.2f}% (target <= {100 * TARGET_SHARE:.0f}%)")
    if args.write_docs is not None:
        write_section(
            args.write_docs,
            SECTION_TITLE,
            docs_section(overhead, command=command, run_detail=detail),
        )
        print(f"wrote the Overhead section of {args.write_docs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
