"""implied_weight: closed forms, limits and argument errors (MC agreement: test_exact_gradients)."""

from __future__ import annotations

import numpy as np
import pytest

from adarl.algo.gate import mixed_group_probability
from adarl.algo.implied import balanced_none_objective, balanced_none_weight, implied_weight


def test_balanced_none_objective_is_the_antiderivative() -> None:
    p = np.linspace(0.05, 0.95, 19)
    h = 1e-6
    numeric = (balanced_none_objective(p + h) - balanced_none_objective(p - h)) / (2 * h)
    np.testing.assert_allclose(numeric, balanced_none_weight(p), rtol=1e-6)
    # Hand value: p = 1/4 → 1/(2·3/16) - 1 = 5/3 (log p would say 4).
    assert balanced_none_weight(0.25) == pytest.approx(5 / 3)


def test_large_fixed_pool_downsampled_is_balanced() -> None:
    """A big uniform pool almost always holds n/2 of each label, so `none` → 1/(2p(1-p)) - 1."""
    p = np.array([0.3, 0.5, 0.7])
    weight = implied_weight(
        p, estimator="fixed_pool", group_size=4, max_samples=120, pass_rate_estimate="known"
    )
    np.testing.assert_allclose(weight, balanced_none_weight(p), rtol=1e-6)


def test_selection_with_known_p_is_declared_weight_times_gate() -> None:
    """Seq-Pos(1) keeps 1 positive + negatives; an all-positive pool (N = 1) collapses.

    So w = f'(p)·Pr[N ≥ 2] = f'(p)·(1 - p) for a cap large enough to ignore.
    """
    p = np.array([0.2, 0.5, 0.8])
    weight = implied_weight(
        p,
        estimator="seq_pos",
        group_size=4,
        k=1,
        max_samples=200,
        correction="selection",
        objective="arcsin",
        pass_rate_estimate="known",
    )
    np.testing.assert_allclose(weight, (1 - p) / np.sqrt(p * (1 - p)), rtol=1e-9)


def test_uniform_fixed_pool_with_selection_is_gated_like_grpo_groups() -> None:
    # A pool of exactly n (no extra samples): kept = pool; mixed with probability u_n(p).
    p = np.array([0.1, 0.4])
    weight = implied_weight(
        p,
        estimator="fixed_pool",
        group_size=6,
        max_samples=6,
        correction="selection",
        objective="log",
        pass_rate_estimate="known",
    )
    np.testing.assert_allclose(weight, mixed_group_probability(p, group_size=6) / p, rtol=1e-9)


def test_rounds_overshoot_but_selection_with_known_p_stays_unbiased() -> None:
    kw = {
        "estimator": "seq_balance",
        "group_size": 4,
        "correction": "selection",
        "objective": "log",
        "pass_rate_estimate": "known",
        "max_samples": 256,
    }
    p = np.array([0.15, 0.6])
    np.testing.assert_allclose(implied_weight(p, round_size=8, **kw), 1 / p, rtol=1e-6)


def test_errors_name_the_input() -> None:
    with pytest.raises(ValueError, match="unknown estimator 'ppo'"):
        implied_weight(0.5, estimator="ppo", group_size=4)
    with pytest.raises(ValueError, match="0 < p < 1"):
        implied_weight(1.0, estimator="grpo", group_size=4)
    with pytest.raises(ValueError, match="max_samples"):
        implied_weight(0.5, estimator="seq_balance", group_size=4)
    with pytest.raises(ValueError, match="needs k"):
        implied_weight(0.5, estimator="seq_pos", group_size=4, max_samples=8)
