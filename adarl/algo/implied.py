"""What does a configuration optimise? The implied weight w(p) with E[ĝ] = w(p)·∇p.

For binary rewards every adarl estimator gives each kept sample an advantage that depends only
on its label and on counts (pool size N, pool positives N⁺, kept split n⁺/n⁻), never on the
sampled response itself. Kept positives are then conditionally i.i.d. draws of π(·|r=1), so with
g± = E[∇log π | r = 1/0], p g⁺ + (1-p) g⁻ = 0 and ∇p = p(1-p)(g⁺ - g⁻) (MATH.md §Notation):

    E[ĝ] = E[ n⁺(1-p)A⁺ - n⁻ p A⁻ ] / (n p (1-p)) · ∇p,      ĝ = (1/n) Σ_kept A_j ∇log π_j.

`implied_weight` evaluates that expectation exactly, over Bin(n, p) for uniform groups and over
the exact stopping law (`adarl.algo.gate.terminal_counts`) for sequential sampling, by calling
the very advantage/selection functions that training uses (each uniform estimator through its
registry entry, `adarl.algo.advantages`, which also declares its closed form). Closed forms
(tested against it):

    rloo, reinforce_baseline, raft("group")   w = 1                     (linear)
    dr_grpo                                   w = (n-1)/n
    raft("positives")                         w = (1-(1-p)^n)/p         (log behind a gate)
    maxrl                                     w = (1-(1-p)^(n-1))/p     (log truncated at n-1)
    grpo                                      w = E[K(n-K)/(n²(σ_K+ε))]/(p(1-p)) → 1/√(p(1-p))
    balanced n/2 + n/2, `none`, p known       w = 1/(2p(1-p)) - 1,  f = ½·logit p - p
    `selection` for f, p known                w = f'(p)·Pr[kept group has both labels]
    `selection` for log, unbiased p̂            the same: h = 1 - p is linear, E[1 - p̂] = 1 - p
    `selection` for log, unbiased p̂, Seq rules  w·p = 1 - (1-p)^(cap-1) (`log_gate`), any chunks
    pkpo (n ≥ k, any baseline)                w = k(1-p)^(k-1)          (pass@k, exactly)
    passk_training                            w = E[K(1-R̄_K)/(σ_K+ε)]/(n p(1-p)); without the
                                                σ, (1 - k/n)(1-p)^(k-1) (`advantages.
                                                passk_training_weight`)
    grpo × (1 - K/n)^γ (F-GRPO)               w = E[(1-K/n)^γ K(n-K)/(n²(σ_K+ε))]/(p(1-p))
                                                (`advantages.focal_grpo_weight`)
    w_reinforce (λ on positives, -1 else)     w = 1 + λ                 (linear)

With the pool estimate p̃ = N⁺/N there is no closed form; the numeric value is exact.
"""

from __future__ import annotations

from math import comb

import numpy as np

from adarl.algo.advantages import (
    UNIFORM_ESTIMATORS,
    AdvantageOptions,
    GroupInputs,
    get_uniform_estimator,
    group_relative_estimators,
)
from adarl.algo.drawing import DrawRule, draw_law
from adarl.algo.gate import rao_blackwell_pass_rate, terminal_counts
from adarl.algo.selection import Correction, UnresolvedPolicy, downsample_and_correct
from adarl.algo.stopping import StoppingRule

PASS_RATE_ESTIMATES = ("pool", "known", "unbiased")
SEQUENTIAL = ("seq_pos", "seq_balance", "fixed_pool")

_NEGLIGIBLE = 1e-300  # cells of the stopping law below this mass are skipped


def balanced_none_weight(p: np.ndarray | float) -> np.ndarray:
    """Closed form for n/2 positives + n/2 negatives with A = r - p: w = 1/(2p(1-p)) - 1.

    Derivation: E[ĝ] = ½[(1-p)g⁺ - p g⁻] = ½[(1-p) + p²/(1-p)] g⁺ = ∇p·[(1-p)² + p²]/(2p(1-p)).
    """
    p = np.asarray(p, dtype=np.float64)
    return 1.0 / (2.0 * p * (1.0 - p)) - 1.0


