"""Gate statistics and exact stopping-time laws (hand-derived values)."""

from __future__ import annotations

from math import comb

import numpy as np
import pytest

from adarl.algo.gate import (
    advantage_energy,
    expected_samples_seq_balance,
    expected_samples_seq_pos,
    mixed_group_probability,
    rao_blackwell_pass_rate,
    terminal_counts,
    unresolved_probability_seq_balance,
    unresolved_probability_seq_pos,
)
from adarl.algo.stopping import StoppingRule


def test_mixed_group_probability() -> None:
    # p = 0.1, G = 8: 1 - 0.9^8 - 0.1^8 = 0.56953; MATH.md: all-wrong 43% of the time.
    assert mixed_group_probability(0.1, group_size=8) == pytest.approx(1 - 0.9**8 - 1e-8)
    all_wrong = 0.9**8
    assert all_wrong == pytest.approx(0.4305, abs=1e-4)
    p = np.linspace(0.01, 0.99, 99)
    u = mixed_group_probability(p, group_size=4)
    assert p[np.argmax(u)] == pytest.approx(0.5)
    assert mixed_group_probability(1e-4, group_size=8) == pytest.approx(8e-4, rel=1e-3)  # ≈ G·p
    np.testing.assert_allclose(mixed_group_probability(p, group_size=1), 0.0, atol=1e-15)


def test_advantage_energy() -> None:
    groups = np.array([[1, 0, 0, 0], [1, 1, 1, 1], [0, 0, 0, 0], [1, 1, 0, 0]], dtype=float)
    # linear: p̂(1-p̂) = 3/16, 0, 0, 1/4; log: w = 1/p̂ → 3/4 for the first group.
    np.testing.assert_allclose(advantage_energy(groups), [3 / 16, 0, 0, 1 / 4])
    np.testing.assert_allclose(advantage_energy(groups, objective="log"), [3 / 4, 0, 0, 1 / 2])


def test_terminal_law_is_a_distribution_respecting_the_cap() -> None:
    for kwargs in ({"k_pos": 3, "k_neg": 0}, {"k_pos": 2, "k_neg": 2}, {"k_pos": 1, "k_neg": 3}):
        for round_size in (1, 3, 8):
            law = terminal_counts(0.3, max_samples=20, round_size=round_size, **kwargs)
            assert law.probability.sum() == pytest.approx(1.0, abs=1e-12)
            assert law.probability.shape == (21, 21)
            # Mass only where N⁺ ≤ N, and before the cap only where the rule resolved or, one
            # sample at a time, where a mixed pool can no longer resolve (the futility stop).
            n, k = np.nonzero(law.probability)
            assert np.all(k <= n)
            early = n < 20
            rule = StoppingRule(max_samples=20, **kwargs)
            futile = np.array(
                [
                    a >= 1 and b >= 1 and rule.missing(a, b) > 20 - (a + b)
                    for a, b in zip(k[early], n[early] - k[early], strict=True)
                ],
                dtype=bool,
            )
            allowed = law.resolved[n[early], k[early]] | (futile & (round_size == 1))
            assert np.all(allowed)
            if round_size == 1 and kwargs == {"k_pos": 1, "k_neg": 3}:
                assert futile.any()  # the futility stop does happen for this rule
            if round_size > 1:  # stops happen only at round ends (or the cap)
                assert np.all((n % round_size == 0) | (n == 20))


def test_seq_pos_expectations_closed_form() -> None:
    # Uncapped (cap far away): E[N] = k/p.
    assert expected_samples_seq_pos(0.25, k=2, max_samples=300) == pytest.approx(8.0, rel=1e-9)
    # Capped: E[min(T, M)] = Σ_{m<M} Pr[Bin(m, p) < k]; unresolved = Pr[Bin(M, p) < k].
    p, k, cap = 0.2, 2, 6
    by_hand = sum(sum(comb(m, j) * p**j * (1 - p) ** (m - j) for j in range(k)) for m in range(cap))
    assert expected_samples_seq_pos(p, k=k, max_samples=cap) == pytest.approx(by_hand)
    unresolved = sum(comb(cap, j) * p**j * (1 - p) ** (cap - j) for j in range(k))
    assert unresolved_probability_seq_pos(p, k=k, max_samples=cap) == pytest.approx(unresolved)


def test_seq_balance_expectations() -> None:
    # k⁺ = k⁻ = 1: N = 1 + Geometric; E[N] = 1 + p/(1-p) + (1-p)/p. At p = 1/2: 3.
    assert expected_samples_seq_balance(0.5, k_pos=1, k_neg=1, max_samples=200) == pytest.approx(
        3.0
    )
    p = 0.1
    assert expected_samples_seq_balance(p, k_pos=1, k_neg=1, max_samples=500) == pytest.approx(
        1 + p / (1 - p) + (1 - p) / p
    )
    # Unresolved at the cap: Pr[Bin(M, p) < k⁺ or Bin(M, p) > M - k⁻].
    p, cap = 0.3, 10
    pmf = [comb(cap, j) * p**j * (1 - p) ** (cap - j) for j in range(cap + 1)]
    expected = pmf[0] + pmf[1] + pmf[9] + pmf[10]
    got = unresolved_probability_seq_balance(p, k_pos=2, k_neg=2, max_samples=cap)
    assert got == pytest.approx(expected)
    # U-shape: extreme pass rates cost more samples than p = 1/2.
    costs = [
        expected_samples_seq_balance(q, k_pos=2, k_neg=2, max_samples=400) for q in (0.1, 0.5, 0.9)
    ]
    assert costs[1] < costs[0] and costs[0] == pytest.approx(costs[2])


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="never resolve"):
        terminal_counts(0.5, k_pos=3, k_neg=3, max_samples=5)
    with pytest.raises(ValueError, match="group_size"):
        mixed_group_probability(0.5, group_size=0)


def test_rao_blackwell_pass_rate_seq_pos_closed_form() -> None:
    # One draw at a time, Seq-Pos(k): the classical unbiased (k-1)/(N-1).
    for total in range(3, 30):
        got = rao_blackwell_pass_rate(positives=3, total=total, k_pos=3, k_neg=0, max_samples=30)
        assert got == pytest.approx(2 / (total - 1))


@pytest.mark.parametrize("round_size", [1, 4])
@pytest.mark.parametrize("p", [0.07, 0.5, 0.9])
def test_rao_blackwell_pass_rate_is_unbiased_with_caps_and_rounds(
    p: float, round_size: int
) -> None:
    """E[p̂] = p exactly, summing over the exact stopping law (unresolved pools included),
    whereas the pool mean N⁺/N is biased under the same rule."""
    rule = {"k_pos": 2, "k_neg": 2, "max_samples": 16, "round_size": round_size}
    law = terminal_counts(p, **rule)
    cells = list(zip(*np.nonzero(law.probability), strict=True))
    rb = sum(
        law.probability[n, k] * rao_blackwell_pass_rate(positives=int(k), total=int(n), **rule)
        for n, k in cells
    )
    naive = sum(law.probability[n, k] * k / n for n, k in cells)
    assert rb == pytest.approx(p, abs=1e-12)
    if p != 0.5:
        assert abs(naive - p) > 0.01
    with pytest.raises(ValueError, match="not a stopping point"):
        rao_blackwell_pass_rate(positives=1, total=3, **rule)
