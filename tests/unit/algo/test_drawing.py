"""The draw rule, its exact law and the unbiased pass-rate estimate (adarl/algo/drawing.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from adarl.algo.drawing import (
    DrawRule,
    PassRatePrior,
    draw_law,
    expected_draws,
    expected_overshoot,
    expected_samples_drawn,
    stop_time_distribution,
    unbiased_pass_rate,
)
from adarl.algo.gate import terminal_counts
from adarl.algo.implied import implied_weight, log_gate
from adarl.algo.stopping import StopDecision, StoppingRule

RULE = StoppingRule(k_pos=2, k_neg=2, max_samples=16)
P = (0.0, 0.05, 0.2, 0.5, 0.8, 1.0)


def test_futility_stops_only_mixed_pools_that_cannot_resolve() -> None:
    rule = StoppingRule(k_pos=3, k_neg=1, max_samples=5)
    assert rule.decision(1, 3) is StopDecision.UNRESOLVED  # mixed, 2 positives missing, 1 left
    assert rule.decision(0, 4) is StopDecision.CONTINUE  # one label: one more could mix it
    assert rule.decision(0, 5) is StopDecision.UNRESOLVED  # the cap
    assert rule.decision(3, 1) is StopDecision.RESOLVED
    assert rule.stop_index([True, False, False, False, True]) == 4
    assert rule.stop_index([False] * 4) is None  # not stopped yet


def test_stop_time_distribution_sums_to_one_and_matches_the_terminal_law() -> None:
    for p in P:
        q = stop_time_distribution(RULE, positives=0, negatives=0, pass_rates=np.array([p]))
        assert q.sum() == pytest.approx(1.0, abs=1e-12)
        expected = terminal_counts(p, k_pos=2, k_neg=2, max_samples=16).expected_samples()
        assert (np.arange(q.size) * q).sum() == pytest.approx(expected, abs=1e-10)


def test_expected_overshoot_by_hand() -> None:
    # t* = 1 or 3 with probability 1/2 each: chunk 2 overshoots by 1 half the time, chunk 3 by
    # (2 + 0)/2 = 1.
    q = np.array([0.0, 0.5, 0.0, 0.5])
    np.testing.assert_allclose(expected_overshoot(q), [0.0, 0.0, 0.5, 1.0])


@pytest.mark.parametrize("epsilon", [0.0, 0.05, 0.2, math.inf])
def test_the_draw_law_is_a_distribution_and_never_stops_before_the_rule(epsilon: float) -> None:
    draw = DrawRule(rule=RULE, max_overshoot_fraction=epsilon)
    for p in P:
        cells = draw_law(p, draw)
        assert sum(c.probability for c in cells) == pytest.approx(1.0, abs=1e-12)
        for c in cells:
            assert c.stop_index <= c.total <= 16
            if epsilon == 0:
                assert c.total == c.stop_index  # ε = 0 never overshoots
            if math.isinf(epsilon):
                assert c.total == 16 and c.draws == 1


def test_epsilon_bounds_the_extra_samples() -> None:
    """Under the Jeffreys prior the bound is Bayesian; at the true p the exact ratio stays
    ≤ 1.13 for the default ε = 0.03 at cap 16 (the allocator tests check it through the real
    sampler), and a larger ε buys fewer waits with more samples."""
    draw = DrawRule(rule=RULE, max_overshoot_fraction=0.03)
    cheap = DrawRule(rule=RULE, max_overshoot_fraction=0.2)
    for p in (0.05, 0.1, 0.2, 0.35, 0.5, 0.7, 0.9):
        one_at_a_time = terminal_counts(p, k_pos=2, k_neg=2, max_samples=16).expected_samples()
        assert expected_samples_drawn(p, draw) <= 1.13 * one_at_a_time
        assert expected_samples_drawn(p, cheap) >= expected_samples_drawn(p, draw)
        assert expected_draws(p, cheap) <= expected_draws(p, draw)


def test_a_prompt_showing_one_label_soon_takes_its_cap() -> None:
    draw = DrawRule(rule=StoppingRule(2, 2, 32), max_overshoot_fraction=0.03)
    chunks, negatives = [], 0
    while not draw.rule.stops(0, negatives):
        chunks.append(draw.chunk(positives=0, negatives=negatives))
        negatives += chunks[-1]
    assert len(chunks) <= 4 and max(chunks) >= 2 * chunks[0]  # few waits, growing draws
    # A history of failures (pseudo-counts) makes the first draw larger.
    assert draw.chunk(positives=0, negatives=0, history=(0.0, 20.0)) > chunks[0]


def test_unbiased_pass_rate_is_exactly_unbiased_under_any_draw_rule() -> None:
    for epsilon in (0.0, 0.05, 0.3, math.inf):
        draw = DrawRule(rule=RULE, max_overshoot_fraction=epsilon)
        for p in (0.05, 0.3, 0.5, 0.9):
            mean = 0.0
            for cell in draw_law(p, draw):
                mean += cell.probability * _prefix_estimate(cell)
            assert mean == pytest.approx(p, abs=1e-12)


def _prefix_estimate(cell) -> float:
    from adarl.algo.gate import rao_blackwell_pass_rate

    return rao_blackwell_pass_rate(
        positives=cell.stop_positives, total=cell.stop_index, k_pos=2, k_neg=2, max_samples=16
    )


def test_unbiased_pass_rate_reads_the_prefix_and_refuses_a_cut_pool() -> None:
    labels = [False, True, False, True, True, False]  # the rule stops after 4 (2 pos, 2 neg)
    assert RULE.stop_index(labels) == 4
    assert unbiased_pass_rate(labels, RULE) == unbiased_pass_rate(labels[:4], RULE)
    assert unbiased_pass_rate([False, True], RULE) is None  # cut before the rule stopped


@pytest.mark.parametrize("epsilon", [0.0, 0.05, 0.5, math.inf])
@pytest.mark.parametrize("estimator", ["seq_balance", "seq_pos"])
def test_log_objective_gate_is_exact_for_every_draw_rule(epsilon: float, estimator: str) -> None:
    """selection + unbiased p̂ + log: w(p)·p = 1 - (1-p)^(cap-1), whatever the chunks."""
    p = np.array([0.05, 0.1, 0.2, 0.35, 0.5, 0.7, 0.9])
    rule = {"k": 2} if estimator == "seq_pos" else {"k_pos": 2, "k_neg": 2}
    weight = implied_weight(
        p,
        estimator=estimator,
        group_size=4,
        correction="selection",
        objective="log",
        pass_rate_estimate="unbiased",
        max_samples=16,
        max_overshoot_fraction=epsilon,
        **rule,
    )
    np.testing.assert_allclose(weight * p, log_gate(p, max_samples=16), rtol=1e-10)


def test_whole_pools_keep_the_declared_gate() -> None:
    """Training on the whole pool (no downsampling) optimises the same gated log objective."""
    p = np.array([0.05, 0.2, 0.5, 0.9])
    weight = implied_weight(
        p,
        estimator="seq_balance",
        group_size=4,
        whole_pool=True,
        correction="selection",
        objective="log",
        pass_rate_estimate="unbiased",
        max_samples=16,
        max_overshoot_fraction=0.03,
    )
    np.testing.assert_allclose(weight * p, log_gate(p, max_samples=16), rtol=1e-10)


def test_the_pool_estimate_is_biased_under_the_same_draws() -> None:
    """What `pass_rate_estimate=pool` (the released code) costs: 7% to 32% on the weight."""
    p = np.array([0.05, 0.5, 0.9])
    weight = implied_weight(
        p,
        estimator="seq_balance",
        group_size=4,
        correction="selection",
        objective="log",
        pass_rate_estimate="pool",
        max_samples=16,
        max_overshoot_fraction=0.03,
    )
    ratio = weight * p / log_gate(p, max_samples=16)
    assert ratio[0] < 0.98 and ratio[2] > 1.3


def test_jeffreys_prior_and_its_posterior() -> None:
    prior = PassRatePrior.jeffreys()
    assert prior.mean() == pytest.approx(0.5)
    assert prior.grid[0] == 0.0 and prior.grid[-1] == 1.0
    post = prior.posterior(positives=0, negatives=30)
    assert post[0] > 0.5  # thirty failures: most mass on p = 0
    assert prior.posterior(positives=1, negatives=30)[0] == 0.0  # one success rules p = 0 out
