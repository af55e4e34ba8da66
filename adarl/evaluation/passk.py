"""pass@k, coverage and the guesser's pass@k: the pure arithmetic of held-out evaluation.

Unbiased pass@k from n ≥ k samples with c correct (Chen et al. 2021, arXiv 2107.03374, eq. 1):

    pass@k = 1 − C(n − c, k) / C(n, k)

in its numerically stable product form (openai/human-eval `evaluation.py`): 1 if n − c < k, else
1 − Π_{i = n−c+1..n} (1 − k/i). Averaged over prompts it estimates E_x[1 − (1 − p(x))^k] without
bias. Coverage is the share of prompts with at least one correct sample, i.e. pass@n.

The guesser (`guess_hit_rates`, in adarl/tasks/baselines.py beside the best constant answer): a
policy that answers a prompt by drawing, with replacement, one of the training split's reference
answers of the prompt's difficulty level. Its hit probability on a held-out prompt is the share of
those answers equal to the prompt's own, g; its pass@k is exactly 1 − (1 − g)^k. On short answers
(a digit, a small integer) many samples hit by chance, so a diffuse policy can look like one that
covers: held-out coverage counts only above the guesser's.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from adarl.tasks.baselines import guess_hit_rates

__all__ = [
    "guess_hit_rates",
    "guess_pass_at_k",
    "paired_pass_at_1_rise",
    "pass_at_k",
    "pass_at_k_ks",
]


def pass_at_k(
    num_samples: int | np.ndarray,  # [P] or scalar n: samples drawn per prompt
    num_correct: int | np.ndarray,  # [P] or scalar c: correct samples per prompt, 0 ≤ c ≤ n
    k: int,
) -> np.ndarray:  # [P] float64 (0-d for scalars): the unbiased pass@k per prompt
    """1 − C(n − c, k)/C(n, k) per prompt, stable form (module docstring). Needs 1 ≤ k ≤ n."""
    n = np.asarray(num_samples, dtype=np.int64)
    c = np.asarray(num_correct, dtype=np.int64)
    n, c = np.broadcast_arrays(n, c)
    if k < 1:
        raise ValueError(f"pass@k needs k >= 1 (got k={k})")
    if np.any(c < 0) or np.any(c > n):
        raise ValueError("pass@k needs 0 <= num_correct <= num_samples for every prompt")
    if np.any(n < k):
        raise ValueError(
            f"pass@{k} needs at least {k} samples per prompt (got {int(n.min())}): raise the "
            "evaluation's samples per prompt or ask for a smaller k"
        )
    out = np.ones(n.shape, dtype=np.float64)
    for index in np.ndindex(n.shape):
        total, correct = int(n[index]), int(c[index])
        if total - correct >= k:
            i = np.arange(total - correct + 1, total + 1, dtype=np.float64)
            out[index] = 1.0 - float(np.prod(1.0 - k / i))
    return out


def pass_at_k_ks(num_samples: int) -> tuple[int, ...]:
    """The k reported for n samples per prompt: 1, 2, 4, … up to n, and n itself."""
    if num_samples < 1:
        raise ValueError(f"an evaluation draws at least one sample per prompt (got {num_samples})")
    ks = [1]
    while ks[-1] * 2 <= num_samples:
        ks.append(ks[-1] * 2)
    if ks[-1] != num_samples:
        ks.append(num_samples)
    return tuple(ks)


def guess_pass_at_k(
    hit_rates: Sequence[float] | np.ndarray,  # [P] the guesser's hit probability g per prompt
    k: int,
) -> np.ndarray:  # [P] float64: 1 − (1 − g)^k, exact (draws with replacement are i.i.d.)
    g = np.asarray(hit_rates, dtype=np.float64)
    if k < 1:
        raise ValueError(f"pass@k needs k >= 1 (got k={k})")
    return 1.0 - (1.0 - g) ** k


def paired_pass_at_1_rise(
    *,
    base_correct: Sequence[int],  # [P] correct samples per prompt, before training
    final_correct: Sequence[int],  # [P] the same prompts after, drawn with the same seeds
    num_samples: int,  # n: samples per prompt in both
) -> tuple[float, float]:  # (mean rise of pass@1, its standard error)
    """Rise of held-out pass@1 and its paired standard error.

    d_i = (c_i^final − c_i^base) / n per prompt; rise = mean(d), SE = std(d, ddof=1)/√P. Paired:
    both evaluations sample the same prompts, so each prompt's difficulty cancels in d_i and the
    SE is that of the change, not of two independent means (the rise is significant when it is
    several SE; issue 31 asks for 3).
    """
    base = np.asarray(base_correct, dtype=np.float64)
    final = np.asarray(final_correct, dtype=np.float64)
    if base.shape != final.shape or base.ndim != 1 or base.size < 2:
        raise ValueError(
            f"a paired rise needs the same prompts (at least 2) in both evaluations, got "
            f"{base.shape} and {final.shape}"
        )
    if num_samples < 1:
        raise ValueError(f"num_samples must be >= 1, got {num_samples}")
    rises = (final - base) / num_samples
    return float(rises.mean()), float(rises.std(ddof=1) / np.sqrt(rises.size))
