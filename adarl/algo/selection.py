"""Downsample a prompt's pool to a fixed training group, then correct its advantages.

Adaptive sampling (Seq-Pos, Seq-Balance, Est) produces a variable pool of N samples per prompt;
training uses a fixed group of n (seed 001 §"decouple the sampling budget from the training
budget"). Choosing *which* n samples changes what the gradient estimates, so the advantage
must say how it corrects for the selection (`shared/MATH.md` §Selection).

Convention used by every estimator in adarl: the per-prompt gradient estimate is

    ĝ = (1/n) Σ_{j ∈ kept} A_j ∇log π(a_j | x),        n = the target group size,

and `adarl.algo.implied.implied_weight` gives the w(p) with E[ĝ] = w(p)·∇p.

Kept positives are conditionally i.i.d. draws of π(·|x, r=1) whatever the pool or the order in
which they were chosen (samples are i.i.d.; the choice depends on labels only), so with
g⁺ = E[∇log π | r=1], g⁻ = E[∇log π | r=0] and p g⁺ + (1-p) g⁻ = 0:

    E[ĝ | n⁺, n⁻, A⁺, A⁻] = (1/n)(n⁺ A⁺ g⁺ + n⁻ A⁻ g⁻)
                          = [n⁺ (1-p) A⁺ - n⁻ p A⁻] / (n p (1-p)) · ∇p.          (★)
"""

from __future__ import annotations

from enum import Enum

import numpy as np

from adarl.algo.objectives import clip_pass_rate, selection_weight


class UnresolvedPolicy(str, Enum):
    """What to do with a prompt that hit its sampling cap without the stopping rule's exit."""

    DROP = "drop"  # train on nothing from it (it is still counted by the sampler)
    ZERO_ADVANTAGE = "zero_advantage"  # keep a downsampled group, every advantage 0
    KEEP_AVAILABLE = "keep_available"  # keep min(n, N) downsampled samples, corrected as usual


class Correction(str, Enum):
    """How advantages of a downsampled group are computed (p̃: pool pass-rate estimate).

    none            A = r - p̃                         (released Reinforce-Ada script)
    std             A = (r - p̃) / (σ_pool + 1e-6)     (released script's std flag; σ unbiased)
    selection       A⁺ = h(p̃)·n/n⁺, A⁻ = -h(p̃)·n/n⁻, h = w·p(1-p)   (MATH.md; any f)
    inverse_p       A = (r - p̃) / p̃                   (Reinforce-Ada paper v3, Seq)
    inverse_sqrt_p  A = (r - p̃) / √p̃                  (Reinforce-Ada paper v3, Est weight)
    """

    NONE = "none"
    STD = "std"
    SELECTION = "selection"
    INVERSE_P = "inverse_p"
    INVERSE_SQRT_P = "inverse_sqrt_p"


class DownsampleOrder(str, Enum):
    RANDOM = "random"  # uniformly at random within each label (seeded rng)
    EARLIEST = "earliest"  # first-come within each label: the released Reinforce-Ada code


STD_EPS = 1e-6  # the released script's (and verl's) std epsilon


def positive_mask(rewards: np.ndarray, *, positive_threshold: float = 0.5) -> np.ndarray:
    """Binary labels: r > threshold.  rewards: [N] -> bool [N]. (Released code: > 0.7.)"""
    return np.asarray(rewards, dtype=np.float64) > positive_threshold


