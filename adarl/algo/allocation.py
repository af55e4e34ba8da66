"""How many samples each prompt of a step gets, under an exact step budget.

Every rule computes a non-negative weight per prompt and `round_to_budget` turns weights into
integers n_i with Σ n_i = budget exactly and min ≤ n_i ≤ max (seed 001 §"Variance-optimal
allocation", seed 002 §GVM, `shared/MATH.md` §Allocation rules):

    uniform             n_i ∝ 1
    variance-optimal    n_i ∝ w(p_i)·√(p_i(1-p_i))       (minimises Σ w²p(1-p)/n_i)
    Ada-Est             n_i ∝ 1/√(p̂_i + ε)               (Reinforce-Ada paper v3, Algorithm 1)
    √odds               n_i ∝ √((1-p_i)/p_i)              (log objective with a baseline)
    GVM                 n_i ∝ G_i/√(p_i + α/p_i^(β-1))    (RLHFlow/GVM; 0 if G_i = 0 or p_i = 0)

Zero-weight rule: a prompt whose weight is exactly 0 is excluded and gets 0 samples; the
[min, max] bounds apply to the others. Only GVM produces zero weights (and any caller that
passes zeros to `round_to_budget` on purpose).

Allocation changes *which objective* a batch optimises unless the loss normalises per prompt:
a per-sample mean over the batch weights prompt i by n_i/n̄. `equal_prompt_weight_scale` gives
the factor that undoes it; Reinforce-Ada-Est keeps it on purpose (1/√p̂ samples × 1/√p̂
advantage ∝ 1/p̂, the log objective).
"""

from __future__ import annotations

import numpy as np

from adarl.algo.objectives import clip_pass_rate, get_objective

_BISECTION_STEPS = 200


def _bounds(bound: int | np.ndarray, size: int, name: str) -> np.ndarray:
    values = np.broadcast_to(np.asarray(bound), (size,))
    if not np.issubdtype(values.dtype, np.integer) and not np.all(values == np.round(values)):
        raise ValueError(f"{name} must be integers (got {bound!r})")
    values = values.astype(np.int64)
    if np.any(values < 0):
        raise ValueError(f"{name} must be >= 0 (got {bound!r})")
    return values


def round_to_budget(
    weights: np.ndarray,  # [B] non-negative prompt weights
    *,
    budget: int,
    min_samples: int | np.ndarray,  # scalar or [B]
    max_samples: int | np.ndarray,  # scalar or [B]
) -> np.ndarray:  # [B] int64 samples per prompt, Σ = budget
    """Integer allocation n_i ∝ weights, with Σ n_i = budget exactly and n_i ∈ [min_i, max_i].

    1. Continuous water-filling: find λ with Σ clip(λ·w_i, min_i, max_i) = budget (bisection
       on log λ, so weights may span any range).
    2. Floor each target, then give +1 to the prompts with the largest fractional residuals
       (ties: larger weight first, then lower index) until the budget is met (GVM's rounding).
    Prompts with weight 0 get 0 and do not count against the bounds. The result is monotone:
    w_i > w_j with equal bounds implies n_i ≥ n_j. Infeasible budgets raise ValueError.
    """
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim != 1:
        raise ValueError(f"weights must be 1-D [B] (got shape {w.shape})")
    if not np.all(np.isfinite(w)) or np.any(w < 0):
        raise ValueError("weights must be finite and >= 0 (clip or smooth pass rates first)")
    size = w.size
    lo = _bounds(min_samples, size, "min_samples")
    hi = _bounds(max_samples, size, "max_samples")
    if np.any(lo > hi):
        raise ValueError(f"min_samples must be <= max_samples (got {min_samples}, {max_samples})")
    if budget < 0 or int(budget) != budget:
        raise ValueError(f"budget must be a non-negative integer (got {budget})")
    active = w > 0
    counts = np.zeros(size, dtype=np.int64)
    lo_sum, hi_sum = int(lo[active].sum()), int(hi[active].sum())
    if not lo_sum <= budget <= hi_sum:
        raise ValueError(
            f"budget={budget} is infeasible for {int(active.sum())} prompts with non-zero "
            f"weight: it must lie in [sum of min_samples, sum of max_samples] = "
            f"[{lo_sum}, {hi_sum}]; change the budget or the per-prompt bounds"
        )
    if budget == 0 or not active.any():
        return counts
    wa, la, ha = w[active], lo[active].astype(np.float64), hi[active].astype(np.float64)
    log_w = np.log(wa)  # search log λ: weights may span hundreds of orders of magnitude

    def filled(log_scale: float) -> float:
        with np.errstate(over="ignore"):  # exp overflow → inf → clipped to the upper bound
            return float(np.clip(np.exp(log_scale + log_w), la, ha).sum())

    with np.errstate(divide="ignore"):
        breakpoints = np.concatenate([np.log(la) - log_w, np.log(ha) - log_w])
    breakpoints = breakpoints[np.isfinite(breakpoints)]
    low, high = float(breakpoints.min()) - 1.0, float(breakpoints.max()) + 1.0  # S(high) = Σ max
    while filled(low) > budget:  # lower bounds of 0 have no breakpoint: walk down until S ≤ budget
        low -= 1.0 + abs(low)
    for _ in range(_BISECTION_STEPS):
        mid = 0.5 * (low + high)
        if not low < mid < high:  # converged to float resolution
            break
        if filled(mid) < budget:
            low = mid
        else:
            high = mid
    with np.errstate(over="ignore"):
        target = np.clip(np.exp(high + log_w), la, ha)
    base = np.floor(target).astype(np.int64)
    base = np.clip(base, lo[active], hi[active])
    residual = target - base
    deficit = budget - int(base.sum())
    index = np.arange(wa.size)
    if deficit > 0:
        room = np.flatnonzero(base < hi[active])
        order = np.lexsort((index[room], -wa[room], -residual[room]))
        base[room[order[:deficit]]] += 1
    elif deficit < 0:
        slack = np.flatnonzero(base > lo[active])
        order = np.lexsort((-index[slack], wa[slack], residual[slack]))
        base[slack[order[:-deficit]]] -= 1
    if int(base.sum()) != budget:  # cannot happen for a feasible budget: fail loudly if it does
        raise RuntimeError(f"rounding missed the budget: {int(base.sum())} != {budget}")
    counts[active] = base
    return counts


