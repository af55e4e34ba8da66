"""Gate statistics: when does a prompt's group carry signal, and what does it cost to get it.

* Gate (seed 000 §4.1): a uniform group of G has mixed outcomes with probability
  u_G(p) = 1 - (1-p)^G - p^G; collapsed groups give zero gradient whatever the weight.
* Advantage energy (seed 000 §4.1, §"Unifying advantage energy"): E = w(p̂)·(1/G)Σ(r_i - p̂)²,
  = w(p̂)·p̂(1-p̂) for binary rewards; 0 iff the group collapsed.
* Samples to resolution of the sequential stopping rules (`adarl.algo.stopping`), exact with
  the per-prompt cap, by dynamic programming over the counts (N, N⁺).

Sampling model: i.i.d. Bernoulli(p) labels. Drawing one sample at a time, or chunks sized by
`min_additional_samples_*` (which never overshoot the stopping time), give the same stopping
time; `round_size` models the released Reinforce-Ada code's fixed rounds (8 samples per round)
whose last round overshoots.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from adarl.algo.objectives import clip_pass_rate, get_objective
from adarl.algo.stopping import StoppingRule


def mixed_group_probability(p: np.ndarray | float, *, group_size: int) -> np.ndarray:
    """u_G(p) = 1 - (1-p)^G - p^G (seed 000 §4.1).  p: [...] -> [...] float64.

    Maximised at p = 1/2; ≈ G·p for small p. G = 1 gives 0 (a single sample never mixes).
    """
    if group_size < 1:
        raise ValueError(f"group_size must be >= 1 (got {group_size})")
    p = np.asarray(p, dtype=np.float64)
    return np.maximum(1.0 - (1.0 - p) ** group_size - p**group_size, 0.0)  # no -1e-17


def advantage_energy(
    rewards: np.ndarray,  # [..., G] rewards of groups of size G
    *,
    objective: str = "linear",
    alpha: float = 0.5,
    clip_delta: float = 1e-3,
) -> np.ndarray:  # [...] float64
    """E = w(p̂)·(1/G)Σ_i (r_i - p̂)², p̂ the group mean (seed 000 §4.1).

    For binary rewards E = w(p̂)·p̂(1-p̂). w is evaluated at p̂ clipped to [δ, 1-δ]; collapsed
    groups have zero spread and so E = 0 for any w.
    """
    r = np.asarray(rewards, dtype=np.float64)
    if r.ndim == 0 or r.shape[-1] == 0:
        raise ValueError(f"rewards must have a non-empty last axis [..., G] (got {r.shape})")
    p_hat = r.mean(axis=-1)
    spread = ((r - p_hat[..., None]) ** 2).mean(axis=-1)
    weight = get_objective(objective, alpha=alpha).w(clip_pass_rate(p_hat, delta=clip_delta))
    return np.asarray(weight) * spread


@dataclass(frozen=True)
class TerminalCounts:
    """Law of a prompt's pool when its stopping rule stops.

    probability[N, N⁺] = Pr[the pool stops with N samples, N⁺ positive]; `resolved[N, N⁺]` says
    whether the exit condition held there (else the cap was hit). Shapes [cap + 1, cap + 1].
    """

    probability: np.ndarray  # [M + 1, M + 1] float64
    resolved: np.ndarray  # [M + 1, M + 1] bool

    def expected_samples(self) -> float:
        return float((self.probability.sum(axis=1) * np.arange(self.probability.shape[0])).sum())

    def unresolved_probability(self) -> float:
        return float(self.probability[~self.resolved].sum())


def _validate_rule(p: float, k_pos: int, k_neg: int, max_samples: int, round_size: int) -> None:
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"pass rate p must be in [0, 1] (got {p})")
    if k_pos < 0 or k_neg < 0 or k_pos + k_neg < 1:
        raise ValueError(f"need k_pos, k_neg >= 0 and k_pos + k_neg >= 1 (got {k_pos}, {k_neg})")
    if max_samples < k_pos + k_neg:
        raise ValueError(f"max_samples={max_samples} < k_pos + k_neg: the rule could never resolve")
    if round_size < 1:
        raise ValueError(f"round_size must be >= 1 (got {round_size})")


def _stopping_law(
    p: float,
    *,
    k_pos: int,
    k_neg: int,
    max_samples: int,
    round_size: int,
    first_positive: bool,
    futility: bool,
) -> tuple[np.ndarray, np.ndarray]:
    """(probability [M+1, M+1], resolved [M+1, M+1]); with `first_positive` the mass is that of
    Pr[stop at (N, N⁺) and the first sample was positive]. One sample at a time (round_size 1)
    the rule is `StoppingRule` (exit, cap, futility stop of mixed pools if `futility`); in
    rounds it is checked after each round with no futility stop (the reference code)."""
    cap = max_samples
    rule = StoppingRule(
        k_pos=k_pos, k_neg=k_neg, max_samples=cap, futility=futility and round_size == 1
    )
    stop, resolved = rule.stop_grid()
    probability = np.zeros((cap + 1, cap + 1))
    active = np.zeros(cap + 1)  # mass still sampling, by N⁺, after n draws
    n = 0
    active[0] = 1.0
    if first_positive:
        active = np.zeros(cap + 1)
        active[1] = p
        n = 1
    step = np.array([1.0 - p, p])
    while True:
        if n > 0 and (n % round_size == 0 or n == cap):  # the rule is checked after each round
            stop_here = stop[n]
            probability[n] += np.where(stop_here, active, 0.0)
            active = np.where(stop_here, 0.0, active)
        if n >= cap or not active.any():
            break
        active = np.convolve(active, step)[: cap + 1]
        n += 1
    return probability, resolved


def terminal_counts(
    p: float,
    *,
    k_pos: int,
    k_neg: int,
    max_samples: int,
    round_size: int = 1,
    futility: bool = True,
) -> TerminalCounts:
    """Exact law of (N, N⁺) at stopping for "sample until N⁺ ≥ k⁺ and N⁻ ≥ k⁻, at most the cap".

    Seq-Pos(k) is k_pos=k, k_neg=0; Seq-Balance is (k⁺, k⁻). One sample at a time the rule is
    `adarl.algo.stopping.StoppingRule` (with its futility stop of mixed pools unless
    `futility=False`); in rounds of `round_size` (the last truncated to the cap) it is checked
    after each round. Dynamic programming over draws: O(cap²) numpy work.
    """
    _validate_rule(p, k_pos, k_neg, max_samples, round_size)
    probability, resolved = _stopping_law(
        p,
        k_pos=k_pos,
        k_neg=k_neg,
        max_samples=max_samples,
        round_size=round_size,
        first_positive=False,
        futility=futility,
    )
    return TerminalCounts(probability=probability, resolved=resolved)


@lru_cache(maxsize=64)
def _rao_blackwell_table(
    k_pos: int, k_neg: int, max_samples: int, round_size: int, futility: bool
) -> np.ndarray:
    # Pr[first draw positive | stop at (N, N⁺)] does not depend on p (both laws are
    # p^N⁺(1-p)^(N-N⁺) times a path count); p = 1/2 keeps every reachable cell well away from 0.
    kwargs = {
        "k_pos": k_pos,
        "k_neg": k_neg,
        "max_samples": max_samples,
        "round_size": round_size,
        "futility": futility,
    }
    total, _ = _stopping_law(0.5, first_positive=False, **kwargs)
    first, _ = _stopping_law(0.5, first_positive=True, **kwargs)
    table = np.full_like(total, np.nan)
    reachable = total > 0
    table[reachable] = first[reachable] / total[reachable]
    table.setflags(write=False)
    return table


def rao_blackwell_pass_rate(
    *,
    positives: int,
    total: int,
    k_pos: int,
    k_neg: int,
    max_samples: int,
    round_size: int = 1,
    futility: bool = True,
) -> float:
    """Unbiased pass-rate estimate of a pool stopped by the rule: p̂ = Pr[r₁ = 1 | N, N⁺].

    The naive N⁺/N is biased under a stopping rule (MATH.md §Stopping rules; for Seq-Balance it
    is pulled towards k⁺/(k⁺+k⁻)). Rao–Blackwellising the first draw's label on the sufficient
    statistic (N, N⁺) gives E[p̂] = E[r₁] = p exactly, for any rule, round size and cap
    (unresolved pools included). For Seq-Pos(k) drawn one at a time it is (k-1)/(N-1).
    """
    _validate_rule(0.5, k_pos, k_neg, max_samples, round_size)
    if not 0 <= positives <= total <= max_samples:
        raise ValueError(
            f"need 0 <= positives <= total <= max_samples (got {positives}, {total}, {max_samples})"
        )
    value = _rao_blackwell_table(k_pos, k_neg, max_samples, round_size, futility)[total, positives]
    if np.isnan(value):
        raise ValueError(
            f"(total={total}, positives={positives}) is not a stopping point of the rule "
            f"(k_pos={k_pos}, k_neg={k_neg}, max_samples={max_samples}, round_size={round_size})"
        )
    return float(value)


def expected_samples_seq_pos(p: float, *, k: int, max_samples: int) -> float:
    """E[min(T, cap)] for T = trial of the k-th success: Σ_{m<cap} Pr[Bin(m, p) < k].

    Uncapped: k/p (negative binomial; MATH.md §Stopping rules). Sequential sampling.
    """
    return terminal_counts(p, k_pos=k, k_neg=0, max_samples=max_samples).expected_samples()


def expected_samples_seq_balance(p: float, *, k_pos: int, k_neg: int, max_samples: int) -> float:
    """E[min(T, cap)] for T = first time with ≥ k⁺ positives and ≥ k⁻ negatives (exact DP).

    Uncapped it grows like 1/(p(1-p)) (MATH.md §Stopping rules). Sequential sampling.
    """
    counts = terminal_counts(p, k_pos=k_pos, k_neg=k_neg, max_samples=max_samples)
    return counts.expected_samples()


def unresolved_probability_seq_pos(p: float, *, k: int, max_samples: int) -> float:
    """Pr[fewer than k positives in `max_samples` draws] = Pr[Bin(cap, p) < k]."""
    return terminal_counts(p, k_pos=k, k_neg=0, max_samples=max_samples).unresolved_probability()


def unresolved_probability_seq_balance(
    p: float, *, k_pos: int, k_neg: int, max_samples: int
) -> float:
    """Pr[the cap is reached with N⁺ < k⁺ or N⁻ < k⁻] = Pr[Bin(cap, p) < k⁺ or > cap - k⁻]."""
    counts = terminal_counts(p, k_pos=k_pos, k_neg=k_neg, max_samples=max_samples)
    return counts.unresolved_probability()
