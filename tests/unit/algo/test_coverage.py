"""Coverage objectives, by hand and by brute force: pass@k as an f-objective, Pass@k Training's
advantages against the reference code's values, PKPO against its subset definitions and its
unbiasedness by enumerating every outcome of small groups, F-GRPO's factor, the closed-form
implied weights against the enumeration through the advantage functions, and HORA's hit utility
against numerical integration.

The "every outcome" checks are exact expectations, independent of the counting identity (★) that
`implied_weight` relies on: a softmax bandit with 3 actions (action 0 correct) and n samples has
3^n equally enumerable action sequences; E[(1/n)·Σ_j A_j ∇log π(a_j)] is their probability-weighted
sum, compared with autograd's ∇(weight × p) of the declared objective.
"""

from __future__ import annotations

import itertools
from math import comb

import numpy as np
import pytest
import torch

from adarl.algo.advantages import (
    AdvantageOptions,
    focal_grpo_weight,
    focal_scale,
    grpo_advantages,
    passk_training_advantages,
    passk_training_weight,
    pkpo_advantages,
)
from adarl.algo.allocation import variance_optimal_allocation
from adarl.algo.curation import declared_value, hit_utility, hit_utility_increment
from adarl.algo.implied import implied_weight
from adarl.algo.objectives import (
    check_objective_k,
    get_objective,
    objective_weight,
    pass_at_k_objective,
    selection_weight,
)

P_GRID = np.array([0.02, 0.1, 0.3, 0.5, 0.7, 0.95])


# -- pass@k as an objective ---------------------------------------------------------------------


@pytest.mark.parametrize("k", [1, 2, 8])
def test_pass_at_k_weight_and_selection_coefficient(k: int) -> None:
    p = P_GRID
    np.testing.assert_allclose(
        objective_weight(p, objective="pass_at_k", objective_k=k), k * (1 - p) ** (k - 1)
    )
    # h = w·p(1-p) = k·p·(1-p)^k in closed form, finite at both ends.
    h = selection_weight(p, objective="pass_at_k", objective_k=k)
    np.testing.assert_allclose(h, k * (1 - p) ** (k - 1) * p * (1 - p), rtol=1e-12)
    np.testing.assert_allclose(
        selection_weight(np.array([0.0, 1.0]), objective="pass_at_k", objective_k=k), 0.0
    )
    # f' by autograd, and k = 1 is the linear objective.
    theta = torch.tensor(p, dtype=torch.float64, requires_grad=True)
    (grad,) = torch.autograd.grad(pass_at_k_objective(k).f(theta).sum(), theta)
    np.testing.assert_allclose(grad.numpy(), k * (1 - p) ** (k - 1), rtol=1e-12)
    assert get_objective("pass_at_k", objective_k=k).name == f"pass@{k}"
    if k == 1:
        np.testing.assert_allclose(h, selection_weight(p, objective="linear"))


@pytest.mark.parametrize("bad", [0, -3, 2.5, True])
def test_k_must_be_a_positive_integer(bad: object) -> None:
    with pytest.raises(ValueError, match="integer k >= 1"):
        check_objective_k(bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="integer k >= 1"):
        selection_weight(0.3, objective="pass_at_k", objective_k=bad)  # type: ignore[arg-type]


def test_variance_optimal_allocation_for_pass_at_k() -> None:
    """n ∝ w(p)√(p(1-p)) = 4(1-p)^3·√(p(1-p)): at p = 0.1, 0.3, 0.5 the weights are 0.875, 0.629,
    0.25 (×4·√·), so 64 samples split 30/24/10 after water-filling and rounding."""
    p = np.array([0.1, 0.3, 0.5])
    raw = 4 * (1 - p) ** 3 * np.sqrt(p * (1 - p))
    n = variance_optimal_allocation(
        p, objective="pass_at_k", objective_k=4, budget=64, min_samples=1, max_samples=64
    )
    assert n.sum() == 64
    np.testing.assert_allclose(n, 64 * raw / raw.sum(), atol=1.0)


