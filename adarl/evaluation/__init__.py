"""Held-out evaluation, part of the core: training runs it (adarl/session.py) and
`python -m adarl.evaluate` runs it on any model, run or checkpoint.

`Evaluator` samples the held-out prompts and returns an `EvalResult`: pass@k for k = 1, 2, 4, …
up to the samples drawn, coverage, and the guesser's pass@k, overall and by difficulty level
(adarl/evaluation/passk.py holds the arithmetic).
"""

from adarl.evaluation.evaluator import (
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

__all__ = [
    "EvalResult",
    "Evaluator",
    "difficulty_label",
    "eval_reward_metrics",
    "guess_hit_rates",
    "guess_pass_at_k",
    "paired_pass_at_1_rise",
    "pass_at_k",
    "pass_at_k_ks",
]
