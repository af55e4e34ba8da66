"""The log-p family on uniform groups: members that are the same estimator, said once."""

from __future__ import annotations

import itertools

import numpy as np

from adarl.algo.advantages import maxrl_advantages
from adarl.algo.selection import downsample_and_correct


def test_selection_corrected_log_p_on_a_uniform_pool_is_maxrl() -> None:
    """The seeds' selection correction for log p on a whole uniform pool of n (pool estimate
    p̃ = K/n): A⁺ = (1/p̃)(1 - p̃)(p̃n/K) = (n - K)/K and A⁻ = -(1/p̃)p̃((1 - p̃)n/(n - K)) = -1,
    which is MaxRL's (r - r̄)/r̄; an all-wrong or all-right pool trains nothing in both. Every
    reward pattern of n = 2..6."""
    for n in range(2, 7):
        for pattern in itertools.product((0.0, 1.0), repeat=n):
            rewards = np.array(pattern)
            kept, advantages = downsample_and_correct(
                rewards,
                resolved=True,
                group_size=n,
                unresolved_policy="keep_available",
                correction="selection",
                objective="log",
                rng=np.random.default_rng(0),
            )
            full = np.zeros(n)
            full[kept] = advantages
            np.testing.assert_allclose(full, maxrl_advantages(rewards), atol=1e-12)