def test_declared_value_for_pass_at_k_by_integration() -> None:
    """V(n) = E[k·p(1-p)^k·(1 - p^n - (1-p)^n)] under Beta(2, 5), by quadrature."""
    a, b, k = 2.0, 5.0, 4
    grid = np.linspace(0.0, 1.0, 200_001)
    density = grid ** (a - 1) * (1 - grid) ** (b - 1)
    density /= np.trapezoid(density, grid)
    value = declared_value(
        np.array([a]), np.array([b]), max_samples=6, objective="pass_at_k", objective_k=k
    )[0]
    for n in range(2, 7):
        integrand = k * grid * (1 - grid) ** k * (1 - grid**n - (1 - grid) ** n) * density
        assert value[n] == pytest.approx(np.trapezoid(integrand, grid), rel=1e-6)


# -- Pass@k Training ----------------------------------------------------------------------------


def test_passk_training_matches_the_reference_values() -> None:
    """RUCAIBox/Passk_Training `calc_adv`, by hand. N = 8, 2 correct, k = 4:
    R̄ = 1 - C(6,4)/C(8,4) = 1 - 15/70 = 11/14, σ = √(11/14 · 3/14) = √33/14;
    A⁺ = (3/14)/(σ + 1e-6); A⁻ = (3/14 - C(5,3)/C(7,3))/(σ + 1e-6) = (3/14 - 2/7)/(σ + 1e-6)."""
    rewards = np.array([1.0, 0, 0, 1, 0, 0, 0, 0])
    sigma = np.sqrt(33) / 14
    expected = np.where(rewards > 0, (3 / 14) / (sigma + 1e-6), (3 / 14 - 2 / 7) / (sigma + 1e-6))
    np.testing.assert_allclose(passk_training_advantages(rewards, k=4), expected, rtol=1e-12)
    # N = 5, 3 correct, k = 2: R̄ = 1 - C(2,2)/C(5,2) = 0.9, σ = 0.3; A⁺ = 0.1/0.3,
    # A⁻ = (0.1 - C(1,1)/C(4,1))/0.3 = -0.15/0.3.
    np.testing.assert_allclose(
        passk_training_advantages(np.array([1.0, 1, 0, 1, 0]), k=2),
        np.array([0.1, 0.1, -0.15, 0.1, -0.15]) / (0.3 + 1e-6),
        rtol=1e-12,
    )


def test_passk_training_edge_cases_follow_the_reference() -> None:
    # One label: R̄ ∈ {0, 1}, σ = 0, both numerators 0 -> all zeros (the code's 0/(0 + 1e-6)).
    np.testing.assert_array_equal(passk_training_advantages(np.ones(6), k=3), 0.0)
    np.testing.assert_array_equal(passk_training_advantages(np.zeros(6), k=3), 0.0)
    # N_neg < k: every 3-subset holds a positive, R̄ = 1: no signal either.
    np.testing.assert_array_equal(
        passk_training_advantages(np.array([1.0, 1, 1, 1, 0, 0]), k=3), 0.0
    )
    # N < k: the reference divides 0 by C(N, k) = 0 (NaN); adarl refuses and names the fix.
    with pytest.raises(ValueError, match="at least k samples"):
        passk_training_advantages(np.array([1.0, 0, 0]), k=4)
    # Σ A = 0 (A is a subset reward minus its group mean), and k = 1 is GRPO with ddof 0.
    rewards = np.array([1.0, 0, 0, 1, 1, 0, 0])
    assert passk_training_advantages(rewards, k=3).sum() == pytest.approx(0.0, abs=1e-12)
    mean, std = rewards.mean(), rewards.std()
    np.testing.assert_allclose(
        passk_training_advantages(rewards, k=1), (rewards - mean) / (std + 1e-6)
    )


# -- PKPO ---------------------------------------------------------------------------------------


