"""Advantages of one uniform group (all samples of a prompt kept), the baselines of adarl.

Each function maps the rewards of one group, `rewards: np.ndarray  # [G]`, to per-sample
advantages `# [G]` float64; the learner multiplies ∇log π(a_j|x) by A_j. With the per-prompt
estimator ĝ = (1/G) Σ_j A_j ∇log π(a_j|x) (see `adarl.algo.selection`), `implied_weight`
gives the w(p) each one optimises; closed forms are quoted below.
"""

from __future__ import annotations

from collections.abc import Callable
from math import comb

import numpy as np

from adarl.algo.objectives import check_objective_k

GRPO_EPS = 1e-6  # verl `compute_grpo_outcome_advantage` default epsilon
PASSK_TRAINING_EPS = 1e-6  # RUCAIBox/Passk_Training `code/passk_adv.py`: σ + 1e-6
PKPO_BASELINES = ("loo_minus_one", "loo", "none")


def _group(rewards: np.ndarray) -> np.ndarray:
    r = np.asarray(rewards, dtype=np.float64)
    if r.ndim != 1 or r.size == 0:
        raise ValueError(f"rewards must be a non-empty 1-D group [G] (got shape {r.shape})")
    return r


def grpo_advantages(rewards: np.ndarray, *, eps: float = GRPO_EPS) -> np.ndarray:
    """GRPO: A_j = (r_j - μ)/(σ + ε), σ the unbiased (ddof=1) group std.

    A group of one uses μ = 0, σ = 1 (verl `compute_grpo_outcome_advantage`). Implied weight
    (binary r, K ~ Bin(G, p)): w(p) = E[K(G-K)/(G²(σ_K + ε))]/(p(1-p)) → 1/√(p(1-p)) (arcsin)
    as G → ∞ (seed 001 §"Why arcsin").
    """
    r = _group(rewards)
    if r.size == 1:
        return (r - 0.0) / (1.0 + eps)
    return (r - r.mean()) / (r.std(ddof=1) + eps)


def dr_grpo_advantages(rewards: np.ndarray) -> np.ndarray:
    """Dr. GRPO: A_j = r_j - μ (no std division; size-1 group: μ = 0, as verl).

    Implied weight: E[K(G-K)]/(G² p(1-p)) = (G-1)/G, i.e. the linear objective scaled.
    """
    r = _group(rewards)
    if r.size == 1:
        return r.copy()
    return r - r.mean()


def rloo_advantages(rewards: np.ndarray) -> np.ndarray:
    """RLOO: A_j = r_j - (1/(G-1)) Σ_{i≠j} r_i (leave-one-out baseline; verl
    `compute_rloo_outcome_advantage`, which leaves a size-1 group's reward unchanged).

    Unbiased for ∇p: implied weight 1 (linear objective).
    """
    r = _group(rewards)
    if r.size == 1:
        return r.copy()
    g = r.size
    return r - (r.sum() - r) / (g - 1)


def raft_advantages(
    rewards: np.ndarray,
    *,
    positive_threshold: float = 0.5,
    normalization: str = "group",
) -> np.ndarray:
    """RAFT (rejection-sampling fine-tuning): train on positives only.

    normalization="group":     A = 1 on positives (r > threshold), 0 otherwise; with ĝ's 1/G
                               this is (1/G) Σ_{pos} ∇log π, unbiased for ∇p: w = 1 (linear).
    normalization="positives": A = G/K on positives, i.e. the SFT loss averaged over the K
                               accepted samples (RAFT as run); E = Pr[K>0]·∇p/p, so
                               w(p) = (1 - (1-p)^G)/p: log p behind a gate (seed 000).
    """
    r = _group(rewards)
    positive = r > positive_threshold
    if normalization == "group":
        return positive.astype(np.float64)
    if normalization == "positives":
        k = int(positive.sum())
        return positive * (r.size / k) if k else np.zeros(r.size)
    raise ValueError(f"normalization must be 'group' or 'positives' (got {normalization!r})")


def reinforce_baseline_advantages(
    rewards: np.ndarray, *, baseline: float | np.ndarray
) -> np.ndarray:
    """REINFORCE with a baseline independent of the group's own samples: A_j = r_j - b.

    `baseline` is a scalar or per-sample [G] array (e.g. a value estimate or the true p).
    Unbiased for ∇p because E[∇log π] = 0: implied weight 1 (linear).
    """
    r = _group(rewards)
    b = np.broadcast_to(np.asarray(baseline, dtype=np.float64), r.shape)
    return r - b


