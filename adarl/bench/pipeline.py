"""`python -m adarl.bench async`: the synchronous loop against sampling ahead while the learners
train (`rollout.max_off_policy_steps` = k), at equal rollouts, over seeds.

Each arm is a `bench learning` arm (adarl/bench/learning.py `ARMS`: `<method>` is k = 0,
`<method>_k1` / `<method>_k2` add the lag and decoupled PPO's correction), run one after the other
through the real launch command by `run_comparison`, so the ratios below are measured side by
side in one invocation on one machine. Reported per arm, from each run's metrics.jsonl:

    steps/s     training steps / Σ timing/step_s (the driver's step: sampling, training,
                weight sync; evaluation and checkpoints excluded)
    rollouts/s  training rollouts / Σ timing/step_s
    hidden      the learners' compute (forward-backward + optimizer) not waited for by the
                driver: 1 - Σ timing/train_s / Σ (learner forward-backward + optimizer); > 0
                only when engines and learners really ran at the same time
    final accuracy and the curve by rollouts (the learning per rollout), mean ± spread over seeds

Writes the "## Async" section of docs/benchmarks.md, docs/data/async.json and
docs/figures/async.png; `--report-only` redraws them from the JSON.
"""

from __future__ import annotations

import argparse
import os
import shlex
from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path

from adarl.bench.docs_section import paragraph, write_section
from adarl.bench.learning import REDUCED, Setting, load_run, run_comparison
from adarl.bench.learning_records import (
    ReportData,
    RunRecord,
    mean_and_spread,
    runs_by_arm,
    seed_band,
)

SECTION_TITLE = "## Async"
DOCS_PATH = Path("docs") / "benchmarks.md"
DATA_PATH = Path("docs") / "data" / "async.json"
FIGURE_PATH = Path("docs") / "figures" / "async.png"
METHODS = ("ada_seq_balance", "grpo_n4")
# (k, cross-step allocation): synchronous, each step's phase sampled ahead whole, and the
# phases streamed into each other (`rollout.cross_step_allocation`).
VARIANTS = ((0, False), (1, False), (2, False), (1, True), (2, True))


def arm_label(method: str, lag: int, cross: bool = False) -> str:
    return method if lag == 0 else f"{method}_k{lag}{'x' if cross else ''}"


def variant_label(lag: int, cross: bool) -> str:
    return f"{lag}, cross-step" if cross else str(lag)


def setting(*, seeds: int, max_rollouts: int, eval_every_rollouts: int) -> Setting:
    return replace(
        REDUCED,
        name="async",
        arms=tuple(arm_label(method, *variant) for method in METHODS for variant in VARIANTS),
        seeds=seeds,
        max_rollouts=max_rollouts,
        eval_every_rollouts=eval_every_rollouts,
        # Each method is compared with itself at (nearly) equal steps, so its own warm-up
        # favours no arm; without one, the first full-rate updates on samples one version
        # behind undo Seq-Balance's start (docs/benchmarks.md "Async").
        lr_warmup_steps=None,
        why=(
            "The embedded default (Seq-Balance) and GRPO n = 4, each synchronous (k = 0) and "
            "sampling 1 or 2 steps ahead while the learners train (k = 1, 2: the ratio taken "
            "against the learner's policy, each token re-weighted by min(π/μ, 2)), each step's "
            "phase sampled whole or, cross-step, the phases streamed into each other (step t+1 "
            "opens while step t samples and keeps sampling while t trains). Every arm "
            "runs the same rollout budget from the same base model, one run at a time, with its "
            "experiment's own learning-rate warm-up (20 steps for both): a method is compared "
            "with itself at equal steps, so the schedule favours no arm."
        ),
    )


def throughput(run: RunRecord) -> dict[str, float]:
    step_s = run.timing_s.get("step", 0.0)
    learner_s = run.timing_s.get("learner_forward_backward", 0.0) + run.timing_s.get(
        "learner_optimizer", 0.0
    )
    waited = run.timing_s.get("train", 0.0)
    return {
        "steps_per_s": run.steps / step_s if step_s else float("nan"),
        "rollouts_per_s": run.rollouts / step_s if step_s else float("nan"),
        "hidden_learner_share": max(0.0, 1.0 - waited / learner_s) if learner_s else 0.0,
        "rollout_ahead_share": run.timing_s.get("rollout_ahead", 0.0) / step_s if step_s else 0.0,
    }


def _pm(values: Sequence[float], digits: int = 2, scale: float = 1.0, unit: str = "") -> str:
    mean, spread = mean_and_spread([v * scale for v in values])
    return f"{mean:.{digits}f} ± {spread:.{digits}f}{unit}"