def uniform_allocation(
    num_prompts: int, *, budget: int, min_samples: int, max_samples: int
) -> np.ndarray:  # [num_prompts] int64
    """n_i = budget/B, rounded so that Σ n_i = budget (the first prompts get the remainder)."""
    if num_prompts < 1:
        raise ValueError(f"num_prompts must be >= 1 (got {num_prompts})")
    return round_to_budget(
        np.ones(num_prompts), budget=budget, min_samples=min_samples, max_samples=max_samples
    )


def variance_optimal_allocation(
    p: np.ndarray,  # [B] pass rates (estimates)
    *,
    objective: str,
    budget: int,
    min_samples: int | np.ndarray,
    max_samples: int | np.ndarray,
    alpha: float = 0.5,
    objective_k: int = 8,
    clip_delta: float = 1e-3,
) -> np.ndarray:  # [B] int64
    """n_i ∝ w(p_i)·√(p_i(1-p_i)) (seed 001: Lagrange solution of min Σ w(p_i)²p_i(1-p_i)/n_i
    s.t. Σ n_i = N). p is clipped to [δ, 1-δ] first, so no prompt is excluded.

    arcsin → uniform; log → √((1-p)/p); linear → √(p(1-p)); pass@k (`objective_k` = k) →
    k(1-p)^(k-1)·√(p(1-p)), which falls to ~0 for easy prompts (their share of ∇pass@k vanishes).
    """
    pc = clip_pass_rate(p, delta=clip_delta)
    objective_fn = get_objective(objective, alpha=alpha, objective_k=objective_k)
    weight = np.asarray(objective_fn.w(pc)) * np.sqrt(pc * (1.0 - pc))
    return round_to_budget(weight, budget=budget, min_samples=min_samples, max_samples=max_samples)


def ada_est_allocation(
    p_hat: np.ndarray,  # [B] pass-rate estimates (e.g. `ema_pass_rate_update`)
    *,
    budget: int,
    eps: float,
    min_samples: int | np.ndarray,
    max_samples: int | np.ndarray,
) -> np.ndarray:  # [B] int64
    """Reinforce-Ada-Est (paper v3, Algorithm 1): n_i ∝ 1/√(p̂_i + ε), clipped to
    [N_min, N_max] and rescaled to the step budget."""
    p_hat = np.asarray(p_hat, dtype=np.float64)
    if np.any(p_hat < 0) or np.any(p_hat > 1):
        raise ValueError("p_hat must lie in [0, 1]")
    if eps < 0 or np.any(p_hat + eps <= 0):
        raise ValueError(f"need p_hat + eps > 0 (got eps={eps}); use eps > 0 or smoothed p_hat")
    return round_to_budget(
        1.0 / np.sqrt(p_hat + eps), budget=budget, min_samples=min_samples, max_samples=max_samples
    )


