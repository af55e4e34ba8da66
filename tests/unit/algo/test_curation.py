"""adarl.algo.curation: Beta moments, the value of n samples, the exact knapsack, GRESO's rule and
the pooled prior, each against an independent computation (brute force or Monte Carlo)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from adarl.algo.curation import (
    beta_moment,
    declared_value,
    greso_adapt,
    greso_skip_probability,
    knapsack_allocation,
    knapsack_rl_value,
    pooled_beta_prior,
    zero_variance_probability,
)


def test_beta_moment_and_zero_variance_match_monte_carlo() -> None:
    rng = np.random.default_rng(0)
    a, b = 0.7, 2.3
    p = rng.beta(a, b, size=400_000)
    for x, y in ((1, 0), (2, 3), (0.5, 0.5)):
        mc = p**x * (1 - p) ** y
        se = mc.std() / np.sqrt(p.size)
        assert abs(float(beta_moment(a, b, x=x, y=y)) - mc.mean()) < 4 * se
    zv = p**5 + (1 - p) ** 5
    assert abs(float(zero_variance_probability(a, b, samples=5)) - zv.mean()) < 4 * (
        zv.std() / np.sqrt(p.size)
    )


@pytest.mark.parametrize("objective", ["linear", "log", "arcsin", "power"])
def test_declared_value_is_the_expected_captured_mass(objective: str) -> None:
    """V(n) = E[w(p)·p(1-p)·(1 - p^n - (1-p)^n)] by Monte Carlo, w = f' of the objective."""
    rng = np.random.default_rng(1)
    a, b, alpha = 1.5, 0.8, 0.5
    p = rng.beta(a, b, size=400_000)
    w = {
        "linear": np.ones_like(p),
        "log": 1 / p,
        "arcsin": 1 / np.sqrt(p * (1 - p)),
        "power": alpha * p ** (alpha - 1),
    }[objective]
    value = declared_value(np.array([a]), np.array([b]), max_samples=8, objective=objective)[0]
    assert value[0] == value[1] == 0.0
    for n in (2, 4, 8):
        mc = w * p * (1 - p) * (1 - p**n - (1 - p) ** n)
        assert abs(value[n] - mc.mean()) < 4 * mc.std() / np.sqrt(p.size)
    assert np.all(np.diff(value[1:]) >= 0)  # more samples never capture less


def _brute_force(values: np.ndarray, budget: int, lo: int, hi: int, must: np.ndarray) -> float:
    best = -np.inf
    options = [([] if m else [0]) + list(range(lo, hi + 1)) for m in must]
    for combo in itertools.product(*options):
        if sum(combo) == budget:
            best = max(best, sum(values[i, n] for i, n in enumerate(combo)))
    return best


def test_knapsack_allocation_is_optimal_and_spends_the_budget_exactly() -> None:
    rng = np.random.default_rng(2)
    for _ in range(40):
        count, width = 4, 7
        values = np.cumsum(rng.random((count, width)), axis=1) * rng.random((count, 1))
        values[:, 0] = 0.0
        budget = int(rng.integers(2, 18))
        must = rng.random(count) < 0.3
        if budget < 2 * must.sum() or budget > 6 * count:
            continue
        counts = knapsack_allocation(
            values, budget=budget, min_samples=2, max_samples=6, required=must
        )
        assert counts.sum() == budget
        assert all(n == 0 or 2 <= n <= 6 for n in counts)
        assert all(counts[must] >= 2)
        got = sum(values[i, n] for i, n in enumerate(counts))
        assert got == pytest.approx(_brute_force(values, budget, 2, 6, must), abs=1e-12)


def test_knapsack_allocation_refuses_a_budget_it_cannot_spend() -> None:
    values = np.zeros((2, 5))
    with pytest.raises(ValueError, match="cannot be spent exactly"):
        knapsack_allocation(values, budget=9, min_samples=1, max_samples=4)


def test_knapsack_rl_value_is_the_papers_formula() -> None:
    p = np.array([0.0, 0.3, 1.0])
    value = knapsack_rl_value(p, max_samples=8)
    n = 8
    assert value[1, n] == pytest.approx((1 - 0.3**n - 0.7**n) * 0.3 * 0.7**2)
    assert np.all(value[[0, 2]] == 0.0) and np.all(value[:, :2] == 0.0)


def test_greso_skip_rule_and_adaptation() -> None:
    assert greso_skip_probability(0, 0.5) == 0.0  # no streak: always drawn
    assert greso_skip_probability(2, 0.5) == pytest.approx(0.75)
    assert greso_skip_probability(20, 0.5) == pytest.approx(0.99)  # the 1% floor
    assert greso_adapt(
        0.5, observed_share=0.3, target_share=0.25, step_size=0.01, low=0.05, high=0.95
    ) == pytest.approx(0.49)
    assert greso_adapt(
        0.5, observed_share=0.1, target_share=0.25, step_size=0.01, low=0.05, high=0.95
    ) == pytest.approx(0.51)
    assert (
        greso_adapt(
            0.05, observed_share=0.9, target_share=0.25, step_size=0.01, low=0.05, high=0.95
        )
        == 0.05
    )


def test_pooled_prior_recovers_the_pools_beta() -> None:
    """Method of moments with the binomial noise removed: visits of n = 4 samples from prompts
    whose pass rates are Beta(0.6, 1.8) give back about those parameters."""
    rng = np.random.default_rng(3)
    p = rng.beta(0.6, 1.8, size=200_000)
    k = rng.binomial(4, p)
    rate = k / 4
    a, b = pooled_beta_prior(
        weight=float(p.size),
        mean_sum=float(rate.sum()),
        square_sum=float((rate**2).sum()),
        noise_sum=float((rate * (1 - rate) / 3).sum()),
        max_concentration=50.0,
    )
    assert a == pytest.approx(0.6, rel=0.05)
    assert b == pytest.approx(1.8, rel=0.05)