def balanced_none_objective(p: np.ndarray | float) -> np.ndarray:
    """f(p) = ½·log(p/(1-p)) - p, whose derivative is `balanced_none_weight`."""
    p = np.asarray(p, dtype=np.float64)
    return 0.5 * np.log(p / (1.0 - p)) - p


def _weight_from_cells(
    p: float, n: int, cells: list[tuple[float, int, int, float, float]]
) -> float:
    """Σ prob·[n⁺(1-p)A⁺ - n⁻ p A⁻] / (n p (1-p)) over (prob, n⁺, n⁻, A⁺, A⁻) cells."""
    total = 0.0
    for prob, n_pos, n_neg, a_pos, a_neg in cells:
        total += prob * (n_pos * (1.0 - p) * a_pos - n_neg * p * a_neg)
    return total / (n * p * (1.0 - p))


def _split(labels: np.ndarray, advantages: np.ndarray) -> tuple[int, int, float, float]:
    """(n⁺, n⁻, A⁺, A⁻) of a kept group; all same-label samples share one advantage."""
    n_pos = int(labels.sum())
    n_neg = labels.size - n_pos
    a_pos = float(advantages[labels][0]) if n_pos else 0.0
    a_neg = float(advantages[~labels][0]) if n_neg else 0.0
    spread_pos = float(np.abs(advantages[labels] - a_pos).max(initial=0.0))
    spread_neg = float(np.abs(advantages[~labels] - a_neg).max(initial=0.0))
    if max(spread_pos, spread_neg) > 1e-12 * (1.0 + abs(a_pos) + abs(a_neg)):
        raise RuntimeError("samples of one label got different advantages: counts model violated")
    return n_pos, n_neg, a_pos, a_neg


def _uniform_cells(
    p: float,
    *,
    estimator: str,
    group_size: int,
    pass_rate_estimate: str,
    baseline: float | None,
    objective_k: int,
    options: AdvantageOptions,
) -> list[tuple[float, int, int, float, float]]:
    """Cells of a uniform group of n, K ~ Bin(n, p): the registered estimator on each outcome
    (a prompt's prior pass rate, and Ada-Est's r̄ when p is "known", are the true p)."""
    entry = get_uniform_estimator(estimator)
    n = group_size
    cells = []
    for k in range(n + 1):
        prob = comb(n, k) * p**k * (1.0 - p) ** (n - k)
        rewards = np.concatenate([np.ones(k), np.zeros(n - k)])
        group = GroupInputs(
            rewards=rewards,
            k=objective_k,
            prior_pass_rate=p if baseline is None else baseline,
            true_pass_rate=p if pass_rate_estimate == "known" else None,
            options=options,
        )
        cells.append((prob, *_split(rewards > 0.5, entry.advantages(group))))
    return cells