def balanced_downsample(
    rewards: np.ndarray,  # [N] pool rewards, in sampling order
    *,
    group_size: int,
    positive_threshold: float = 0.5,
    rng: np.random.Generator | None = None,
    order: str = "random",
) -> np.ndarray:  # [min(group_size, N)] int64 indices into `rewards`, ascending
    """Indices of a balanced group of n = `group_size` samples from a pool of N.

    n⁺ = min(⌊n/2⌋, |pos|) positives, then negatives fill the rest; if negatives run short the
    remainder is topped up with positives. For odd n the extra slot goes to the negatives (as
    in the released Reinforce-Ada code, which requires ≥ n//2 positives and ≥ n - n//2
    negatives). A pool smaller than n is kept whole. Within a label, `order="random"` picks
    uniformly without replacement with `rng`; `order="earliest"` takes the first in sampling
    order (released code).
    """
    rewards = np.asarray(rewards, dtype=np.float64)
    if rewards.ndim != 1:
        raise ValueError(f"rewards must be 1-D [N] (got shape {rewards.shape})")
    if group_size < 1:
        raise ValueError(f"group_size must be >= 1 (got {group_size})")
    order_enum = DownsampleOrder(order)
    if order_enum is DownsampleOrder.RANDOM and rng is None:
        raise ValueError(
            "order='random' needs rng=np.random.default_rng(seed) so that selection is "
            "reproducible; or pass order='earliest'"
        )
    labels = positive_mask(rewards, positive_threshold=positive_threshold)
    pos_idx = np.flatnonzero(labels)
    neg_idx = np.flatnonzero(~labels)
    target = min(group_size, rewards.shape[0])
    take_pos = min(group_size // 2, pos_idx.size)
    take_neg = min(target - take_pos, neg_idx.size)
    take_pos = min(pos_idx.size, target - take_neg)  # top up if negatives were short

    def pick(idx: np.ndarray, count: int) -> np.ndarray:
        if order_enum is DownsampleOrder.EARLIEST:
            return idx[:count]
        assert rng is not None
        return rng.choice(idx, size=count, replace=False)

    kept = np.concatenate([pick(pos_idx, take_pos), pick(neg_idx, take_neg)])
    return np.sort(kept).astype(np.int64)


def _pool_baseline_and_std(
    pool_rewards: np.ndarray, pass_rate: float | None
) -> tuple[float, float]:
    if pass_rate is not None:
        return pass_rate, float(np.sqrt(pass_rate * (1.0 - pass_rate)))
    mean = float(pool_rewards.mean())
    std = float(pool_rewards.std(ddof=1)) if pool_rewards.size > 1 else 0.0
    return mean, std


def corrected_advantages(
    kept_rewards: np.ndarray,  # [m] rewards of the kept group (m = n unless the pool was short)
    *,
    pool_rewards: np.ndarray,  # [N] rewards of the whole pool the group was taken from
    correction: Correction | str,
    objective: str = "log",
    alpha: float = 0.5,
    objective_k: int = 8,
    pass_rate: float | None = None,
    positive_threshold: float = 0.5,
    clip_delta: float = 1e-3,
    group_size: int | None = None,
) -> np.ndarray:  # [m] float64 advantages A_j
    """Advantages of a downsampled group under a `Correction` mode (equations on `Correction`).

    p̃ (the baseline) is the pool mean reward, or `pass_rate` when given: the true p in the
    "p known" tests, or an estimate that is unbiased under the stopping rule
    (`adarl.algo.gate.rao_blackwell_pass_rate`; the pool mean is not). σ_pool is the unbiased
    pool std (0 for a 1-sample pool); with `pass_rate` it is the Bernoulli √(p(1-p)). The 1/p̃
    and 1/√p̃ factors use p̃ clipped to [clip_delta, 1-clip_delta]; the r - p̃ factors do not,
    so an all-negative pool gets zero.

    `selection` (MATH.md): with n⁺/n⁻ kept positives/negatives (r > positive_threshold), p̃ the
    pool positive fraction (or `pass_rate`), w = f' of `objective` and n = `group_size` (the
    target size that normalises ĝ; defaults to m, the kept size),
        A⁺ = w(p̃)·(1-p̃)·p̃·n/n⁺,   A⁻ = -w(p̃)·p̃·(1-p̃)·n/n⁻,
    so by (★) E[ĝ] = w(p)·∇p exactly when p̃ = p, for any split with n⁺, n⁻ > 0 (`alpha` is the
    exponent of "power", `objective_k` the k of "pass_at_k"). The product
    w(p̃)p̃(1-p̃) is evaluated in closed form (`selection_weight`), finite on [0, 1], so it needs
    no clipping. A one-label group carries no contrast and gets all zeros (the gate).
    """
    kept = np.asarray(kept_rewards, dtype=np.float64)
    pool = np.asarray(pool_rewards, dtype=np.float64)
    if kept.ndim != 1 or pool.ndim != 1:
        raise ValueError(
            f"kept_rewards and pool_rewards must be 1-D (got {kept.shape}, {pool.shape})"
        )
    if pool.size == 0:
        raise ValueError("pool_rewards is empty: a group needs the pool it was drawn from")
    if pass_rate is not None and not 0.0 <= pass_rate <= 1.0:
        raise ValueError(f"pass_rate must be in [0, 1] (got {pass_rate})")
    mode = Correction(correction)
    if kept.size == 0:
        return np.zeros(0, dtype=np.float64)

    if mode is Correction.SELECTION:
        labels = positive_mask(kept, positive_threshold=positive_threshold)
        n_pos = int(labels.sum())
        n_neg = kept.size - n_pos
        if n_pos == 0 or n_neg == 0:
            return np.zeros(kept.size, dtype=np.float64)
        if pass_rate is None:
            p = float(positive_mask(pool, positive_threshold=positive_threshold).mean())
        else:
            p = pass_rate
        h = float(  # w(p)·p(1-p)
            selection_weight(p, objective=objective, alpha=alpha, objective_k=objective_k)
        )
        n = kept.size if group_size is None else group_size
        a_pos = h * n / n_pos
        a_neg = -h * n / n_neg
        return np.where(labels, a_pos, a_neg)

    baseline, std = _pool_baseline_and_std(pool, pass_rate)
    centred = kept - baseline
    if mode is Correction.NONE:
        return centred
    if mode is Correction.STD:
        return centred / (std + STD_EPS)
    p_clipped = float(clip_pass_rate(baseline, delta=clip_delta))
    if mode is Correction.INVERSE_P:
        return centred / p_clipped
    return centred / np.sqrt(p_clipped)  # INVERSE_SQRT_P


def downsample_and_correct(
    pool_rewards: np.ndarray,  # [N] in sampling order
    *,
    resolved: bool,
    group_size: int,
    unresolved_policy: UnresolvedPolicy | str,
    correction: Correction | str,
    objective: str = "log",
    alpha: float = 0.5,
    objective_k: int = 8,
    pass_rate: float | None = None,
    positive_threshold: float = 0.5,
    clip_delta: float = 1e-3,
    rng: np.random.Generator | None = None,
    order: str = "random",
) -> tuple[np.ndarray, np.ndarray]:  # (kept indices [m] int64, advantages [m] float64)
    """The whole selection step for one prompt: balanced downsample, unresolved policy, correction.

    Resolved prompts and KEEP_AVAILABLE unresolved prompts are downsampled with
    `balanced_downsample` and corrected with `corrected_advantages`; ZERO_ADVANTAGE keeps the
    same downsampled group with all-zero advantages; DROP keeps nothing (m = 0).
    """
    policy = UnresolvedPolicy(unresolved_policy)
    if not resolved and policy is UnresolvedPolicy.DROP:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64)
    pool = np.asarray(pool_rewards, dtype=np.float64)
    kept = balanced_downsample(
        pool, group_size=group_size, positive_threshold=positive_threshold, rng=rng, order=order
    )
    if not resolved and policy is UnresolvedPolicy.ZERO_ADVANTAGE:
        return kept, np.zeros(kept.size, dtype=np.float64)
    advantages = corrected_advantages(
        pool[kept],
        pool_rewards=pool,
        correction=correction,
        objective=objective,
        alpha=alpha,
        objective_k=objective_k,
        pass_rate=pass_rate,
        positive_threshold=positive_threshold,
        clip_delta=clip_delta,
        group_size=group_size,
    )
    return kept, advantages
