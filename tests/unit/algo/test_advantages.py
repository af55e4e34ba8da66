"""Uniform-group advantages: hand values and the reference implementations' conventions."""

from __future__ import annotations

import numpy as np
import pytest

from adarl.algo.advantages import (
    ada_est_advantages,
    dr_grpo_advantages,
    grpo_advantages,
    maxrl_advantages,
    raft_advantages,
    reinforce_baseline_advantages,
    rloo_advantages,
)

REWARDS = np.array([1.0, 0.0, 0.0, 1.0, 1.0])  # μ = 0.6, unbiased σ = √0.3


def test_grpo_uses_unbiased_std_and_size_one_rule() -> None:
    expected = (REWARDS - 0.6) / (np.sqrt(0.3) + 1e-6)
    np.testing.assert_allclose(grpo_advantages(REWARDS), expected)
    # verl: a size-1 group has μ = 0, σ = 1.
    np.testing.assert_allclose(grpo_advantages(np.array([1.0])), [1 / (1 + 1e-6)])
    np.testing.assert_array_equal(grpo_advantages(np.zeros(4)), np.zeros(4))


def test_dr_grpo_rloo_reinforce() -> None:
    np.testing.assert_allclose(dr_grpo_advantages(REWARDS), REWARDS - 0.6)
    # Leave-one-out: positive j sees the mean of the other 4 = 2/4; negative j sees 3/4.
    np.testing.assert_allclose(rloo_advantages(REWARDS), [0.5, -0.75, -0.75, 0.5, 0.5])
    # RLOO = G/(G-1)·(r - μ).
    np.testing.assert_allclose(rloo_advantages(REWARDS), 5 / 4 * (REWARDS - 0.6))
    np.testing.assert_allclose(
        reinforce_baseline_advantages(REWARDS, baseline=0.25), REWARDS - 0.25
    )


def test_raft_trains_on_positives_only() -> None:
    np.testing.assert_array_equal(raft_advantages(REWARDS), [1, 0, 0, 1, 1])
    np.testing.assert_allclose(
        raft_advantages(REWARDS, normalization="positives"), [5 / 3, 0, 0, 5 / 3, 5 / 3]
    )
    np.testing.assert_array_equal(raft_advantages(np.zeros(3), normalization="positives"), 0.0)
    with pytest.raises(ValueError, match="normalization"):
        raft_advantages(REWARDS, normalization="tokens")


def test_ada_est() -> None:
    np.testing.assert_allclose(ada_est_advantages(REWARDS, eps=0.0), (REWARDS - 0.6) / np.sqrt(0.6))
    np.testing.assert_allclose(
        ada_est_advantages(REWARDS, eps=0.01, pass_rate=0.2), (REWARDS - 0.2) / np.sqrt(0.21)
    )
    np.testing.assert_array_equal(ada_est_advantages(np.zeros(3), eps=0.0), 0.0)


def test_maxrl_divides_by_the_group_mean() -> None:
    # r̄ = 0.6: a positive gets (1 - 0.6)/0.6 = 2/3, a negative (0 - 0.6)/0.6 = -1.
    np.testing.assert_allclose(maxrl_advantages(REWARDS), [2 / 3, -1, -1, 2 / 3, 2 / 3])
    # As (1/K)·Σ_pos minus the group mean of the scores: A_j/G = r_j/K - 1/G.
    np.testing.assert_allclose(maxrl_advantages(REWARDS) / 5, REWARDS / 3 - 1 / 5)
    np.testing.assert_array_equal(maxrl_advantages(np.zeros(4)), 0.0)  # all wrong: no signal
    np.testing.assert_array_equal(maxrl_advantages(np.ones(4)), 0.0)  # all right: r = r̄
    # One positive in 4: 3 on it, -1 on each negative (the advantages sum to zero).
    np.testing.assert_allclose(maxrl_advantages(np.array([0.0, 1, 0, 0])), [-1, 3, -1, -1])
    # Real-valued rewards divide by their mean too.
    np.testing.assert_allclose(maxrl_advantages(np.array([0.5, 0.0])), [1.0, -1.0])


@pytest.mark.parametrize(
    "fn",
    [grpo_advantages, dr_grpo_advantages, rloo_advantages, raft_advantages, maxrl_advantages],
)
def test_permutation_equivariant(fn) -> None:
    order = np.array([3, 1, 4, 0, 2])
    np.testing.assert_allclose(fn(REWARDS)[order], fn(REWARDS[order]))


def test_rejects_non_groups() -> None:
    with pytest.raises(ValueError, match="1-D group"):
        grpo_advantages(np.zeros((2, 2)))
    with pytest.raises(ValueError, match="1-D group"):
        rloo_advantages(np.zeros(0))
