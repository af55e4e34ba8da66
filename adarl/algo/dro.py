"""DRO: the reasoning-reflective reward R3 and the cross-rollout deviation filter (pure numpy).

Source: Direct Reasoning Optimization (arXiv 2506.13351; no public code; shared/MATH.md §"DRO
variance filter", seed 003). For one prompt x with reference answer y* = (y_1, ..., y_L) and N
rollouts, rollout i's reasoning c_i conditions the reference:

    ℓ_ij = log π(y_j | x, c_i, y_<j)                          (the scoring pass, [N, L])
    s_ij = exp(ℓ_ij)  ("prob" certainty)   or   ℓ_ij  ("logprob")
    σ_j  = sqrt((1/N) Σ_i (s_ij - s̄_j)²)                      (cross-rollout deviation, [L])
    w_j  = shape(σ)_j, Σ_j w_j = 1, increasing in σ_j          (token weights)
    R3_i = Σ_j w_j (s_ij - b_j)                                (the dense reward, [N])

with b_j = 0, or the masked-reasoning baseline b_j = s(log π(y_j | x, masked, y_<j)). A token
whose certainty does not move with the reasoning (σ_j ≈ 0) is not "reasoning-reflective" and
gets little weight. Within a prompt the baseline shifts every rollout's R3 by the same
Σ_j w_j b_j: group-normalised advantages (GRPO) are unchanged by it; it matters where rewards
are compared across prompts.

The same deviation filters prompts: max_j σ_j ranks how much a prompt's rollouts disagree about
the reference (`lowest_fraction`), and a prompt where no rollout brings the reference within the
top k (`reaches_top_k`) is too hard to learn from.

Everything here takes flat keyword arguments and numpy arrays; shapes are in the docstrings.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

CERTAINTIES = ("prob", "logprob")
WEIGHT_SHAPES = ("power", "softmax", "uniform")
# Log-probs below this are clipped: an engine may report -inf for a token it rules out (the fake
# engine does), which would make σ NaN; exp(-50) ≈ 2e-22 is zero for every other purpose.
LOGPROB_FLOOR = -50.0


def token_certainty(logprobs: np.ndarray, *, certainty: str) -> np.ndarray:
    """s = exp(ℓ) ("prob") or ℓ ("logprob"), ℓ clipped below at `LOGPROB_FLOOR`. Any shape."""
    if certainty not in CERTAINTIES:
        raise ValueError(f"certainty must be one of {CERTAINTIES}, got {certainty!r}")
    clipped = np.maximum(np.asarray(logprobs, dtype=np.float64), LOGPROB_FLOOR)
    return np.exp(clipped) if certainty == "prob" else clipped


def token_deviation(certainty: np.ndarray) -> np.ndarray:
    """σ_j = sqrt((1/N) Σ_i (s_ij - s̄_j)²): the population standard deviation across rollouts.

    certainty: [N, L] (rollouts × reference tokens) → [L]; zeros when N = 1.
    """
    certainty = np.asarray(certainty, dtype=np.float64)
    if certainty.ndim != 2:
        raise ValueError(f"certainty must be [N, L], got shape {certainty.shape}")
    if certainty.shape[0] == 0:
        raise ValueError("token_deviation needs at least one rollout (N >= 1)")
    return certainty.std(axis=0)


def token_weights(
    deviation: np.ndarray, *, shape: str, power: float = 1.0, temperature: float = 1.0
) -> np.ndarray:
    """Token weights w [L] from deviations σ [L], summing to 1 and non-decreasing in σ:

        power:    w_j = σ_j^γ / Σ_k σ_k^γ          (γ = `power` > 0; γ = 1 is linear in σ)
        softmax:  w_j = exp(σ_j/τ) / Σ_k exp(σ_k/τ)  (τ = `temperature` > 0)
        uniform:  w_j = 1/L                         (the plain average: no token selection)

    `power` with every σ_j = 0 (no token moves with the reasoning) falls back to uniform.
    """
    deviation = np.asarray(deviation, dtype=np.float64)
    if deviation.ndim != 1 or deviation.size == 0:
        raise ValueError(f"deviation must be a non-empty [L] array, got shape {deviation.shape}")
    if np.any(deviation < 0) or not np.all(np.isfinite(deviation)):
        raise ValueError(f"deviations must be finite and >= 0, got {deviation.tolist()}")
    uniform = np.full(deviation.size, 1.0 / deviation.size)
    if shape == "uniform":
        return uniform
    if shape == "power":
        if not power > 0:
            raise ValueError(f"power must be > 0, got {power}")
        raised = deviation**power
        total = raised.sum()
        return raised / total if total > 0 else uniform
    if shape == "softmax":
        if not temperature > 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        z = np.exp((deviation - deviation.max()) / temperature)
        return z / z.sum()
    raise ValueError(f"shape must be one of {WEIGHT_SHAPES}, got {shape!r}")


def reflection_reward(
    certainty: np.ndarray, *, weights: np.ndarray, baseline: np.ndarray | None = None
) -> np.ndarray:
    """R3_i = Σ_j w_j (s_ij - b_j). certainty [N, L], weights [L], baseline [L] or None → [N]."""
    certainty = np.asarray(certainty, dtype=np.float64)
    weights = np.asarray(weights, dtype=np.float64)
    if certainty.ndim != 2 or weights.shape != (certainty.shape[1],):
        raise ValueError(
            f"certainty [N, L] and weights [L] disagree: {certainty.shape} vs {weights.shape}"
        )
    contrast = certainty if baseline is None else certainty - np.asarray(baseline)[None, :]
    return contrast @ weights


def reaches_top_k(logprobs: np.ndarray, *, k: int) -> np.ndarray:
    """Per rollout, whether every reference token is certified to rank within the top k.

    logprobs [N, L] → bool [N]: min_j ℓ_ij ≥ -log(k + 1). A token of probability p ≥ 1/(k+1)
    has fewer than k tokens above it (they would hold more than k·p ≥ 1 - p of the mass with
    it), so its rank is at most k. The converse does not hold (under a flat distribution a
    token can rank within k at a lower p): the test is exact from log-probs alone, and
    conservative; scoring returns no ranks.
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    logprobs = np.asarray(logprobs, dtype=np.float64)
    if logprobs.ndim != 2:
        raise ValueError(f"logprobs must be [N, L], got shape {logprobs.shape}")
    if logprobs.shape[1] == 0:
        return np.ones(logprobs.shape[0], dtype=bool)
    return logprobs.min(axis=1) >= -math.log(k + 1)


def lowest_fraction(values: Sequence[float], keys: Sequence[str], *, fraction: float) -> list[str]:
    """The keys of the ⌊fraction · M⌋ smallest of M values (ties by key, so the cut is stable).

    values, keys: [M] → the dropped keys, smallest first.
    """
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"fraction must be in [0, 1], got {fraction}")
    if len(values) != len(keys):
        raise ValueError(f"{len(values)} values but {len(keys)} keys")
    count = math.floor(fraction * len(values) + 1e-9)
    ranked = sorted(zip(values, keys, strict=True), key=lambda item: (item[0], item[1]))
    return [key for _, key in ranked[:count]]


def pearson(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Pearson correlation of two [M] samples; None when either has no spread (undefined)."""
    a, b = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"pearson needs two [M] arrays, got {a.shape} and {b.shape}")
    da, db = a - a.mean(), b - b.mean()
    norm = math.sqrt(float(da @ da) * float(db @ db))
    return float(da @ db) / norm if norm > 0 else None