def _sequential_cells(
    p: float,
    *,
    estimator: str,
    group_size: int,
    correction: Correction | str,
    objective: str,
    alpha: float,
    objective_k: int,
    pass_rate_estimate: str,
    k: int | None,
    k_pos: int | None,
    k_neg: int | None,
    max_samples: int | None,
    round_size: int,
    unresolved_policy: UnresolvedPolicy | str,
    clip_delta: float,
    max_overshoot_fraction: float | None,
    initial_samples: int | None,
    history: tuple[float, float],
    whole_pool: bool,
) -> list[tuple[float, int, int, float, float]]:
    if max_samples is None:
        raise ValueError(f"estimator={estimator!r} needs max_samples (the per-prompt cap)")
    if estimator == "seq_pos":
        if k is None:
            raise ValueError("estimator='seq_pos' needs k (positives to stop at)")
        rule = {"k_pos": k, "k_neg": 0, "max_samples": max_samples, "round_size": round_size}
    elif estimator == "seq_balance":
        kp = group_size // 2 if k_pos is None else k_pos
        kn = group_size - group_size // 2 if k_neg is None else k_neg
        rule = {"k_pos": kp, "k_neg": kn, "max_samples": max_samples, "round_size": round_size}
    selection: dict[str, object] = {
        "group_size": group_size,
        "whole_pool": whole_pool,
        "unresolved_policy": unresolved_policy,
        "correction": correction,
        "objective": objective,
        "alpha": alpha,
        "objective_k": objective_k,
        "clip_delta": clip_delta,
    }
    if estimator in ("seq_pos", "seq_balance") and max_overshoot_fraction is not None:
        return _chunked_cells(
            p,
            rule=StoppingRule(
                k_pos=rule["k_pos"], k_neg=rule["k_neg"], max_samples=rule["max_samples"]
            ),
            selection=selection,
            pass_rate_estimate=pass_rate_estimate,
            max_overshoot_fraction=max_overshoot_fraction,
            initial_samples=initial_samples,
            history=history,
        )
    if estimator in ("seq_pos", "seq_balance"):
        law = terminal_counts(p, **rule, futility=round_size == 1)
        probability, resolved = law.probability, law.resolved
    else:  # fixed_pool: N = max_samples uniform samples, always "resolved"
        size = max_samples
        probability = np.zeros((size + 1, size + 1))
        probability[size] = [
            comb(size, j) * p**j * (1.0 - p) ** (size - j) for j in range(size + 1)
        ]
        resolved = np.ones_like(probability, dtype=bool)
    cells = []
    for n_total, n_positive in zip(*np.nonzero(probability > _NEGLIGIBLE), strict=True):
        pool = np.concatenate([np.ones(n_positive), np.zeros(n_total - n_positive)])
        if pass_rate_estimate == "known":
            pass_rate: float | None = p
        elif pass_rate_estimate == "unbiased" and estimator != "fixed_pool":
            pass_rate = rao_blackwell_pass_rate(
                positives=int(n_positive), total=int(n_total), **rule, futility=round_size == 1
            )
        else:  # the pool mean; for a fixed-size pool it is already unbiased
            pass_rate = None
        cells.append(
            _pool_cell(
                float(probability[n_total, n_positive]),
                pool,
                resolved=bool(resolved[n_total, n_positive]),
                pass_rate=pass_rate,
                selection=selection,
            )
        )
    return cells


def _pool_cell(
    probability: float,
    pool: np.ndarray,
    *,
    resolved: bool,
    pass_rate: float | None,
    selection: dict[str, object],
) -> tuple[float, int, int, float, float]:
    """(prob, n⁺, n⁻, A⁺, A⁻) of one pool: the very downsample and correction training uses.

    `selection["whole_pool"]`: the pool of N is the group (adarl.allocator.group_builder with
    group_size None): advantages for a group of N, scaled by n/N (n = `group_size`)."""
    options = dict(selection)
    whole_pool = bool(options.pop("whole_pool", False))
    n = int(options["group_size"])  # type: ignore[call-overload]
    if whole_pool:
        options["group_size"] = pool.size
    kept, adv = downsample_and_correct(
        pool,
        resolved=resolved,
        pass_rate=pass_rate,
        order="earliest",  # any within-label order gives the same counts
        **options,  # type: ignore[arg-type]
    )
    if whole_pool:
        adv = adv * (n / pool.size)
    return (probability, *_split(pool[kept] > 0.5, adv))


