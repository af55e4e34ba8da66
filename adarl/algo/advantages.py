"""Advantages of one uniform group (all samples of a prompt kept), the baselines of adarl.

Each function maps the rewards of one group, `rewards: np.ndarray  # [G]`, to per-sample
advantages `# [G]` float64; the learner multiplies ∇log π(a_j|x) by A_j. With the per-prompt
estimator ĝ = (1/G) Σ_j A_j ∇log π(a_j|x) (see `adarl.algo.selection`), `implied_weight`
gives the w(p) each one optimises; closed forms are quoted below.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

GRPO_EPS = 1e-6  # verl `compute_grpo_outcome_advantage` default epsilon


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


UNIFORM_ESTIMATORS: dict[str, Callable[..., np.ndarray]] = {
    "grpo": grpo_advantages,
    "dr_grpo": dr_grpo_advantages,
    "rloo": rloo_advantages,
    "raft": raft_advantages,
    "reinforce_baseline": reinforce_baseline_advantages,
    "ada_est": ada_est_advantages,
}
"""Uniform-group advantage functions by name (keyword arguments differ; see each docstring)."""
