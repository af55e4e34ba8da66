"""Held-out evaluation, part of the core: training runs it (adarl/session.py) and
`python -m adarl.evaluate` runs it on any model, run or checkpoint; both build their `Evaluator`
with `build_evaluator` (adarl/evaluation/build.py).

`Evaluator` samples the held-out prompts and returns an `EvalResult`: pass@k for k = 1, 2, 4, …
up to the samples drawn, coverage, and the guesser's pass@k, overall and by difficulty level
(adarl/evaluation/passk.py holds the arithmetic). `EvalKind` says which evaluation of a run it is
(base, periodic, final).
"""

from adarl.evaluation.build import build_evaluator, level_names
from adarl.evaluation.evaluator import (
    EvalKind,
    EvalResult,
    Evaluator,
    difficulty_label,
    eval_reward_metrics,
)
from adarl.evaluation.passk import (
    guess_hit_rates,
    guess_pass_at_k,
    paired_pass_at_1_rise,
    pass_at_k,
    pass_at_k_ks,
)
from adarl.evaluation.table import format_table

__all__ = [
    "EvalKind",
    "EvalResult",
    "Evaluator",
    "build_evaluator",
    "difficulty_label",
    "eval_reward_metrics",
    "format_table",
    "guess_hit_rates",
    "guess_pass_at_k",
    "level_names",
    "paired_pass_at_1_rise",
    "pass_at_k",
    "pass_at_k_ks",
]
