"""Which prompts get rollouts, and how many: history as a Beta posterior, its pooled prior, the
value of n more samples, the knapsack split of a step budget, and GRESO's skip probability.

Posterior (seed 001 §"Variance-optimal allocation"; GRESO's observation that a prompt's outcomes
persist across epochs). A prompt's pass rate is p ~ Beta(a, b): a prior pooled from prompts like
it (`pooled_beta_prior`) plus its own earlier positives and negatives, discounted by age
(`decay_factor`). Every quantity below is a Beta moment, exact via log-Beta functions:

    E[p^x (1-p)^y] = B(a + x, b + y) / B(a, b)                              (`beta_moment`)

Zero variance. A group of n has all-equal outcomes with probability p^n + (1-p)^n, so under the
posterior (`zero_variance_probability`)

    P_zv(n) = E[p^n + (1-p)^n]

Value for a declared objective f (weight w = f'). A group of n whose outcomes are mixed carries
the prompt's share of ∇J = w(p)·∇p = h(p)·(g⁺ - g⁻) with h(p) = w(p)·p(1-p)
(`adarl.algo.objectives.selection_weight`); a collapsed group carries nothing. The expected
gradient mass n samples capture (`declared_value`) is therefore

    V(n) = E[h(p)·u_n(p)],   u_n(p) = 1 - p^n - (1-p)^n  (the gate, seed 000 §4.1)

with h = c·p^x(1-p)^y: linear (1, 1, 1), log (0, 1, 1), arcsin (½, ½, 1), power α (α, 1, α),
pass@k (1, k, k).

Hit utility (HORA, Wang et al. 2026, arXiv 2605.07114). The posterior probability that at least
one of n more rollouts is correct (`hit_utility`) and what its m-th sample adds
(`hit_utility_increment`):

    H(n) = 1 - E[(1-p)^n] = 1 - B(a, b + n)/B(a, b),
    H(m) - H(m-1) = E[p(1-p)^(m-1)] = B(a + 1, b + m - 1)/B(a, b)

— positive and decreasing in m (concave), so a split maximising Σ_i H_i(n_i) under a budget is
found exactly by the dynamic programme below (or greedily, increment by increment).

Knapsack-RL (Li et al. 2025, arXiv 2509.25849) values n samples at a point estimate p̂ as the
probability of a non-zero gradient times an information gain p(1-p)² (`knapsack_rl_value`).

The split (`knapsack_allocation`): choose n_i ∈ {0} ∪ [n_min, n_max] with Σ n_i = budget exactly,
maximising Σ V_i(n_i), by dynamic programming over the budget (exact for any value curves).

GRESO (Zheng et al. 2025, arXiv 2506.02177; code Infini-AI-Lab/GRESO,
`verl/trainer/ttis/presampling_selector.py`): a prompt whose last z rollouts were all
zero-variance of one kind (all correct, or all wrong) is skipped with probability
1 - max(q^z, 0.01), q the kind's exploration probability (`greso_skip_probability`), and q moves
by a fixed step towards a target zero-variance share of the batch (`greso_adapt`).
"""

from __future__ import annotations

import math

import numpy as np

from adarl.algo.objectives import check_objective_k

# h(p) = c·p^x·(1-p)^y for each objective: (x, y) (alpha enters power's x and c, k pass@k's y and
# c).
_SELECTION_EXPONENTS = {
    "linear": (1.0, 1.0),
    "log": (0.0, 1.0),
    "arcsin": (0.5, 0.5),
    "logit": (0.0, 0.0),
}
GRESO_MIN_ROLLOUT_PROBABILITY = 0.01  # GRESO: a prompt is never skipped with probability > 0.99