def _chunked_cells(
    p: float,
    *,
    rule: StoppingRule,
    selection: dict[str, object],
    pass_rate_estimate: str,
    max_overshoot_fraction: float,
    initial_samples: int | None,
    history: tuple[float, float],
) -> list[tuple[float, int, int, float, float]]:
    """Cells of a streaming sampler's pools: the exact law of its chunked draws (`draw_law`)."""
    draw = DrawRule(
        rule=rule, max_overshoot_fraction=max_overshoot_fraction, initial_samples=initial_samples
    )
    cells = []
    for cell in draw_law(p, draw, history=history):
        if pass_rate_estimate == "known":
            pass_rate: float | None = p
        elif pass_rate_estimate == "unbiased":  # the one-at-a-time prefix (drawing.py)
            pass_rate = rao_blackwell_pass_rate(
                positives=cell.stop_positives,
                total=cell.stop_index,
                k_pos=rule.k_pos,
                k_neg=rule.k_neg,
                max_samples=rule.max_samples,
            )
        else:
            pass_rate = None
        pool = np.concatenate([np.ones(cell.positives), np.zeros(cell.total - cell.positives)])
        cells.append(
            _pool_cell(
                cell.probability,
                pool,
                resolved=cell.resolved,
                pass_rate=pass_rate,
                selection=selection,
            )
        )
    return cells


def log_gate(p: np.ndarray | float, *, max_samples: int) -> np.ndarray:
    """1 - (1-p)^(cap-1): the gate of the log objective under Seq-Pos/Seq-Balance with the
    selection correction and an unbiased pass-rate estimate (any draw rule, unresolved pools
    kept). Derivation (docs/algorithms.md): with h(p̂) = 1 - p̂, E[ĝ] = E[(1-p̂)·1{mixed}]/(p(1-p))
    ∇p; E[1 - p̂] = 1 - p, and the pool fails to mix with h ≠ 0 only when all cap samples are
    negative (p̂ = 0): E[(1-p̂)1{mixed}] = (1-p) - (1-p)^cap."""
    p = np.asarray(p, dtype=np.float64)
    return 1.0 - (1.0 - p) ** (max_samples - 1)


def logit_gate(p: np.ndarray | float, *, max_samples: int) -> np.ndarray:
    """1 - p^cap - (1-p)^cap: the gate of the logit objective under Seq-Balance with the selection
    correction, unresolved pools kept (any draw rule, any pass-rate estimate). Its correction
    coefficient h = w·p(1-p) is 1, so a pool with both labels gives E[ĝ] = g⁺ - g⁻ = ∇p/(p(1-p))
    whatever the split (docs/algorithms.md §Coverage); Seq-Balance only stops with both labels,
    or at the cap, where a pool is one-label with probability p^cap + (1-p)^cap."""
    p = np.asarray(p, dtype=np.float64)
    return 1.0 - p**max_samples - (1.0 - p) ** max_samples