def _subset_mean_max(labels: np.ndarray, k: int, members: list[int], must: int | None) -> float:
    """(1/C(|members|, k))·Σ over k-subsets I of `members` (containing `must`) of max_I r."""
    total = 0.0
    for subset in itertools.combinations(members, k):
        if must is None or must in subset:
            total += float(labels[list(subset)].max())
    return total / comb(len(members), k)


def _pkpo_by_subsets(labels: np.ndarray, k: int, baseline: str) -> np.ndarray:
    """The paper's definitions, by enumerating subsets (no closed form)."""
    n = labels.size
    everyone = list(range(n))
    s = np.array([_subset_mean_max(labels, k, everyone, i) for i in range(n)])
    if baseline == "none":
        return n * s
    if baseline == "loo":
        b = np.zeros(n)
        for i in range(n):
            others = [j for j in everyone if j != i]
            b[i] = sum(_subset_mean_max(labels, k, others, j) for j in others) / (n - 1)
        return n * (s - b)
    out = np.zeros(n)  # loo_minus_one: Σ_{I ∋ i} [max_I - max_{I∖i}] / C(n, k)
    for i in range(n):
        for subset in itertools.combinations(everyone, k):
            if i in subset:
                rest = [j for j in subset if j != i]
                out[i] += labels[list(subset)].max() - (labels[rest].max() if rest else 0.0)
    return n * out / comb(n, k)


@pytest.mark.parametrize("baseline", ["loo_minus_one", "loo", "none"])
def test_pkpo_closed_forms_equal_the_subset_definitions(baseline: str) -> None:
    for n in range(1, 7):
        for k in range(1, n + 1):
            if baseline == "loo" and n <= k:
                continue
            for c in range(n + 1):
                labels = np.array([1.0] * c + [0.0] * (n - c))
                np.testing.assert_allclose(
                    pkpo_advantages(labels, k=k, baseline=baseline),
                    _pkpo_by_subsets(labels, k, baseline),
                    atol=1e-12,
                    err_msg=f"n={n} k={k} c={c}",
                )


def test_pkpo_equals_passk_training_up_to_scale_and_baseline() -> None:
    """arXiv 2510.23049: Pass@k Training = (A_none/k - R̄)/(σ + ε) (A_none = n·s, the raw PKPO)."""
    for labels in ([1.0, 0, 0, 1, 0, 0, 0, 0], [1.0, 1, 0, 0, 0], [0.0, 1, 0, 0, 0, 0, 0]):
        r = np.array(labels)
        n, k = r.size, 3
        mean = 1 - comb(n - int(r.sum()), k) / comb(n, k)
        sigma = np.sqrt(mean * (1 - mean))
        expected = (pkpo_advantages(r, k=k, baseline="none") / k - mean) / (sigma + 1e-6)
        np.testing.assert_allclose(passk_training_advantages(r, k=k), expected, atol=1e-9)


def test_pkpo_refuses_what_it_does_not_define() -> None:
    with pytest.raises(ValueError, match="at least k samples"):
        pkpo_advantages(np.array([1.0, 0]), k=3)
    with pytest.raises(ValueError, match="needs n > k"):
        pkpo_advantages(np.array([1.0, 0, 0]), k=3, baseline="loo")
    with pytest.raises(ValueError, match="baseline must be one of"):
        pkpo_advantages(np.array([1.0, 0, 0]), k=2, baseline="mean")


# -- every outcome of a small group: exact expectations -----------------------------------------

ACTIONS = 3


def _exact_mean_gradient(theta: np.ndarray, n: int, advantage) -> np.ndarray:  # [ACTIONS]
    """E[(1/n)·Σ_j A_j (e_{a_j} - π)] over all 3^n action sequences (action 0 correct)."""
    pi = np.exp(theta - theta.max())
    pi /= pi.sum()
    eye = np.eye(ACTIONS)
    total = np.zeros(ACTIONS)
    for actions in itertools.product(range(ACTIONS), repeat=n):
        probability = float(np.prod(pi[list(actions)]))
        rewards = np.array([1.0 if a == 0 else 0.0 for a in actions])
        adv = advantage(rewards)
        total += probability * sum(adv[j] * (eye[a] - pi) for j, a in enumerate(actions)) / n
    return total