def sqrt_odds_allocation(
    p: np.ndarray,  # [B]
    *,
    budget: int,
    min_samples: int | np.ndarray,
    max_samples: int | np.ndarray,
    clip_delta: float = 1e-3,
) -> np.ndarray:  # [B] int64
    """n_i ∝ √((1-p_i)/p_i): the variance-optimal rule for the log objective with a baseline
    (seed 001). p clipped to [δ, 1-δ]."""
    pc = clip_pass_rate(p, delta=clip_delta)
    return round_to_budget(
        np.sqrt((1.0 - pc) / pc), budget=budget, min_samples=min_samples, max_samples=max_samples
    )


def ema_pass_rate_update(
    total: np.ndarray,  # [B] discounted sample counts N_tot
    positives: np.ndarray,  # [B] discounted positive counts N_pos
    *,
    new_total: np.ndarray,  # [B] samples drawn this step n_t
    new_positives: np.ndarray,  # [B] positives among them k_t
    decay: float,
    prior_a: float,
    prior_b: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # (N_tot', N_pos', p̂), each [B] float64
    """Ada-Est's pass-rate tracker (paper v3, Algorithm 1):
    N_tot ← λ·N_tot + n_t,  N_pos ← λ·N_pos + k_t,  p̂ = (N_pos + a)/(N_tot + a + b)."""
    if not 0.0 <= decay <= 1.0:
        raise ValueError(f"decay λ must be in [0, 1] (got {decay})")
    if prior_a <= 0 or prior_b <= 0:
        raise ValueError(f"Beta prior needs prior_a, prior_b > 0 (got {prior_a}, {prior_b})")
    n_t = np.asarray(new_total, dtype=np.float64)
    k_t = np.asarray(new_positives, dtype=np.float64)
    if np.any(k_t < 0) or np.any(k_t > n_t):
        raise ValueError("new_positives must satisfy 0 <= new_positives <= new_total")
    total_next = decay * np.asarray(total, dtype=np.float64) + n_t
    positives_next = decay * np.asarray(positives, dtype=np.float64) + k_t
    p_hat = (positives_next + prior_a) / (total_next + prior_a + prior_b)
    return total_next, positives_next, p_hat


def gvm_weights(
    grad_norms: np.ndarray,  # [B] G_i ≥ 0
    pass_rates: np.ndarray,  # [B] p_i ∈ [0, 1]
    *,
    alpha: float = 1e-3,
    beta: float = 2.0,
) -> np.ndarray:  # [B] float64
    """w_i = G_i/√(p_i + α/p_i^(β-1)), and 0 when G_i = 0 or p_i = 0 (RLHFlow/GVM)."""
    g = np.asarray(grad_norms, dtype=np.float64)
    p = np.asarray(pass_rates, dtype=np.float64)
    if g.shape != p.shape or g.ndim != 1:
        raise ValueError(
            f"grad_norms and pass_rates must be 1-D of equal shape ({g.shape}, {p.shape})"
        )
    if np.any(g < 0) or np.any(p < 0) or np.any(p > 1):
        raise ValueError("grad_norms must be >= 0 and pass_rates in [0, 1]")
    weight = np.zeros_like(g)
    ok = (g > 0) & (p > 0)
    weight[ok] = g[ok] / np.sqrt(p[ok] + alpha / p[ok] ** (beta - 1.0))
    return weight


def gvm_allocation(
    grad_norms: np.ndarray,  # [B]
    pass_rates: np.ndarray,  # [B]
    *,
    budget: int,
    alpha: float = 1e-3,
    beta: float = 2.0,
    min_samples: int | np.ndarray,
    max_samples: int | np.ndarray,
) -> np.ndarray:  # [B] int64
    """GVM allocation n_i ∝ G_i/√(p_i + α/p_i^(β-1)) (excluded prompts get 0), integers meeting
    the budget exactly (`round_to_budget`; GVM's code rounds then ±1 on residuals)."""
    return round_to_budget(
        gvm_weights(grad_norms, pass_rates, alpha=alpha, beta=beta),
        budget=budget,
        min_samples=min_samples,
        max_samples=max_samples,
    )


def equal_prompt_weight_scale(group_sizes: np.ndarray) -> np.ndarray:  # [B] -> [B] float64
    """n̄/n_i (0 where n_i = 0): multiply group i's advantages by it so that a per-sample mean
    over the batch gives every prompt the same weight, i.e. the per-prompt estimator (1/n_i)Σ_j."""
    n = np.asarray(group_sizes, dtype=np.float64)
    if n.ndim != 1 or np.any(n < 0):
        raise ValueError("group_sizes must be a 1-D array of counts >= 0")
    kept = n > 0
    scale = np.zeros_like(n)
    if kept.any():
        scale[kept] = n[kept].mean() / n[kept]
    return scale
