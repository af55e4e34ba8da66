"""`python -m adarl.bench sampler`: what streaming sequential sampling costs in rollouts and time.

The command: its options, the runs (adarl/bench/sampler.py) on the simulated world
(adarl/bench/sampler_world.py) and, optionally, a real engine, then the tables and the `## Sampler`
section of docs/benchmarks.md (adarl/bench/sampler_report.py).
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from pathlib import Path

from adarl.bench.docs_section import write_section
from adarl.bench.sampler import (
    Comparison,
    overlap_comparison,
    real_comparisons,
    simulated_comparison,
)
from adarl.bench.sampler_report import (
    SECTION_TITLE,
    docs_section,
    overlap_reading,
    overlap_table,
    pareto_table,
    per_bin_table,
    results_table,
    sweep_table,
    targets_line,
)
from adarl.config.allocator import SequentialConfig
from adarl.rollout.simulated import LatencyModel


def argument_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m adarl.bench sampler", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--prompts", type=int, default=256, help="prompts per step")
    parser.add_argument("--steps", type=int, default=4, help="steps (batches) to average over")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--engines", type=int, default=LatencyModel.engines)
    parser.add_argument("--slots", type=int, default=LatencyModel.slots, help="per engine")
    parser.add_argument(
        "--overshoot",
        type=float,
        default=SequentialConfig.max_overshoot_fraction,
        help="max_overshoot_fraction of the main comparison",
    )
    parser.add_argument(
        "--front",
        type=float,
        nargs="*",
        default=[0.0, 0.02, 0.05, 0.1, 0.2, math.inf],
        help="max_overshoot_fraction values of the Pareto front (none to skip)",
    )
    parser.add_argument(
        "--sweep-engines",
        type=int,
        nargs="*",
        default=[2, 8, 16],
        help="also run with these engine counts (the hardware sweep); none to skip",
    )
    parser.add_argument(
        "--real-engine",
        choices=("none", "vllm", "hf"),
        default="none",
        help="also measure on a real engine with the built-in tiny model",
    )
    parser.add_argument("--real-prompts", type=int, default=64, help="prompts per real step")
    parser.add_argument("--real-steps", type=int, default=2, help="real steps per sampler")
    parser.add_argument(
        "--overlap-steps",
        type=int,
        default=12,
        help="consecutive steps of the cross-step comparison (0 to skip)",
    )
    parser.add_argument(
        "--write-docs", type=Path, default=None, help="replace the Sampler section of this file"
    )
    return parser


def reproduce_command(args: argparse.Namespace) -> str:
    """The command line the docs section states (every option that changes a number)."""
    command = (
        f"python -m adarl.bench sampler --prompts {args.prompts} --steps {args.steps} "
        f"--seed {args.seed} --engines {args.engines} --slots {args.slots} --front "
        + " ".join(f"{e:g}" for e in args.front)
        + " --sweep-engines "
        + " ".join(str(e) for e in args.sweep_engines)
        + f" --overlap-steps {args.overlap_steps}"
    )
    if args.real_engine != "none":
        command += (
            f" --real-engine {args.real_engine} --real-prompts {args.real_prompts} "
            f"--real-steps {args.real_steps}"
        )
    return command


def main(argv: Sequence[str] | None = None) -> int:
    args = argument_parser().parse_args(argv)
    latency = LatencyModel(engines=args.engines, slots=args.slots)

    def simulate(engines: int, eps: float) -> Comparison:
        return simulated_comparison(
            prompts=args.prompts,
            steps=args.steps,
            seed=args.seed,
            latency=LatencyModel(engines=engines, slots=args.slots),
            overshoot=eps,
        )

    main_run = simulate(args.engines, args.overshoot)
    print(results_table(main_run))
    print(per_bin_table(main_run))
    print(targets_line(main_run))
    front = [
        (e, main_run if e == args.overshoot else simulate(args.engines, e)) for e in args.front
    ]
    if front:
        print(pareto_table(front))
    sweep = [
        main_run if e == args.engines else simulate(e, args.overshoot) for e in args.sweep_engines
    ]
    if sweep:
        print(sweep_table(sweep))
    overlap = None
    if args.overlap_steps:
        overlap = overlap_comparison(
            prompts=args.prompts,
            steps=args.overlap_steps,
            seed=args.seed,
            latency=latency,
            overshoot=args.overshoot,
        )
        print(overlap_table(overlap))
        print(overlap_reading(overlap))
    real_front: list[tuple[float, Comparison]] = []
    if args.real_engine != "none":
        real_front = real_comparisons(
            prompts=args.real_prompts,
            steps=args.real_steps,
            seed=args.seed,
            engine=args.real_engine,
            overshoots=args.front or [args.overshoot],
        )
        print(pareto_table(real_front))
    if args.write_docs is not None:
        section = docs_section(
            main_run,
            sweep,
            front,
            real_front,
            command=reproduce_command(args),
            latency=latency,
            overlap=overlap,
        )
        write_section(args.write_docs, SECTION_TITLE, section)
        print(f"wrote the Sampler section of {args.write_docs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
