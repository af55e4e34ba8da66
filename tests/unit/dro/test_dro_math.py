"""R3's numeric core (adarl/algo/dro.py) on hand-made log-prob tables; expected values derived by
hand in the comments."""

from __future__ import annotations

import math

import numpy as np
import pytest

from adarl.algo import dro
from adarl.algo.advantages import grpo_advantages
from adarl.config import dro as dro_config


def test_deviation_is_the_population_std_across_rollouts() -> None:
    # Token 0 is 0.9 under both reasonings (σ = 0); token 1 is 0.5 or 0.1: mean 0.3, |dev| 0.2.
    certainty = np.array([[0.9, 0.5], [0.9, 0.1]])
    np.testing.assert_allclose(dro.token_deviation(certainty), [0.0, 0.2], atol=1e-15)
    # One rollout: nothing to compare, σ = 0.
    np.testing.assert_array_equal(dro.token_deviation(np.array([[0.3, 0.7]])), [0.0, 0.0])


def test_certainty_is_the_probability_or_the_clipped_logprob() -> None:
    table = np.array([[math.log(0.25), -math.inf]])
    np.testing.assert_allclose(
        dro.token_certainty(table, certainty="prob"), [[0.25, math.exp(-50)]]
    )
    np.testing.assert_allclose(
        dro.token_certainty(table, certainty="logprob"), [[math.log(0.25), -50.0]]
    )
    # -inf would otherwise make σ NaN; clipped it stays finite.
    assert np.isfinite(dro.token_deviation(dro.token_certainty(table, certainty="logprob"))).all()
    with pytest.raises(ValueError, match="certainty must be one of"):
        dro.token_certainty(table, certainty="rank")


@pytest.mark.parametrize(
    ("shape", "kwargs", "expected"),
    [
        # σ = (0.1, 0.3): linear 0.1/0.4, 0.3/0.4.
        ("power", {"power": 1.0}, [0.25, 0.75]),
        # squared: 0.01/0.10, 0.09/0.10.
        ("power", {"power": 2.0}, [0.1, 0.9]),
        # exp(σ/0.1) = e¹, e³: 1/(1 + e²), e²/(1 + e²).
        ("softmax", {"temperature": 0.1}, [1 / (1 + math.e**2), math.e**2 / (1 + math.e**2)]),
        ("uniform", {}, [0.5, 0.5]),
    ],
)
def test_token_weights_by_shape(shape: str, kwargs: dict, expected: list[float]) -> None:
    weights = dro.token_weights(np.array([0.1, 0.3]), shape=shape, **kwargs)
    np.testing.assert_allclose(weights, expected, rtol=1e-12)
    assert weights.sum() == pytest.approx(1.0)


def test_token_weights_increase_with_deviation_and_fall_back_to_uniform() -> None:
    deviation = np.array([0.0, 0.05, 0.2, 0.4])
    for shape, kwargs in (("power", {"power": 0.5}), ("softmax", {"temperature": 0.3})):
        weights = dro.token_weights(deviation, shape=shape, **kwargs)
        assert np.all(np.diff(weights) > 0), (shape, weights)
    # No token moves with the reasoning: the power shape has nothing to select, weights are 1/L.
    np.testing.assert_array_equal(
        dro.token_weights(np.zeros(4), shape="power", power=1.0), np.full(4, 0.25)
    )
    with pytest.raises(ValueError, match="deviations must be finite and >= 0"):
        dro.token_weights(np.array([0.1, -0.1]), shape="power")


def test_reflection_reward_is_the_weighted_sum_with_an_optional_baseline() -> None:
    certainty = np.array([[0.9, 0.5], [0.9, 0.1]])
    weights = dro.token_weights(dro.token_deviation(certainty), shape="power", power=1.0)
    np.testing.assert_allclose(weights, [0.0, 1.0])  # only the token that moves counts
    np.testing.assert_allclose(dro.reflection_reward(certainty, weights=weights), [0.5, 0.1])
    # Masked-reasoning certainties (0.8, 0.3): R3 = 1·(0.5 - 0.3), 1·(0.1 - 0.3).
    np.testing.assert_allclose(
        dro.reflection_reward(certainty, weights=weights, baseline=np.array([0.8, 0.3])),
        [0.2, -0.2],
    )


