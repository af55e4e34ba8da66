"""Balanced downsampling, unresolved policies and correction modes (values derived by hand)."""

from __future__ import annotations

import numpy as np
import pytest

from adarl.algo.selection import (
    Correction,
    UnresolvedPolicy,
    balanced_downsample,
    corrected_advantages,
    downsample_and_correct,
)


def test_earliest_order_is_first_come_within_each_label() -> None:
    pool = np.array([0, 1, 0, 0, 1, 1, 0, 1], dtype=float)
    kept = balanced_downsample(pool, group_size=4, order="earliest")
    np.testing.assert_array_equal(kept, [0, 1, 2, 4])  # positives 1, 4; negatives 0, 2


def test_odd_group_gives_the_extra_slot_to_negatives_and_tops_up() -> None:
    pool = np.array([1, 1, 1, 1, 0, 0, 0, 0], dtype=float)
    kept = balanced_downsample(pool, group_size=5, order="earliest")
    assert pool[kept].sum() == 2  # ⌊5/2⌋ positives, 3 negatives
    short_neg = np.array([1, 1, 1, 1, 1, 0], dtype=float)
    kept = balanced_downsample(short_neg, group_size=4, order="earliest")
    np.testing.assert_array_equal(kept, [0, 1, 2, 5])  # 1 negative, topped up with positives
    small_pool = np.array([1.0, 0.0])
    np.testing.assert_array_equal(
        balanced_downsample(small_pool, group_size=4, order="earliest"), [0, 1]
    )


def test_random_order_is_seeded_and_uniform_within_label() -> None:
    pool = np.array([1, 0, 1, 0, 1, 0, 1, 0, 0, 0], dtype=float)
    first = balanced_downsample(pool, group_size=4, rng=np.random.default_rng(3))
    again = balanced_downsample(pool, group_size=4, rng=np.random.default_rng(3))
    np.testing.assert_array_equal(first, again)
    counts = np.zeros(pool.size)
    rng = np.random.default_rng(4)
    trials = 8000
    for _ in range(trials):
        counts[balanced_downsample(pool, group_size=4, rng=rng)] += 1
    # Each of 4 positives is kept w.p. 2/4, each of 6 negatives w.p. 2/6; binomial SE ≤ 0.0056,
    # tolerance 0.017 ≈ 3 SE.
    np.testing.assert_allclose(counts[pool == 1] / trials, 0.5, atol=0.017)
    np.testing.assert_allclose(counts[pool == 0] / trials, 1 / 3, atol=0.017)
    with pytest.raises(ValueError, match="rng"):
        balanced_downsample(pool, group_size=4)


def test_none_and_std_match_released_script() -> None:
    pool = np.array([1, 0, 0, 0, 1, 0, 0, 0], dtype=float)  # p̃ = 0.25
    kept = np.array([1, 1, 0, 0], dtype=float)
    np.testing.assert_allclose(
        corrected_advantages(kept, pool_rewards=pool, correction="none"), [0.75, 0.75, -0.25, -0.25]
    )
    std = np.sqrt(8 * 0.25 * 0.75 / 7)  # unbiased pool std
    np.testing.assert_allclose(
        corrected_advantages(kept, pool_rewards=pool, correction=Correction.STD),
        np.array([0.75, 0.75, -0.25, -0.25]) / (std + 1e-6),
    )
    np.testing.assert_allclose(
        corrected_advantages(kept, pool_rewards=pool, correction="inverse_p"), [3, 3, -1, -1]
    )
    np.testing.assert_allclose(
        corrected_advantages(kept, pool_rewards=pool, correction="inverse_sqrt_p"),
        np.array([0.75, 0.75, -0.25, -0.25]) / 0.5,
    )


def test_selection_coefficients() -> None:
    pool = np.array([1, 0, 0, 0, 1, 0, 0, 0], dtype=float)  # p̃ = 0.25
    kept = np.array([1, 0, 0, 0], dtype=float)  # n⁺ = 1, n⁻ = 3, n = 4
    # log: w = 4; A⁺ = 4·0.75·0.25·4/1 = 3, A⁻ = -4·0.25·0.75·4/3 = -1.
    np.testing.assert_allclose(
        corrected_advantages(kept, pool_rewards=pool, correction="selection", objective="log"),
        [3, -1, -1, -1],
    )
    # p known overrides the pool: p = 0.5, linear: A⁺ = 0.25·4 = 1, A⁻ = -0.25·4/3.
    np.testing.assert_allclose(
        corrected_advantages(
            kept, pool_rewards=pool, correction="selection", objective="linear", pass_rate=0.5
        ),
        [1, -1 / 3, -1 / 3, -1 / 3],
    )
    # One-label groups carry no contrast.
    np.testing.assert_array_equal(
        corrected_advantages(np.zeros(3), pool_rewards=pool, correction="selection"), np.zeros(3)
    )
    # The target size n normalises: a short group of 2 out of n=4 gets doubled coefficients.
    np.testing.assert_allclose(
        corrected_advantages(
            np.array([1.0, 0.0]), pool_rewards=pool, correction="selection", group_size=4
        ),
        [0.75 * 0.25 * 4 * 4 / 1, -0.75 * 0.25 * 4 * 4 / 1],
    )


def test_unresolved_policies() -> None:
    pool = np.array([0, 0, 1, 0, 0, 0], dtype=float)
    kw = {"group_size": 4, "correction": "none", "order": "earliest"}
    idx, adv = downsample_and_correct(pool, resolved=False, unresolved_policy="drop", **kw)
    assert idx.size == 0 and adv.size == 0
    idx, adv = downsample_and_correct(
        pool, resolved=False, unresolved_policy=UnresolvedPolicy.ZERO_ADVANTAGE, **kw
    )
    np.testing.assert_array_equal(idx, [0, 1, 2, 3])
    np.testing.assert_array_equal(adv, np.zeros(4))
    idx, adv = downsample_and_correct(
        pool, resolved=False, unresolved_policy="keep_available", **kw
    )
    np.testing.assert_allclose(adv, np.array([0, 0, 1, 0]) - 1 / 6)


def test_bad_inputs_name_the_fix() -> None:
    with pytest.raises(ValueError, match="'bogus' is not a valid Correction"):
        corrected_advantages(np.ones(2), pool_rewards=np.ones(2), correction="bogus")
    with pytest.raises(ValueError, match="pool_rewards is empty"):
        corrected_advantages(np.ones(2), pool_rewards=np.ones(0), correction="none")
