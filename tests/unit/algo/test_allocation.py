"""Allocation rules: exact budgets, bounds, monotonicity and exclusions (property-based)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adarl.algo.allocation import (
    ada_est_allocation,
    ema_pass_rate_update,
    equal_prompt_weight_scale,
    gvm_allocation,
    gvm_weights,
    round_to_budget,
    sqrt_odds_allocation,
    uniform_allocation,
    variance_optimal_allocation,
)

weights_st = st.lists(
    st.one_of(st.just(0.0), st.floats(1e-3, 1e3, allow_nan=False)), min_size=1, max_size=40
)
# Rates on a 1e-3 grid inside the clip range [δ, 1-δ] (δ = 1e-3): distinct rates then give
# distinct weights (equal weights, e.g. rates clipped to the same δ, tie-break by index).
rates_st = st.lists(st.integers(2, 998).map(lambda k: k / 1000), min_size=2, max_size=40)


def assert_monotone(statistic: np.ndarray, counts: np.ndarray, *, increasing: bool) -> None:
    """statistic_i > statistic_j ⇒ counts_i ≥ counts_j (or ≤ when decreasing)."""
    above = statistic[:, None] > statistic[None, :]
    fewer = counts[:, None] < counts[None, :] if increasing else counts[:, None] > counts[None, :]
    bad = np.argwhere(above & fewer)
    assert bad.size == 0, [(statistic[i], statistic[j], counts[i], counts[j]) for i, j in bad]


@st.composite
def allocation_problem(draw):
    weights = np.array(draw(weights_st))
    size = weights.size
    lo = np.array(draw(st.lists(st.integers(0, 4), min_size=size, max_size=size)))
    hi = lo + np.array(draw(st.lists(st.integers(0, 30), min_size=size, max_size=size)))
    active = weights > 0
    budget = draw(st.integers(int(lo[active].sum()), int(hi[active].sum())))
    return weights, lo, hi, budget


@settings(max_examples=150, deadline=None)
@given(allocation_problem())
def test_round_to_budget_meets_budget_and_bounds(problem) -> None:
    weights, lo, hi, budget = problem
    n = round_to_budget(weights, budget=budget, min_samples=lo, max_samples=hi)
    active = weights > 0
    assert n.dtype == np.int64
    assert n.sum() == budget
    assert np.all(n[~active] == 0)  # excluded prompts get nothing
    assert np.all((n[active] >= lo[active]) & (n[active] <= hi[active]))


@settings(max_examples=150, deadline=None)
@given(weights_st, st.integers(0, 5), st.integers(0, 40), st.data())
def test_round_to_budget_is_monotone_and_near_proportional(weights, lo, width, data) -> None:
    w = np.array(weights)
    active = w > 0
    hi = lo + width
    budget = data.draw(st.integers(lo * int(active.sum()), hi * int(active.sum())))
    n = round_to_budget(w, budget=budget, min_samples=lo, max_samples=hi)
    assert_monotone(w[active], n[active], increasing=True)
    if active.any() and lo == 0 and budget > 0 and np.all(budget * w[active] / w.sum() <= hi):
        # No bound binds: each n_i is the floor or the ceiling of its proportional share.
        share = budget * w / w.sum()
        assert np.all(np.abs(n - share) < 1.0 + 1e-9)


def test_round_to_budget_examples_and_errors() -> None:
    # Shares 20·[1, 2, 3.5]/6.5 = [3.08, 6.15, 10.77]: floors [3, 6, 10], +1 to the largest
    # residual (0.77).
    np.testing.assert_array_equal(
        round_to_budget(np.array([0.0, 1.0, 2.0, 3.5]), budget=20, min_samples=0, max_samples=20),
        [0, 3, 6, 11],
    )
    # A binding cap redistributes: [1, 1, 10] with max 8 → [6, 6, 8].
    np.testing.assert_array_equal(
        round_to_budget(np.array([1.0, 1.0, 10.0]), budget=20, min_samples=2, max_samples=8),
        [6, 6, 8],
    )
    with pytest.raises(ValueError, match="infeasible"):
        round_to_budget(np.ones(3), budget=30, min_samples=1, max_samples=8)
    with pytest.raises(ValueError, match="infeasible"):
        round_to_budget(np.ones(3), budget=2, min_samples=1, max_samples=8)
    with pytest.raises(ValueError, match="finite"):
        round_to_budget(np.array([1.0, np.inf]), budget=4, min_samples=0, max_samples=8)
    np.testing.assert_array_equal(
        uniform_allocation(3, budget=10, min_samples=1, max_samples=8), [4, 3, 3]
    )


@settings(max_examples=100, deadline=None)
@given(rates_st)
def test_pass_rate_rules_are_monotone(rates) -> None:
    p = np.array(rates)
    kw = {"budget": 8 * p.size, "min_samples": 2, "max_samples": 32}
    rules = {
        "ada_est": ada_est_allocation(p, eps=1e-2, **kw),
        "sqrt_odds": sqrt_odds_allocation(p, **kw),
        "log": variance_optimal_allocation(p, objective="log", **kw),
    }
    for name, n in rules.items():
        assert n.sum() == kw["budget"], name
        assert np.all((n >= 2) & (n <= 32)), name
        assert_monotone(p, n, increasing=False)  # harder prompts never get fewer samples


def test_arcsin_variance_optimal_is_uniform_and_log_is_sqrt_odds() -> None:
    p = np.array([0.05, 0.2, 0.5, 0.7, 0.95])
    kw = {"budget": 40, "min_samples": 1, "max_samples": 40}
    n = variance_optimal_allocation(p, objective="arcsin", **kw)
    assert n.max() - n.min() == 0  # w√(p(1-p)) ≡ 1
    np.testing.assert_array_equal(
        variance_optimal_allocation(p, objective="log", **kw), sqrt_odds_allocation(p, **kw)
    )


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.floats(0.0, 10.0, allow_nan=False), min_size=2, max_size=30),
    st.floats(0.05, 1.0),
)
def test_gvm_excludes_and_is_monotone_in_grad_norm(norms, rate) -> None:
    g = np.array(norms)
    p = np.full(g.size, rate)
    p[::3] = 0.0  # every third prompt never succeeded: excluded
    active = (g > 0) & (p > 0)
    budget = 4 * int(active.sum())
    n = gvm_allocation(g, p, budget=budget, min_samples=1, max_samples=16)
    assert n.sum() == budget
    assert np.all(n[~active] == 0)
    assert_monotone(g[active], n[active], increasing=True)


def test_gvm_weight_formula() -> None:
    # w = G/√(p + α/p^(β-1)): G = 2, p = 0.25, α = 1e-3, β = 2 → 2/√(0.25 + 0.004).
    np.testing.assert_allclose(
        gvm_weights(np.array([2.0, 0.0, 1.0]), np.array([0.25, 0.5, 0.0])),
        [2 / np.sqrt(0.254), 0.0, 0.0],
    )
    # Decreasing in p above √α (the α term guards near-impossible prompts below it).
    p = np.linspace(0.05, 1.0, 20)
    assert np.all(np.diff(gvm_weights(np.ones(20), p)) < 0)


def test_ema_pass_rate_update() -> None:
    total, positives, p_hat = ema_pass_rate_update(
        np.array([10.0]),
        np.array([5.0]),
        new_total=np.array([8]),
        new_positives=np.array([0]),
        decay=0.5,
        prior_a=1.0,
        prior_b=1.0,
    )
    # N_tot = 0.5·10 + 8 = 13, N_pos = 0.5·5 + 0 = 2.5, p̂ = 3.5/15.
    np.testing.assert_allclose([total[0], positives[0], p_hat[0]], [13.0, 2.5, 3.5 / 15])
    with pytest.raises(ValueError, match="new_positives"):
        ema_pass_rate_update(
            np.zeros(1),
            np.zeros(1),
            new_total=np.array([2]),
            new_positives=np.array([3]),
            decay=0.9,
            prior_a=1.0,
            prior_b=1.0,
        )


def test_equal_prompt_weight_scale() -> None:
    sizes = np.array([4, 8, 12, 0])
    scale = equal_prompt_weight_scale(sizes)
    np.testing.assert_allclose(scale, [2.0, 1.0, 2 / 3, 0.0])
    np.testing.assert_allclose((sizes * scale)[:3], 8.0)  # every prompt's total weight equal