def _pass_rate_gradient(theta: np.ndarray) -> tuple[float, np.ndarray]:
    t = torch.tensor(theta, dtype=torch.float64, requires_grad=True)
    p = torch.softmax(t, dim=0)[0]
    (grad,) = torch.autograd.grad(p, t)
    return float(p.detach()), grad.numpy()


THETAS = [np.array([0.4, 0.0, -0.3]), np.array([-1.5, 0.2, 0.0])]  # p ≈ 0.43, 0.12


@pytest.mark.parametrize("theta", THETAS)
@pytest.mark.parametrize(
    ("n", "k", "baseline"),
    [(4, 2, "loo_minus_one"), (5, 3, "loo"), (5, 5, "none"), (5, 1, "loo_minus_one")],
)
def test_pkpo_is_unbiased_for_the_pass_at_k_gradient(theta, n, k, baseline) -> None:
    """E[ĝ] = ∇(1 - (1-p)^k) exactly, by autograd on θ: PKPO's claim, for every baseline."""
    t = torch.tensor(theta, dtype=torch.float64, requires_grad=True)
    p = torch.softmax(t, dim=0)[0]
    (target,) = torch.autograd.grad(1 - (1 - p) ** k, t)
    mean = _exact_mean_gradient(theta, n, lambda r: pkpo_advantages(r, k=k, baseline=baseline))
    np.testing.assert_allclose(mean, target.numpy(), atol=1e-12)


@pytest.mark.parametrize("theta", THETAS)
def test_passk_training_and_f_grpo_weights_hold_over_every_outcome(theta) -> None:
    """The closed forms `passk_training_weight` and `focal_grpo_weight` times ∇p are the exact
    mean gradients of their advantage functions over every outcome of a group of 5."""
    p, grad_p = _pass_rate_gradient(theta)
    mean = _exact_mean_gradient(theta, 5, lambda r: passk_training_advantages(r, k=2))
    np.testing.assert_allclose(
        mean, float(passk_training_weight(p, group_size=5, k=2)) * grad_p, atol=1e-12
    )
    focal = _exact_mean_gradient(theta, 5, lambda r: grpo_advantages(r) * focal_scale(r, gamma=1.5))
    np.testing.assert_allclose(
        focal, float(focal_grpo_weight(p, group_size=5, gamma=1.5)) * grad_p, atol=1e-12
    )


@pytest.mark.parametrize("n", [2, 4, 8, 16])
def test_closed_forms_equal_the_enumerated_implied_weights(n: int) -> None:
    p = np.array([0.03, 0.2, 0.5, 0.8, 0.97])
    for k in range(1, n + 1, 3):
        np.testing.assert_allclose(
            implied_weight(p, estimator="pkpo", group_size=n, objective_k=k),
            k * (1 - p) ** (k - 1),
            rtol=1e-9,
        )
        np.testing.assert_allclose(
            implied_weight(p, estimator="passk_training", group_size=n, objective_k=k),
            passk_training_weight(p, group_size=n, k=k),
            rtol=1e-9,
        )
        # Without the 1/σ scale: (1 - k/n)(1-p)^(k-1), by enumeration of K ~ Bin(n, p).
        bins = np.array([[comb(n, j) * q**j * (1 - q) ** (n - j) for j in range(n + 1)] for q in p])
        kept = np.array([j * comb(n - j, k) / comb(n, k) for j in range(n + 1)])
        np.testing.assert_allclose(
            bins @ kept / (n * p * (1 - p)), (1 - k / n) * (1 - p) ** (k - 1), rtol=1e-9
        )
    for gamma in (0.0, 0.5, 2.0):
        np.testing.assert_allclose(
            implied_weight(
                p,
                estimator="grpo",
                group_size=n,
                options=AdvantageOptions(focal_gamma=gamma),
            ),
            focal_grpo_weight(p, group_size=n, gamma=gamma),
            rtol=1e-9,
        )
    with pytest.raises(ValueError, match="group-relative"):
        implied_weight(p, estimator="raft", group_size=n, options=AdvantageOptions(focal_gamma=1.0))


