"""`python -m adarl.bench <name> [options]`: run one of the benchmarks shipped with adarl.

Each benchmark is a module of this package with `main(argv: Sequence[str] | None) -> int`;
adding one is a module plus one line in `BENCHMARKS`. `python -m adarl.bench <name> --help`
lists its options.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

BENCHMARKS: dict[str, str] = {
    "rollout": "adarl.bench.rollout",  # engine samples/s and tokens/s, base-policy pass rates
    "learner": "adarl.bench.learner",  # learner steps per ZeRO stage, weight-sync cost
    "memory": "adarl.bench.memory",  # learner peak memory at long lengths, full vs chunked logits
    "sampler": "adarl.bench.sampler_cli",  # streaming sequential sampling vs rounds vs uniform
    "objective": "adarl.bench.bandit",  # exact bandits: does a config optimise what it declares
    "learning": "adarl.bench.learning",  # accuracy per rollout / token / second, arms × seeds
    "regime": "adarl.bench.regime",  # a task's pass-rate spectrum, one-sided groups, lengths
    "overhead": "adarl.bench.overhead",  # share of step time outside the real work
    "soak": "adarl.bench.soak",  # RSS of every process of a long run: memory stays flat
    "dro": "adarl.bench.dro",  # R3 vs the exact verifier, the variance filter, scoring cost
    "scaling": "adarl.bench.scaling",  # ZeRO-3 loading and weight-broadcast host memory
    "hints": "adarl.bench.hints",  # self-hint parse/leak rates, pass-rate lift per hint level
    "async": "adarl.bench.pipeline",  # sync vs sampling ahead while learners train: speed, learning
    "gpu": "adarl.bench.gpu",  # one GPU: HF engine, DeepSpeed ZeRO-2/3, weight push, embedded run
}


def _usage() -> str:
    names = "\n".join(f"  {name:10s} {module}" for name, module in BENCHMARKS.items())
    return f"usage: python -m adarl.bench <name> [options]\n\nbenchmarks:\n{names}\n"


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(_usage(), end="")
        return 0 if args else 2
    name, rest = args[0], args[1:]
    if name not in BENCHMARKS:
        print(f"unknown benchmark {name!r}\n\n{_usage()}", end="", file=sys.stderr)
        return 2
    module = importlib.import_module(BENCHMARKS[name])
    return int(module.main(rest) or 0)


if __name__ == "__main__":
    sys.exit(main())
