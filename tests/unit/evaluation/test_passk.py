"""pass@k, coverage and the guesser against brute force (adarl/evaluation/passk.py)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from adarl.evaluation import EvalResult, guess_hit_rates, guess_pass_at_k, pass_at_k, pass_at_k_ks


def _brute_force(n: int, c: int, k: int) -> float:
    """The share of the C(n, k) subsets of k samples that hold at least one correct sample."""
    samples = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(samples[i] for i in subset) for subset in subsets) / len(subsets)


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 10])
def test_pass_at_k_equals_enumeration_over_every_subset(n: int) -> None:
    for c in range(n + 1):
        for k in range(1, n + 1):
            assert pass_at_k(n, c, k) == pytest.approx(_brute_force(n, c, k), abs=1e-12)


def test_pass_at_k_is_stable_where_the_binomial_form_overflows() -> None:
    # C(2000, 1000) overflows a float; the product form does not, and equals the log-space value.
    n, c, k = 2000, 3, 1000
    exact = 1.0 - math.exp(
        math.lgamma(n - c + 1)
        - math.lgamma(n - c - k + 1)
        - math.lgamma(n + 1)
        + math.lgamma(n - k + 1)
    )
    assert pass_at_k(n, c, k) == pytest.approx(exact, rel=1e-9)
    assert 0.0 < float(pass_at_k(n, c, k)) < 1.0


def test_pass_at_k_is_unbiased_for_one_minus_q_to_the_k() -> None:
    """E over c ~ Bin(n, p) of pass@k(n, c, k) = 1 - (1 - p)^k exactly (the estimator's claim)."""
    n, k = 12, 5
    for p in (0.02, 0.3, 0.9):
        expected = sum(
            math.comb(n, c) * p**c * (1 - p) ** (n - c) * float(pass_at_k(n, c, k))
            for c in range(n + 1)
        )
        assert expected == pytest.approx(1 - (1 - p) ** k, rel=1e-12)


def test_pass_at_k_vectorises_and_refuses_bad_counts() -> None:
    values = pass_at_k(np.array([4, 4, 4]), np.array([0, 1, 4]), 2)
    np.testing.assert_allclose(values, [0.0, 0.5, 1.0])
    with pytest.raises(ValueError, match="at least 8 samples"):
        pass_at_k(4, 1, 8)
    with pytest.raises(ValueError, match="num_correct"):
        pass_at_k(4, 5, 1)
    with pytest.raises(ValueError, match="k >= 1"):
        pass_at_k(4, 1, 0)


def test_reported_ks_are_powers_of_two_then_n() -> None:
    assert pass_at_k_ks(64) == (1, 2, 4, 8, 16, 32, 64)
    assert pass_at_k_ks(12) == (1, 2, 4, 8, 12)
    assert pass_at_k_ks(1) == (1,)


def test_guesser_draws_from_the_training_answers_of_the_same_level() -> None:
    train_answers = ["3", "3", "4", "7", "10", "10", "10", "11"]
    train_levels = ["0", "0", "0", "0", "1", "1", "1", "1"]
    rates = guess_hit_rates(
        ["3", "5", "10", "4"], ["0", "0", "1", "2"], train_answers, train_levels
    )
    # level 0: "3" is 2 of 4; "5" never; level 1: "10" is 3 of 4; level 2 has no training answer:
    # the whole split, where "4" is 1 of 8.
    np.testing.assert_allclose(rates, [0.5, 0.0, 0.75, 1 / 8])
    np.testing.assert_allclose(
        guess_pass_at_k(rates, 2), [0.75, 0.0, 1 - 0.25**2, 1 - (7 / 8) ** 2]
    )


def test_guesser_pass_at_k_matches_simulated_draws() -> None:
    """The closed form against drawing k training answers at random, 200k times."""
    rng = np.random.default_rng(0)
    train = np.array(["1", "2", "2", "3", "3", "3"])
    hits = rng.choice(train, size=(200_000, 4)) == "2"
    simulated = hits.any(axis=1).mean()
    (rate,) = guess_hit_rates(["2"], ["a"], list(train), ["a"] * len(train))
    se = math.sqrt(simulated * (1 - simulated) / 200_000)
    assert abs(float(guess_pass_at_k([rate], 4)[0]) - simulated) <= 3 * se


def test_eval_result_reports_pass_at_k_coverage_and_the_guesser_by_level() -> None:
    result = EvalResult(
        accuracy=(0 + 1 + 4 + 2) / 16,
        greedy_accuracy=None,
        num_prompts=4,
        samples_per_prompt=4,
        completions=[],
        correct=[0, 1, 4, 2],
        levels=["1", "1", "2", "10"],
        guess_rates=[0.5, 0.0, 0.25, 0.0],
    )
    table = result.table()
    assert table["pass_at_k"] == {
        "1": 7 / 16,
        "2": pytest.approx((0 + 0.5 + 1 + 5 / 6) / 4),
        "4": 0.75,
    }
    assert result.coverage == 0.75
    assert list(table["by_level"]) == ["1", "2", "10"]  # numeric order
    assert table["by_level"]["1"]["pass_at_k"]["4"] == 0.5
    assert table["guess_pass_at_k"]["4"] == pytest.approx((1 - 0.5**4 + 1 - 0.75**4) / 4)
    metrics = result.metrics()
    assert "eval/pass@1" not in metrics  # pass@1 is eval/accuracy
    assert metrics["eval/pass@4"] == 0.75
    assert metrics["eval/pass@4_above_guess"] == pytest.approx(0.75 - table["guess_pass_at_k"]["4"])
    assert metrics["eval/pass@2_by_difficulty/10"] == pytest.approx(5 / 6)
    assert metrics["eval/guess_pass@1_by_difficulty/1"] == 0.25
    assert metrics["eval/coverage"] == 0.75


def test_the_paired_rise_is_the_mean_per_prompt_change_with_its_standard_error() -> None:
    from adarl.evaluation import paired_pass_at_1_rise

    base, final = [0, 2, 4, 8], [1, 4, 4, 8]  # of 8 samples: changes 1/8, 2/8, 0, 0
    rise, se = paired_pass_at_1_rise(base_correct=base, final_correct=final, num_samples=8)
    changes = np.array([1, 2, 0, 0]) / 8
    assert rise == pytest.approx(changes.mean())
    assert se == pytest.approx(changes.std(ddof=1) / 2)
    # Paired: a shift every prompt shares has no spread, however different the prompts are.
    rise, se = paired_pass_at_1_rise(base_correct=[0, 3, 7], final_correct=[1, 4, 8], num_samples=8)
    assert (rise, se) == (pytest.approx(1 / 8), 0.0)
    with pytest.raises(ValueError, match="same prompts"):
        paired_pass_at_1_rise(base_correct=[1, 2], final_correct=[1], num_samples=8)