def _log_beta(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    lgamma = np.vectorize(math.lgamma, otypes=[np.float64])
    return lgamma(a) + lgamma(b) - lgamma(a + b)


def beta_moment(
    a: np.ndarray | float,  # [...] Beta parameters, > 0
    b: np.ndarray | float,  # [...]
    *,
    x: np.ndarray | float,  # [...] exponent of p, > -a
    y: np.ndarray | float,  # [...] exponent of 1 - p, > -b
) -> np.ndarray:  # [...] float64
    """E[p^x (1-p)^y] for p ~ Beta(a, b): B(a + x, b + y) / B(a, b) (broadcast)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    if np.any(a <= 0) or np.any(b <= 0):
        raise ValueError("Beta parameters a and b must be > 0")
    if np.any(a + x <= 0) or np.any(b + y <= 0):
        raise ValueError("beta_moment needs a + x > 0 and b + y > 0")
    return np.exp(_log_beta(a + x, b + y) - _log_beta(a, b))


def zero_variance_probability(
    a: np.ndarray | float,  # [...]
    b: np.ndarray | float,  # [...]
    *,
    samples: np.ndarray | int,  # [...] group size n >= 1
) -> np.ndarray:  # [...] float64 in [0, 1]
    """P_zv(n) = E[p^n + (1-p)^n] under Beta(a, b): a group of n comes back all equal.

    n = 1 gives 1 (one sample never mixes); Beta(1, 1) gives 2/(n + 1).
    """
    n = np.asarray(samples, np.float64)
    if np.any(n < 1):
        raise ValueError("samples must be >= 1")
    return np.minimum(beta_moment(a, b, x=n, y=0.0) + beta_moment(a, b, x=0.0, y=n), 1.0)


def declared_value(
    a: np.ndarray,  # [C] posterior Beta parameters of C prompts
    b: np.ndarray,  # [C]
    *,
    max_samples: int,
    objective: str,
    alpha: float = 0.5,
    objective_k: int = 8,
) -> np.ndarray:  # [C, max_samples + 1] V_i(n) for n = 0..max_samples
    """V(n) = E[h(p)·(1 - p^n - (1-p)^n)], h = w·p(1-p) for the declared objective (module
    docstring): the expected gradient mass of the objective a group of n captures. V(0) = V(1) = 0;
    V rises with n to E[h(p)], the prompt's whole share, with diminishing increments. `alpha` is
    the exponent of "power", `objective_k` the k of "pass_at_k" (h = k·p·(1-p)^k)."""
    if max_samples < 1:
        raise ValueError(f"max_samples must be >= 1 (got {max_samples})")
    if objective == "power":
        if not alpha > 0:
            raise ValueError(f"power objective needs alpha > 0 (got {alpha})")
        x, y, scale = alpha, 1.0, alpha
    elif objective == "pass_at_k":
        k = check_objective_k(objective_k)
        x, y, scale = 1.0, float(k), float(k)
    elif objective in _SELECTION_EXPONENTS:
        (x, y), scale = _SELECTION_EXPONENTS[objective], 1.0
    else:
        raise ValueError(
            f"unknown objective {objective!r}; use linear, log, arcsin, logit, power or pass_at_k"
        )
    a = np.asarray(a, np.float64)[:, None]
    b = np.asarray(b, np.float64)[:, None]
    n = np.arange(max_samples + 1, dtype=np.float64)[None, :]
    whole = beta_moment(a, b, x=x, y=y)
    collapsed = beta_moment(a, b, x=x + n, y=y) + beta_moment(a, b, x=x, y=y + n)
    value = scale * np.maximum(whole - collapsed, 0.0)
    value[:, :2] = 0.0  # n = 0 draws nothing; one sample never mixes (the formula agrees)
    return value


def hit_utility_increment(
    a: np.ndarray | float,  # [...] Beta parameters, > 0
    b: np.ndarray | float,  # [...]
    *,
    sample: np.ndarray | int,  # [...] m >= 1: which additional sample
) -> np.ndarray:  # [...] float64
    """What the m-th additional sample adds to the hit utility (HORA, arXiv 2605.07114):
    Pr[the first m - 1 miss and the m-th hits] = E[p(1-p)^(m-1)] = B(a + 1, b + m - 1)/B(a, b)
    for p ~ Beta(a, b). Decreasing in m; Beta(1, 1) gives 1/(m(m + 1))."""
    m = np.asarray(sample, np.float64)
    if np.any(m < 1) or np.any(m != np.round(m)):
        raise ValueError("sample must be an integer >= 1 (the first additional sample is 1)")
    return beta_moment(a, b, x=1.0, y=m - 1.0)


def hit_utility(
    a: np.ndarray,  # [C] Beta parameters of C prompts' pass rates
    b: np.ndarray,  # [C]
    *,
    max_samples: int,
) -> np.ndarray:  # [C, max_samples + 1] H_i(n) for n = 0..max_samples
    """HORA's hit utility of n more rollouts (arXiv 2605.07114): the posterior probability that at
    least one is correct, H(n) = 1 - E[(1-p)^n] = 1 - B(a, b + n)/B(a, b) = Σ_{m ≤ n} the
    increments of `hit_utility_increment`. H(0) = 0; concave in n; Beta(1, 1) gives n/(n + 1)."""
    if max_samples < 1:
        raise ValueError(f"max_samples must be >= 1 (got {max_samples})")
    a = np.asarray(a, np.float64)[:, None]
    b = np.asarray(b, np.float64)[:, None]
    n = np.arange(max_samples + 1, dtype=np.float64)[None, :]
    return np.clip(1.0 - beta_moment(a, b, x=0.0, y=n), 0.0, 1.0)


def knapsack_rl_value(
    p: np.ndarray,  # [C] point estimates of the pass rate
    *,
    max_samples: int,
) -> np.ndarray:  # [C, max_samples + 1]
    """Knapsack-RL's value of n samples at p̂: Pr[non-zero gradient]·InfoGain =
    (1 - p̂^n - (1-p̂)^n)·p̂(1-p̂)² (arXiv 2509.25849, §3). 0 at p̂ ∈ {0, 1} and for n ≤ 1."""
    p = np.asarray(p, np.float64)[:, None]
    n = np.arange(max_samples + 1, dtype=np.float64)[None, :]
    gate = np.maximum(1.0 - p**n - (1.0 - p) ** n, 0.0)
    gate[:, :2] = 0.0
    return gate * p * (1.0 - p) ** 2


def knapsack_allocation(
    values: np.ndarray,  # [C, N + 1] value of n = 0..N samples for each of C prompts
    *,
    budget: int,
    min_samples: np.ndarray | int,  # [C] or scalar: the least a chosen prompt gets (>= 1)
    max_samples: np.ndarray | int,  # [C] or scalar: the most (<= N)
    required: np.ndarray | None = None,  # [C] bool: must get >= min_samples (never 0)
) -> np.ndarray:  # [C] int64, Σ = budget, n_i ∈ {0} ∪ [min_i, max_i]
    """max Σ_i V_i(n_i) subject to Σ_i n_i = budget exactly, n_i ∈ {0} ∪ [min_i, max_i] (and
    n_i ≥ min_i where `required`), by dynamic programming over the spent budget: O(C·budget·N).

    Ties go to the earlier prompts and to fewer samples, so the result is deterministic. Raises
    ValueError when no allocation spends the budget exactly (budget > Σ max_i, or below
    Σ_required min_i).
    """
    values = np.asarray(values, np.float64)
    if values.ndim != 2:
        raise ValueError(f"values must be [C, N + 1] (got shape {values.shape})")
    count, width = values.shape
    if budget < 0 or int(budget) != budget:
        raise ValueError(f"budget must be a non-negative integer (got {budget})")
    lo = np.broadcast_to(np.asarray(min_samples, np.int64), (count,))
    hi = np.broadcast_to(np.asarray(max_samples, np.int64), (count,))
    must = np.zeros(count, bool) if required is None else np.asarray(required, bool)
    if np.any(lo < 1) or np.any(lo > hi) or np.any(hi > width - 1):
        raise ValueError(
            f"need 1 <= min_samples <= max_samples <= {width - 1} (the value curves' length)"
        )
    if budget > int(hi.sum()) or budget < int(lo[must].sum()):
        raise ValueError(
            f"budget={budget} cannot be spent exactly on {count} prompts: it must lie in "
            f"[{int(lo[must].sum())}, {int(hi.sum())}] (required minimums, all maximums); add "
            "candidates or lower the budget"
        )
    none = -np.inf
    best = np.full(budget + 1, none)
    best[0] = 0.0
    choice = np.zeros((count, budget + 1), dtype=np.int64)
    for i in range(count):
        options = ([] if must[i] else [0]) + list(range(int(lo[i]), int(hi[i]) + 1))
        new = np.full(budget + 1, none)
        pick = np.zeros(budget + 1, dtype=np.int64)
        for n in options:  # ascending: a strict improvement is needed to take more samples
            if n > budget:
                break
            candidate = np.full(budget + 1, none)
            candidate[n:] = best[: budget + 1 - n] + values[i, n]
            better = candidate > new
            new[better] = candidate[better]
            pick[better] = n
        best, choice[i] = new, pick
    if not np.isfinite(best[budget]):
        raise ValueError(f"no allocation spends budget={budget} exactly within the bounds")
    counts = np.zeros(count, dtype=np.int64)
    left = budget
    for i in range(count - 1, -1, -1):
        counts[i] = choice[i, left]
        left -= int(counts[i])
    if left != 0:  # cannot happen when best[budget] is finite: fail loudly if it does
        raise RuntimeError(f"knapsack backtracking left {left} of the budget unspent")
    return counts


def greso_skip_probability(streak: int, exploration: float) -> float:
    """GRESO's pre-rollout skip probability 1 - max(q^z, 0.01) for a prompt whose last z
    rollouts were all zero-variance of one kind, q that kind's exploration probability
    (`presampling_selector.py`, "all_probabilistic"); 0 when z = 0 (no streak, or no history)."""
    if streak < 0:
        raise ValueError(f"streak must be >= 0 (got {streak})")
    if not 0.0 <= exploration <= 1.0:
        raise ValueError(f"exploration probability must be in [0, 1] (got {exploration})")
    if streak == 0:
        return 0.0
    return 1.0 - max(exploration**streak, GRESO_MIN_ROLLOUT_PROBABILITY)


def greso_adapt(
    exploration: float,
    *,
    observed_share: float,
    target_share: float,
    step_size: float,
    low: float,
    high: float,
) -> float:
    """GRESO's update of an exploration probability after a step (`ray_trainer.py`): lower it
    by `step_size` (skip more) when the batch's share of zero-variance groups of its kind is at
    or above the target, raise it otherwise; clamp to [low, high]."""
    moved = exploration - step_size if observed_share >= target_share else exploration + step_size
    return float(min(max(moved, low), high))


def decay_factor(age_steps: float, *, half_life_steps: float | None) -> float:
    """The weight of an outcome observed `age_steps` optimizer steps ago: 2^(-age/half-life);
    1 with no half-life (every outcome counts fully)."""
    if age_steps < 0:
        raise ValueError(f"age_steps must be >= 0 (got {age_steps})")
    if half_life_steps is None:
        return 1.0
    if not half_life_steps > 0:
        raise ValueError(f"half_life_steps must be > 0 or None (got {half_life_steps})")
    return 2.0 ** (-age_steps / half_life_steps)


def pooled_beta_prior(
    *,
    weight: float,  # Σ_v d_v over the pool's visits (d_v: a visit's weight)
    mean_sum: float,  # Σ_v d_v·p̃_v
    square_sum: float,  # Σ_v d_v·p̃_v²
    noise_sum: float,  # Σ_v d_v·p̃_v(1-p̃_v)/(n_v - 1), visits of n_v ≥ 2 samples
    max_concentration: float,
) -> tuple[float, float]:
    """Empirical-Bayes Beta(a, b) for the pass rates of a pool of prompts, by the method of moments
    on their visits' pool rates p̃_v = k_v/n_v with the binomial noise removed:

        m = (Σd·p̃ + ½) / (Σd + 1)        (the pool mean, kept off 0 and 1 by half a visit each)
        Var(p) = Σd·p̃²/Σd - (Σd·p̃/Σd)² - Σd·p̃(1-p̃)/(n-1) / Σd
        a + b = κ = m(1-m)/Var(p) - 1, clipped to [1e-3, max_concentration];  a = κm,  b = κ(1-m)

    (E[p̃(1-p̃)] = p(1-p)(1 - 1/n), so p̃(1-p̃)/(n-1) is unbiased for the noise p(1-p)/n.) κ < 1 is
    a U-shaped prior: a pool whose prompts are mostly solved or mostly hopeless; a pool with no
    spread beyond the noise gets the most confident prior, `max_concentration`."""
    if not weight > 0:
        raise ValueError("pooled_beta_prior needs visits with a positive total weight")
    if not max_concentration > 0:
        raise ValueError(f"max_concentration must be > 0 (got {max_concentration})")
    raw_mean = mean_sum / weight
    variance = square_sum / weight - raw_mean**2 - noise_sum / weight
    mean = (mean_sum + 0.5) / (weight + 1.0)
    spread = mean * (1.0 - mean)
    concentration = max_concentration if variance <= 0 else spread / variance - 1.0
    concentration = float(min(max(concentration, 1e-3), max_concentration))
    return concentration * mean, concentration * (1.0 - mean)