def implied_weight(
    p: np.ndarray | float,  # [...] true pass rates in (0, 1)
    *,
    estimator: str,
    group_size: int,
    correction: Correction | str = Correction.NONE,
    objective: str = "log",
    alpha: float = 0.5,
    objective_k: int = 8,
    pass_rate_estimate: str = "pool",
    k: int | None = None,
    k_pos: int | None = None,
    k_neg: int | None = None,
    max_samples: int | None = None,
    round_size: int = 1,
    unresolved_policy: UnresolvedPolicy | str = UnresolvedPolicy.KEEP_AVAILABLE,
    clip_delta: float = 1e-3,
    max_overshoot_fraction: float | None = None,
    initial_samples: int | None = None,
    history: tuple[float, float] = (0.0, 0.0),
    whole_pool: bool = False,
    baseline: float | None = None,
    options: AdvantageOptions | None = None,
) -> np.ndarray:  # [...] float64
    """Exact w(p) such that E[(1/n) Σ_kept A_j ∇log π_j] = w(p)·∇p for one prompt.

    estimator: a uniform group of n = `group_size` (a name of `adarl.algo.advantages.
      UNIFORM_ESTIMATORS`, with its parameters in `options`; "reinforce_baseline" with
      `baseline` (None: the true p); "passk_training" and "pkpo" for pass@k with
      k = `objective_k`), or a pool that is
      balanced-downsampled to n and corrected with `correction` ("seq_pos" with `k`,
      "seq_balance" with `k_pos`/`k_neg` (default ⌊n/2⌋ and n-⌊n/2⌋), both capped at
      `max_samples` and sampled in rounds of `round_size`; "fixed_pool": `max_samples` uniform
      samples). Unresolved pools follow `unresolved_policy`.
    pass_rate_estimate: the p̃ that corrections use: "pool" (N⁺/N, the released code), "known"
      (the true p; also Ada-Est's baseline), or "unbiased" (`rao_blackwell_pass_rate` under the
      stopping rule; with chunked draws, on the one-at-a-time prefix:
      `adarl.algo.drawing.unbiased_pass_rate`).
    whole_pool: the sequential estimators train on the whole pool of N instead of a group of
      `group_size` (n): advantages for a group of N scaled by n/N, normaliser n (what the group
      builder does with group_size None).
    max_overshoot_fraction: None = the pool is drawn one sample at a time (or in rounds of
      `round_size`); a number = a streaming sampler's chunked draws (`adarl.algo.drawing.
      DrawRule` with this ε, `initial_samples` and the prompt's `history` pseudo-counts), whose
      exact law (`draw_law`) is then what the expectation runs over.
    objective/alpha/objective_k: the declared f of the `selection` correction (alpha: power's
      exponent; objective_k: pass@k's k, also the k of "passk_training" and "pkpo").
    options: a uniform estimator's parameters (`AdvantageOptions`: RAFT's normalisation, PKPO's
      baseline, the ε of GRPO and Ada-Est, F-GRPO's γ on a group-relative estimator); None: the
      defaults.
    """
    if pass_rate_estimate not in PASS_RATE_ESTIMATES:
        raise ValueError(
            f"unknown pass_rate_estimate {pass_rate_estimate!r}; valid: "
            f"{', '.join(PASS_RATE_ESTIMATES)}"
        )
    uniform = estimator not in SEQUENTIAL
    if uniform and estimator not in UNIFORM_ESTIMATORS:
        valid = ", ".join((*UNIFORM_ESTIMATORS, *SEQUENTIAL))
        raise ValueError(f"unknown estimator {estimator!r}; valid: {valid}")
    if group_size < 1:
        raise ValueError(f"group_size must be >= 1 (got {group_size})")
    options = AdvantageOptions() if options is None else options
    if options.focal_gamma and estimator not in group_relative_estimators():
        raise ValueError(
            f"focal_gamma={options.focal_gamma} (F-GRPO) applies to the group-relative "
            f"estimators {group_relative_estimators()}, not {estimator!r}"
        )
    p_arr = np.asarray(p, dtype=np.float64)
    if np.any(p_arr <= 0) or np.any(p_arr >= 1):
        raise ValueError("implied_weight needs 0 < p < 1 (∇p carries no signal at the ends)")
    out = np.empty(p_arr.shape)
    for index, p_value in np.ndenumerate(p_arr):
        pv = float(p_value)
        if uniform:
            cells = _uniform_cells(
                pv,
                estimator=estimator,
                group_size=group_size,
                pass_rate_estimate=pass_rate_estimate,
                baseline=baseline,
                objective_k=objective_k,
                options=options,
            )
        else:
            cells = _sequential_cells(
                pv,
                estimator=estimator,
                group_size=group_size,
                correction=correction,
                objective=objective,
                alpha=alpha,
                objective_k=objective_k,
                pass_rate_estimate=pass_rate_estimate,
                k=k,
                k_pos=k_pos,
                k_neg=k_neg,
                max_samples=max_samples,
                round_size=round_size,
                unresolved_policy=unresolved_policy,
                clip_delta=clip_delta,
                max_overshoot_fraction=max_overshoot_fraction,
                initial_samples=initial_samples,
                history=history,
                whole_pool=whole_pool,
            )
        out[index] = _weight_from_cells(pv, group_size, cells)
    return out