def ada_est_advantages(
    rewards: np.ndarray, *, eps: float, pass_rate: float | None = None
) -> np.ndarray:
    """Reinforce-Ada-Est (paper v3, Algorithm 1): A_j = (r_j - r̄)/√(r̄ + ε).

    r̄ is the group mean, or `pass_rate` when known. With r̄ = p the implied weight is
    1/√(p+ε); combined with n_i ∝ 1/√(p̂_i+ε) samples and a per-sample mean over the batch the
    prompt's total weight is ∝ 1/(p+ε): the log objective. (Not in any public code.)
    """
    if eps < 0:
        raise ValueError(f"eps must be >= 0 (got {eps})")
    r = _group(rewards)
    mean = r.mean() if pass_rate is None else pass_rate
    if mean + eps <= 0.0:
        return np.zeros(r.size)  # all-zero group with eps = 0: no signal, avoid 0/0
    return (r - mean) / np.sqrt(mean + eps)


def _labels(rewards: np.ndarray, positive_threshold: float) -> np.ndarray:
    return np.asarray(rewards, dtype=np.float64) > positive_threshold


def _choose(n: int, k: int) -> int:
    """C(n, k), 0 outside 0 <= k <= n (also for n < 0: scipy's `comb` convention)."""
    return comb(n, k) if 0 <= k <= n else 0


def _check_group_covers_k(size: int, k: int, what: str) -> None:
    if size < k:
        raise ValueError(
            f"{what} needs a group of at least k samples: got {size} < k={k} (the pass@k "
            "estimate 1 - C(N_neg, k)/C(N, k) is undefined; the reference code returns NaN); "
            "raise the group size or lower objective_k"
        )


def passk_training_advantages(
    rewards: np.ndarray,  # [N] rewards of one group
    *,
    k: int,
    positive_threshold: float = 0.5,
    eps: float = PASSK_TRAINING_EPS,
) -> np.ndarray:  # [N] float64
    """Pass@k Training with analytical advantages (Chen et al. 2025, arXiv 2508.10751, eqs. for
    Â_pos/Â_neg; code RUCAIBox/Passk_Training `code/passk_adv.py`). N samples, N_neg negatives:

        R̄ = 1 - C(N_neg, k)/C(N, k)                (the group's unbiased pass@k)
        σ = √(R̄(1 - R̄))
        A⁺ = (1 - R̄)/(σ + ε),   A⁻ = (1 - R̄ - C(N_neg - 1, k - 1)/C(N - 1, k - 1))/(σ + ε)

    ε = 1e-6 added to σ, as the code does. A sample's 1 - C(...)/C(...) term is the mean pass@k
    reward of the k-subsets that contain it, so A is that minus its group mean R̄ (Σ_j A_j = 0).
    Edge cases, as the reference computes them: a one-label group, and any group with
    N_neg < k (every k-subset holds a positive: R̄ = 1), get all zeros; N < k is undefined (the
    reference returns NaN) and raises. k = 1 is GRPO with the population std (ddof 0). Labels are
    r > `positive_threshold` (the reference tests r == 1; identical for 0/1 rewards). Implied
    weight: `adarl.algo.implied.passk_training_weight`.
    """
    r = _group(rewards)
    k = check_objective_k(k)
    size = r.size
    _check_group_covers_k(size, k, "Pass@k Training")
    if eps < 0:
        raise ValueError(f"eps must be >= 0 (got {eps})")
    labels = _labels(r, positive_threshold)
    negatives = size - int(labels.sum())
    mean = 1.0 - _choose(negatives, k) / _choose(size, k)
    sigma = float(np.sqrt(mean * (1.0 - mean)))
    if sigma + eps == 0.0:
        return np.zeros(size)  # eps = 0 and one label: no signal, avoid 0/0
    a_pos = (1.0 - mean) / (sigma + eps)
    miss = _choose(negatives - 1, k - 1) / _choose(size - 1, k - 1) if negatives else 0.0
    a_neg = (1.0 - mean - miss) / (sigma + eps)
    return np.where(labels, a_pos, a_neg)


