"""Stopping rules as pure decisions; E[N] by simulation; the cap is never exceeded."""

from __future__ import annotations

import numpy as np
import pytest

from adarl.algo.stopping import (
    StopDecision,
    StoppingRule,
    min_additional_samples_seq_balance,
    min_additional_samples_seq_pos,
    seq_balance_decision,
    seq_pos_decision,
    seq_pos_unbiased_pass_rate,
)


def test_seq_pos_decisions() -> None:
    assert seq_pos_decision(positives=1, total=3, k=2, max_samples=8) is StopDecision.CONTINUE
    assert seq_pos_decision(positives=2, total=3, k=2, max_samples=8) is StopDecision.RESOLVED
    # Resolution is checked before the cap: the last allowed sample may resolve.
    assert seq_pos_decision(positives=2, total=8, k=2, max_samples=8) is StopDecision.RESOLVED
    assert seq_pos_decision(positives=1, total=8, k=2, max_samples=8) is StopDecision.UNRESOLVED
    with pytest.raises(ValueError, match="exceeds max_samples"):
        seq_pos_decision(positives=1, total=9, k=2, max_samples=8)
    with pytest.raises(ValueError, match="never resolve"):
        seq_pos_decision(positives=0, total=0, k=4, max_samples=3)


def test_seq_balance_decisions() -> None:
    kw = {"k_pos": 2, "k_neg": 2, "max_samples": 10}
    assert seq_balance_decision(positives=5, negatives=1, **kw) is StopDecision.CONTINUE
    assert seq_balance_decision(positives=2, negatives=2, **kw) is StopDecision.RESOLVED
    assert seq_balance_decision(positives=9, negatives=1, **kw) is StopDecision.UNRESOLVED
    with pytest.raises(ValueError, match="exceeds max_samples"):
        seq_balance_decision(positives=9, negatives=2, **kw)


def test_min_additional_samples() -> None:
    assert min_additional_samples_seq_pos(positives=1, total=3, k=4, max_samples=32) == 3
    assert min_additional_samples_seq_pos(positives=1, total=30, k=4, max_samples=32) == 2
    assert min_additional_samples_seq_pos(positives=4, total=5, k=4, max_samples=32) == 0
    kw = {"k_pos": 2, "k_neg": 2, "max_samples": 16}
    assert min_additional_samples_seq_balance(positives=0, negatives=5, **kw) == 2
    assert min_additional_samples_seq_balance(positives=0, negatives=0, **kw) == 4
    assert min_additional_samples_seq_balance(positives=1, negatives=14, **kw) == 1
    assert min_additional_samples_seq_balance(positives=0, negatives=16, **kw) == 0


def test_min_additional_to_any_stop_is_the_first_draw_that_can_stop() -> None:
    # Balance(4, 4) with a cap of 8 at (N⁺, N⁻) = (1, 3): the exit needs 4 more (3 positives and
    # a negative), but two more negatives make the mixed pool futile (3 missing > 2 left).
    rule = StoppingRule(k_pos=4, k_neg=4, max_samples=8)
    assert rule.min_additional(1, 3) == 4
    assert rule.min_additional_to_any_stop(1, 3) == 2
    assert rule.min_additional_to_any_stop(4, 4) == 0
    # Never later than the exit, and the first draw of that size that can stop, for every state.
    for k_pos, k_neg, cap in ((2, 2, 16), (1, 1, 4), (4, 0, 12), (3, 5, 9)):
        rule = StoppingRule(k_pos=k_pos, k_neg=k_neg, max_samples=cap)
        for pos in range(cap + 1):
            for neg in range(cap + 1 - pos):
                extra = rule.min_additional_to_any_stop(pos, neg)
                assert extra <= rule.min_additional(pos, neg)
                if extra == 0:
                    assert rule.stops(pos, neg)
                    continue
                assert any(rule.stops(pos + j, neg + extra - j) for j in range(extra + 1))
                assert not any(rule.stops(pos + j, neg + extra - 1 - j) for j in range(extra))


def _simulate(rule: str, p: float, trials: int, rng: np.random.Generator, **kw: int) -> np.ndarray:
    """N per trial, running the real decisions with chunks of `min_additional_samples_*`."""
    totals = np.empty(trials, dtype=np.int64)
    max_samples = kw["max_samples"]
    # Pre-draw one reward stream per trial; a trial never needs more than the cap.
    stream = rng.random((trials, max_samples)) < p
    for t in range(trials):
        pos = neg = 0
        while True:
            if rule == "pos":
                more = min_additional_samples_seq_pos(positives=pos, total=pos + neg, **kw)
            else:
                more = min_additional_samples_seq_balance(positives=pos, negatives=neg, **kw)
            if more == 0:
                break
            chunk = stream[t, pos + neg : pos + neg + more]
            pos += int(chunk.sum())
            neg += more - int(chunk.sum())
        assert pos + neg <= max_samples
        totals[t] = pos + neg
    return totals


def test_seq_pos_mean_samples_is_k_over_p() -> None:
    # Cap 400 with p=0.2, k=3: P(N > 400) is astronomically small, so E[N] = k/p = 15.
    # Tolerance: 2% relative, while the standard error of the mean is ~0.6% (sd ≈ 7.7, 4000 runs).
    rng = np.random.default_rng(0)
    totals = _simulate("pos", 0.2, 4000, rng, k=3, max_samples=400)
    assert abs(totals.mean() / 15.0 - 1.0) < 0.02


def test_seq_balance_mean_samples_matches_exact_expectation() -> None:
    from adarl.algo.gate import expected_samples_seq_balance

    rng = np.random.default_rng(1)
    p, cap = 0.15, 24  # cap binds often here, so the exact capped expectation is what we check
    totals = _simulate("balance", p, 4000, rng, k_pos=2, k_neg=2, max_samples=cap)
    exact = expected_samples_seq_balance(p, k_pos=2, k_neg=2, max_samples=cap)
    # 2% relative; standard error of the mean ≈ 0.9% here (sd ≈ 6.2, mean ≈ 13, 4000 runs).
    assert abs(totals.mean() / exact - 1.0) < 0.02
    assert totals.max() <= cap


def test_cap_never_exceeded_under_any_counts() -> None:
    for cap in (4, 7, 32):
        for pos in range(cap + 1):
            for neg in range(cap + 1 - pos):
                more = min_additional_samples_seq_balance(
                    positives=pos, negatives=neg, k_pos=2, k_neg=2, max_samples=cap
                )
                assert pos + neg + more <= cap
                more = min_additional_samples_seq_pos(
                    positives=pos, total=pos + neg, k=3, max_samples=cap
                )
                assert pos + neg + more <= cap


def test_unbiased_pass_rate_for_seq_pos() -> None:
    # E[(k-1)/(N-1)] = p under negative binomial sampling: check by exact summation for k=3.
    from math import comb

    p, k = 0.3, 3
    expectation = sum(
        (k - 1) / (n - 1) * comb(n - 1, k - 1) * p**k * (1 - p) ** (n - k) for n in range(k, 400)
    )
    assert expectation == pytest.approx(p, rel=1e-12)
    assert seq_pos_unbiased_pass_rate(positives=3, total=11) == pytest.approx(0.2)