def tables(records: Sequence[RunRecord]) -> str:
    by_arm = runs_by_arm(records)
    lines = [
        "| arm | k | steps/s | × sync | rollouts/s | × sync | learner compute hidden | "
        "final accuracy | steps |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for method in METHODS:
        sync = {r.seed: throughput(r) for r in by_arm.get(arm_label(method, 0), [])}
        for lag, cross in VARIANTS:
            runs = by_arm.get(arm_label(method, lag, cross), [])
            if not runs:
                continue
            rates = [throughput(r) for r in runs]
            step_ratio = [
                t["steps_per_s"] / sync[r.seed]["steps_per_s"]
                for r, t in zip(runs, rates, strict=True)
                if r.seed in sync
            ]
            rollout_ratio = [
                t["rollouts_per_s"] / sync[r.seed]["rollouts_per_s"]
                for r, t in zip(runs, rates, strict=True)
                if r.seed in sync
            ]
            lines.append(
                f"| {method} | {variant_label(lag, cross)} | "
                f"{_pm([t['steps_per_s'] for t in rates])} | "
                f"{_pm(step_ratio)} | {_pm([t['rollouts_per_s'] for t in rates], 0)} | "
                f"{_pm(rollout_ratio)} | "
                f"{_pm([t['hidden_learner_share'] for t in rates], 0, 100, '%')} | "
                f"{_pm([r.evals[-1].accuracy for r in runs], 1, 100, '%')} | "
                f"{_pm([float(r.steps) for r in runs], 0)} |"
            )
    return "\n".join(lines) + "\n"


def plot(records: Sequence[RunRecord], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_arm = runs_by_arm(records)
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    labels, means, spreads = [], [], []
    for method in METHODS:
        for lag, cross in VARIANTS:
            runs = by_arm.get(arm_label(method, lag, cross), [])
            if runs:
                mean, spread = mean_and_spread(throughput(r)["steps_per_s"] for r in runs)
                labels.append(f"{method}\nk={lag}{'x' if cross else ''}")
                means.append(mean)
                spreads.append(spread)
    left.bar(range(len(labels)), means, yerr=spreads, color="tab:blue", alpha=0.8)
    left.set_xticks(range(len(labels)), labels, fontsize=7)
    left.set_ylabel("training steps per second")
    left.set_title("throughput (mean ± spread over seeds)")
    for method, style in zip(METHODS, ("-", "--"), strict=True):
        colours = ("black", "tab:orange", "tab:green", "tab:red", "tab:purple")
        for (lag, cross), colour in zip(VARIANTS, colours, strict=True):
            runs = by_arm.get(arm_label(method, lag, cross), [])
            if not runs:
                continue
            band = seed_band(
                [([e.rollouts for e in r.evals], [e.accuracy for e in r.evals]) for r in runs], 50
            )
            label = f"{method} k={variant_label(lag, cross)}"
            right.plot(band.grid, band.mean, style, color=colour, label=label)
            right.fill_between(
                band.grid, band.mean - band.spread, band.mean + band.spread, color=colour, alpha=0.1
            )
    right.set_xlabel("training rollouts")
    right.set_ylabel("held-out accuracy (T = 1)")
    right.set_title("learning per rollout")
    right.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def docs_section(data: ReportData, figure: Path, docs_path: Path) -> str:
    seeds = sorted({r.seed for r in data.runs})
    link = os.path.relpath(figure, docs_path.parent)
    intro = paragraph(
        f"`{data.command}`: {', '.join(data.setting['arms'])}; seeds "
        f"{', '.join(map(str, seeds))}; {data.setting['max_rollouts']:,} training rollouts per "
        "run. " + data.setting["why"] + " Steps/s and rollouts/s are over the driver's step "
        "(sampling, training, weight sync; evaluation and checkpoints apart); × sync is the "
        "ratio to the same method's k = 0 run of the same seed. Learner compute hidden: the share "
        "of the learners' forward-backward and optimizer time the driver did not wait for (it "
        "ran while the engines sampled the next step)."
    )
    return f"""{SECTION_TITLE}

{intro}

{tables(data.runs)}
![throughput and learning per rollout]({link})
"""


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m adarl.bench async", description=__doc__)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--max-rollouts", type=int, default=20_000)
    parser.add_argument("--eval-every-rollouts", type=int, default=5_000)
    parser.add_argument("--results-dir", type=Path, default=Path("runs") / "bench_async")
    parser.add_argument("--data", type=Path, default=DATA_PATH)
    parser.add_argument("--docs", type=Path, default=DOCS_PATH)
    parser.add_argument("--figure", type=Path, default=FIGURE_PATH)
    parser.add_argument("--report-only", action="store_true")
    args = parser.parse_args(argv)
    if args.report_only:
        data = ReportData.load(args.data)
    else:
        chosen = setting(
            seeds=args.seeds,
            max_rollouts=args.max_rollouts,
            eval_every_rollouts=args.eval_every_rollouts,
        )
        chosen.validate()
        plan = run_comparison(chosen, results_dir=args.results_dir)
        data = ReportData(
            setting=asdict(chosen),
            command="python -m adarl.bench async "
            + shlex.join(
                [
                    f"--seeds={args.seeds}",
                    f"--max-rollouts={args.max_rollouts}",
                    f"--eval-every-rollouts={args.eval_every_rollouts}",
                ]
            ),
            runs=[
                load_run(run_dir, arm=arm.label, experiment=arm.experiment, seed=seed)
                for arm, seed, run_dir in plan
            ],
        )
        data.save(args.data)
    plot(data.runs, args.figure)
    write_section(args.docs, SECTION_TITLE, docs_section(data, args.figure, args.docs))
    print(tables(data.runs))
    return 0