def test_the_baseline_leaves_group_normalised_advantages_unchanged() -> None:
    """Within a prompt the baseline shifts every rollout by Σ_j w_j b_j: GRPO cannot see it."""
    rng = np.random.default_rng(0)
    certainty = rng.uniform(size=(6, 5))
    weights = dro.token_weights(dro.token_deviation(certainty), shape="power", power=1.0)
    plain = dro.reflection_reward(certainty, weights=weights)
    contrasted = dro.reflection_reward(certainty, weights=weights, baseline=rng.uniform(size=5))
    assert not np.allclose(plain, contrasted)
    np.testing.assert_allclose(grpo_advantages(plain), grpo_advantages(contrasted), atol=1e-9)


def test_reaches_top_k_on_a_hand_table() -> None:
    # k = 3: certified iff every token has p ≥ 1/4, i.e. log p ≥ -log 4 ≈ -1.386.
    table = np.array([[-1.0, -1.3], [-0.1, -1.5], [math.log(0.25), math.log(0.25)]])
    np.testing.assert_array_equal(dro.reaches_top_k(table, k=3), [True, False, True])
    np.testing.assert_array_equal(dro.reaches_top_k(np.zeros((2, 0)), k=1), [True, True])


def test_the_top_k_certificate_never_admits_a_token_ranked_below_k() -> None:
    """p ≥ 1/(k+1) ⇒ rank ≤ k, on random distributions (flat and peaked)."""
    rng = np.random.default_rng(1)
    certified = 0
    for concentration in (0.05, 0.3, 1.0):
        for _ in range(300):
            probs = rng.dirichlet(np.full(12, concentration))
            k = int(rng.integers(1, 6))
            for token in np.flatnonzero(probs > 0):
                rank = 1 + int((probs > probs[token]).sum())
                passes = dro.reaches_top_k(np.log(probs[[token]])[None, :], k=k)[0]
                if passes:
                    certified += 1
                    assert rank <= k, (probs, token, k)
    assert certified > 500  # the property was exercised, not vacuous


def test_lowest_fraction_ranks_with_ties_by_key() -> None:
    values, keys = [0.3, 0.1, 0.2, 0.1, 0.5], ["a", "b", "c", "d", "e"]
    # ⌊0.4·5⌋ = 2 of the lowest: b and d tie at 0.1, ordered by key.
    assert dro.lowest_fraction(values, keys, fraction=0.4) == ["b", "d"]
    assert dro.lowest_fraction(values, keys, fraction=0.5) == ["b", "d"]  # ⌊2.5⌋ = 2
    assert dro.lowest_fraction(values, keys, fraction=0.6) == ["b", "d", "c"]
    assert dro.lowest_fraction(values, keys, fraction=0.0) == []
    assert dro.lowest_fraction([], [], fraction=0.5) == []


def test_pearson_by_hand_and_undefined_without_spread() -> None:
    # x = (1, 2, 3), y = (1, 3, 2): centred (-1, 0, 1) · (-1, 1, 0) = 1; norms √2 · √2: r = 0.5.
    assert dro.pearson([1, 2, 3], [1, 3, 2]) == pytest.approx(0.5)
    assert dro.pearson([1, 2, 3], [1, 1, 1]) is None


def test_config_names_match_the_math() -> None:
    """The config validates without importing numpy's module: its enums must stay in step."""
    assert dro_config.CERTAINTIES == dro.CERTAINTIES
    assert dro_config.WEIGHT_SHAPES == dro.WEIGHT_SHAPES