def test_focal_scale() -> None:
    r = np.array([1.0, 0, 0, 1])  # p̂ = 1/2
    assert focal_scale(r, gamma=2.0) == pytest.approx(0.25)
    assert focal_scale(r, gamma=0.0) == 1.0
    assert focal_scale(np.ones(3), gamma=0.0) == 1.0  # 0^0 = 1: off means off
    assert focal_scale(np.array([0.8, 0.2]), gamma=1.0, positive_threshold=0.5) == 0.5
    with pytest.raises(ValueError, match="focal gamma must be >= 0"):
        focal_scale(r, gamma=-1.0)


# -- HORA's hit utility -------------------------------------------------------------------------


def _beta_integral(x: float, y: float) -> float:
    """∫₀¹ q^(x-1)(1-q)^(y-1) dq by Gauss-Legendre on two halves, q = u^s on [0, ½] and
    1 - q = v^s on [½, 1] with s = 2/min(x, y, 1): the endpoint singularities of exponents in
    (0, 1) become smooth factors u^(sx-1), v^(sy-1) with sx, sy ≥ 2."""
    nodes, weights = np.polynomial.legendre.leggauss(400)
    power = 2.0 / min(x, y, 1.0)
    top = 0.5 ** (1 / power)
    u = top * (nodes + 1) / 2
    jacobian = power * u ** (power - 1) * top / 2
    left = (u ** (power * (x - 1)) * (1 - u**power) ** (y - 1) * jacobian * weights).sum()
    right = (u ** (power * (y - 1)) * (1 - u**power) ** (x - 1) * jacobian * weights).sum()
    return float(left + right)


@pytest.mark.parametrize(("a", "b"), [(1.0, 1.0), (3.0, 9.0), (0.5, 2.5), (7.0, 1.5), (0.4, 0.6)])
def test_hit_utility_increment_by_integration(a: float, b: float) -> None:
    """E[p(1-p)^(m-1)] = B(a+1, b+m-1)/B(a, b) against quadrature of both integrals (no Beta
    function used on the expected side)."""
    for m in (1, 2, 5, 20):
        expected = _beta_integral(a + 1, b + m - 1) / _beta_integral(a, b)
        assert float(hit_utility_increment(a, b, sample=m)) == pytest.approx(expected, rel=1e-8)
    if (a, b) == (1.0, 1.0):  # Beta(1, 1): 1/(m(m+1)).
        m = np.arange(1, 9)
        np.testing.assert_allclose(hit_utility_increment(1.0, 1.0, sample=m), 1 / (m * (m + 1)))


def test_hit_utility_is_the_sum_of_its_increments() -> None:
    a, b = np.array([1.0, 2.0, 0.7]), np.array([1.0, 6.0, 3.0])
    h = hit_utility(a, b, max_samples=12)
    steps = np.stack([hit_utility_increment(a, b, sample=m) for m in range(1, 13)], axis=1)
    np.testing.assert_allclose(h[:, 1:], np.cumsum(steps, axis=1), rtol=1e-10)
    assert np.all(h[:, 0] == 0.0)
    np.testing.assert_allclose(h[0], np.arange(13) / np.arange(1, 14))  # n/(n+1) under Beta(1, 1)
    assert np.all(np.diff(steps, axis=1) < 0)  # concave: each sample adds less
    with pytest.raises(ValueError, match="integer >= 1"):
        hit_utility_increment(1.0, 1.0, sample=0)