def pkpo_advantages(
    rewards: np.ndarray,  # [n] rewards of one group
    *,
    k: int,
    baseline: str = "loo_minus_one",
    positive_threshold: float = 0.5,
) -> np.ndarray:  # [n] float64
    """PKPO for binary rewards (Walder & Karkhanis 2025, arXiv 2505.15201): the unbiased gradient
    of pass@k = 1 - (1-p)^k from n ≥ k samples, c correct. With ρ(n, c, k) = 1 - C(n-c, k)/C(n, k)
    (the unbiased pass@k estimate), the paper's effective rewards are

        s_i = k/n                        (correct)
        s_i = (k/n)·ρ(n - 1, c, k - 1)   (wrong)

    and Σ_i s_i ∇log π_i is unbiased for ∇pass@k; s_i is the mean over the k-subsets I ∋ i of
    max_I r, times C(n-1, k-1)/C(n, k). Baselines that keep it unbiased (`baseline`):

        "none"           s_i as above
        "loo"            s_i - (1/(n-1))·Σ_{j≠i} s_j computed on the n - 1 others
                         = s_i - k·ρ(n - 1, c - r_i, k)/(n - 1)        (the paper's s^(loo); n > k)
        "loo_minus_one"  (1/C(n, k))·Σ_{I ∋ i} [max_I r - max_{I∖i} r]  (the paper's s^(loo-1), its
                         lowest-variance form): C(n - c, k - 1)/C(n, k) if correct, 0 if wrong

    adarl's group estimator is ĝ = (1/n)·Σ_j A_j ∇log π_j, so A_i = n·s_i, and E[ĝ] =
    ∇pass@k = k(1-p)^(k-1)·∇p exactly for every baseline (`implied_weight`; tests enumerate all
    label vectors). Equal to Pass@k Training up to a per-prompt scale and baseline (arXiv
    2510.23049): `passk_training_advantages` = (A_none/k - R̄)/(σ + ε). n < k raises (ρ is
    undefined), as does "loo" at n = k.
    """
    r = _group(rewards)
    k = check_objective_k(k)
    n = r.size
    _check_group_covers_k(n, k, "PKPO")
    labels = _labels(r, positive_threshold)
    c = int(labels.sum())

    def rho(size: int, correct: int, subset: int) -> float:
        return 1.0 - _choose(size - correct, subset) / _choose(size, subset)

    if baseline == "loo_minus_one":
        s_pos = _choose(n - c, k - 1) / _choose(n, k)
        return np.where(labels, n * s_pos, 0.0)
    s_pos = k / n
    s_neg = (k / n) * rho(n - 1, c, k - 1) if c < n else 0.0
    s = np.where(labels, s_pos, s_neg)
    if baseline == "none":
        return n * s
    if baseline != "loo":
        raise ValueError(f"PKPO baseline must be one of {PKPO_BASELINES} (got {baseline!r})")
    if n <= k:
        raise ValueError(
            f"PKPO's 'loo' baseline needs n > k (got n={n}, k={k}): it estimates pass@k from "
            "the n - 1 other samples; use baseline='loo_minus_one' (defined for n >= k)"
        )
    b_pos = k * rho(n - 1, c - 1, k) / (n - 1) if c > 0 else 0.0
    b_neg = k * rho(n - 1, c, k) / (n - 1) if c < n else 0.0
    return n * (s - np.where(labels, b_pos, b_neg))


def focal_scale(
    rewards: np.ndarray,  # [G] rewards of one group
    *,
    gamma: float,
    positive_threshold: float = 0.5,
) -> float:
    """F-GRPO's difficulty weight (Plyusov et al. 2026, arXiv 2602.06717): g = (1 - μ̂_pos)^γ,
    μ̂_pos the group's success rate (its share of samples with r > `positive_threshold`), which
    multiplies a group-relative advantage (GRPO's, and here also Dr. GRPO's and RLOO's). γ = 0 is
    1 (off); larger γ down-weights groups that mostly succeed. Implied weight with GRPO:
    `adarl.algo.implied.focal_grpo_weight`."""
    if not (np.isfinite(gamma) and gamma >= 0):
        raise ValueError(f"focal gamma must be >= 0 (got {gamma}); 0 turns the factor off")
    r = _group(rewards)
    success = float(_labels(r, positive_threshold).mean())
    return float((1.0 - success) ** gamma)


UNIFORM_ESTIMATORS: dict[str, Callable[..., np.ndarray]] = {
    "grpo": grpo_advantages,
    "dr_grpo": dr_grpo_advantages,
    "rloo": rloo_advantages,
    "raft": raft_advantages,
    "reinforce_baseline": reinforce_baseline_advantages,
    "ada_est": ada_est_advantages,
    "passk_training": passk_training_advantages,
    "pkpo": pkpo_advantages,
}
"""Uniform-group advantage functions by name (keyword arguments differ; see each docstring)."""
