"""The update-side options of issue 38, by hand and over every outcome: W-REINFORCE's advantages
and its implied weight 1 + λ (exact: every outcome of a softmax bandit's group, against autograd),
UCPO's redistribution of the positive mass and the unlikeliness reward's rank penalty against
hand computations on fixed groups (the reference codes' formulas), and why the two declare no
f(p) objective (over every outcome, UCPO's mean gradient is not parallel to ∇p).

The bandit: 3 actions, a one-token response each, so a response's mean-token log-prob is
log π(a); "every outcome" sums over the 3^n action sequences of a group of n.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from adarl.algo.advantages import (
    POOL_ADVANTAGE,
    AdvantageOptions,
    grpo_advantages,
    w_reinforce_advantages,
)
from adarl.algo.implied import implied_weight
from adarl.algo.reweighting import (
    POSITIVE_REWEIGHTINGS,
    get_positive_reweighting,
    reweighting_names,
    ucpo_advantages,
    unlikeliness_rewards,
)

ACTIONS = 3


def _softmax(theta: np.ndarray) -> np.ndarray:
    pi = np.exp(theta - theta.max())
    return pi / pi.sum()


def _exact_mean_gradient(theta: np.ndarray, n: int, correct: set[int], advantage) -> np.ndarray:
    """E[(1/n)·Σ_j A_j (e_{a_j} - π)] over all 3^n action sequences; `advantage(rewards,
    logprobs)` gets the group's 0/1 rewards and each sample's log π(a_j)."""
    pi = _softmax(theta)
    eye = np.eye(ACTIONS)
    total = np.zeros(ACTIONS)
    for actions in itertools.product(range(ACTIONS), repeat=n):
        probability = float(np.prod(pi[list(actions)]))
        rewards = np.array([1.0 if a in correct else 0.0 for a in actions])
        adv = advantage(rewards, np.log(pi[list(actions)]))
        total += probability * sum(adv[j] * (eye[a] - pi) for j, a in enumerate(actions)) / n
    return total


def _pass_rate_gradient(theta: np.ndarray, correct: set[int]) -> np.ndarray:
    t = torch.tensor(theta, dtype=torch.float64, requires_grad=True)
    p = torch.softmax(t, dim=0)[sorted(correct)].sum()
    (grad,) = torch.autograd.grad(p, t)
    return grad.numpy()


# -- W-REINFORCE --------------------------------------------------------------------------------


def test_w_reinforce_by_hand() -> None:
    # λ on a correct sample, -1 on a wrong one; nothing centred, nothing scaled
    np.testing.assert_array_equal(
        w_reinforce_advantages(np.array([1.0, 0.0, 0.0, 1.0])), [0.1, -1.0, -1.0, 0.1]
    )
    # an all-wrong group still pushes its samples down, an all-correct one still pulls them up
    np.testing.assert_array_equal(w_reinforce_advantages(np.zeros(3)), [-1.0, -1.0, -1.0])
    np.testing.assert_array_equal(
        w_reinforce_advantages(np.ones(2), positive_weight=0.5), [0.5, 0.5]
    )
    # labels are r > threshold: 0.6 is wrong at the reference code's 0.7
    np.testing.assert_array_equal(
        w_reinforce_advantages(np.array([0.6, 0.9]), positive_threshold=0.7), [-1.0, 0.1]
    )
    with pytest.raises(ValueError, match="λ must be >= 0"):
        w_reinforce_advantages(np.ones(2), positive_weight=-0.1)


@pytest.mark.parametrize("lam", [0.0, 0.1, 0.5])
@pytest.mark.parametrize("n", [1, 2, 5, 8])
def test_w_reinforce_implied_weight_is_one_plus_lambda(lam: float, n: int) -> None:
    p = np.array([0.03, 0.2, 0.5, 0.8, 0.97])
    weight = implied_weight(
        p, estimator="w_reinforce", group_size=n, options=AdvantageOptions(w_reinforce_lambda=lam)
    )
    np.testing.assert_allclose(weight, 1.0 + lam, rtol=1e-12)


@pytest.mark.parametrize("theta", [np.array([0.4, 0.0, -0.3]), np.array([-1.5, 0.2, 0.0])])
def test_w_reinforce_mean_gradient_is_one_plus_lambda_times_grad_p(theta: np.ndarray) -> None:
    """Over every outcome of a group of 4, independent of the counting identity (★)."""
    mean = _exact_mean_gradient(
        theta, 4, {0}, lambda r, _: w_reinforce_advantages(r, positive_weight=0.1)
    )
    np.testing.assert_allclose(mean, 1.1 * _pass_rate_gradient(theta, {0}), atol=1e-12)


# -- UCPO -------------------------------------------------------------------------------------


def test_ucpo_by_hand() -> None:
    """GRPO's group (1, 1, 1, 0): A⁺ = 0.5, A⁻ = -1.5 (μ = 0.75, σ = 0.5); mean-token log-probs
    (-0.1, -0.5, -1.0, -0.3). Among the positives 1/q ∝ exp(-ℓ) = (e^0.1, e^0.5, e^1) =
    (1.105171, 1.648721, 2.718282), normalised (0.201962, 0.301292, 0.496746). S = 1.5, τ = 0.2:
    A_i = 0.8·0.5 + 0.2·1.5·u_i = (0.460589, 0.490388, 0.549024); the wrong sample keeps -1.5."""
    advantages = np.array([0.5, 0.5, 0.5, -1.5])
    logprobs = np.array([-0.1, -0.5, -1.0, -0.3])
    positive = np.array([True, True, True, False])
    out = ucpo_advantages(advantages, mean_logprobs=logprobs, positive=positive, tau=0.2)
    np.testing.assert_allclose(out, [0.460589, 0.490388, 0.549024, -1.5], atol=1e-6)
    assert out[:3].sum() == pytest.approx(1.5, abs=1e-12)  # the positive mass is kept
    # The reference's form for equal A: A_base·n_c·[(1 - τ)/n_c + τ(1/q_i)/Σ_j(1/q_j)]
    inverse = np.exp(-logprobs[:3])
    reference = 0.5 * 3 * ((1 - 0.2) / 3 + 0.2 * inverse / inverse.sum())
    np.testing.assert_allclose(out[:3], reference, rtol=1e-12)


def test_ucpo_edges() -> None:
    logprobs = np.array([-0.2, -3.0, -0.4])
    advantages = np.array([2.0, 2.0, -1.0])
    one = np.array([True, False, False])
    # fewer than two positives, or τ = 0: unchanged (the reference skips n_c < 2)
    np.testing.assert_array_equal(
        ucpo_advantages(advantages, mean_logprobs=logprobs, positive=one, tau=0.2), advantages
    )
    both = np.array([True, True, False])
    np.testing.assert_array_equal(
        ucpo_advantages(advantages, mean_logprobs=logprobs, positive=both, tau=0.0), advantages
    )
    # τ = 1: all of the mass S = 4 by 1/q: exp(0.2), exp(3.0) normalised
    full = ucpo_advantages(advantages, mean_logprobs=logprobs, positive=both, tau=1.0)
    share = np.exp([0.2, 3.0]) / np.exp([0.2, 3.0]).sum()
    np.testing.assert_allclose(full[:2], 4.0 * share, rtol=1e-12)
    # q clamped at 1e-6 as the reference does: a response 30 nats less likely than the other
    # has q ≈ 9e-14, counted as 1e-6, so the weights are (1, 1e6)/(1 + 1e6) (not 1/9e-14)
    far = ucpo_advantages(
        np.array([1.0, 1.0]), mean_logprobs=np.array([0.0, -30.0]), positive=both[:2], tau=1.0
    )
    q_first = 1.0 / (1.0 + np.exp(-30.0))
    np.testing.assert_allclose(far, 2.0 * np.array([1 / q_first, 1e6]) / (1 / q_first + 1e6))
    with pytest.raises(ValueError, match=r"tau must be in \[0, 1\]"):
        ucpo_advantages(advantages, mean_logprobs=logprobs, positive=both, tau=1.5)
    with pytest.raises(ValueError, match="one group"):
        ucpo_advantages(advantages, mean_logprobs=logprobs[:2], positive=both, tau=0.2)


def test_ucpo_declares_no_objective_because_its_gradient_is_not_along_grad_p() -> None:
    """Two correct actions (0 likely, 1 rare) and one wrong: over every outcome of a group of 4,
    GRPO's mean gradient is w·∇p (★ holds), UCPO's is not parallel to ∇p and pushes the rare
    correct action harder than GRPO does, relative to the likely one."""
    theta = np.array([1.2, -0.8, 0.0])
    correct = {0, 1}
    grad_p = _pass_rate_gradient(theta, correct)
    grpo = _exact_mean_gradient(theta, 4, correct, lambda r, _: grpo_advantages(r))
    ucpo = _exact_mean_gradient(
        theta,
        4,
        correct,
        lambda r, lp: ucpo_advantages(
            grpo_advantages(r), mean_logprobs=lp, positive=r > 0.5, tau=1.0
        ),
    )

    def cosine(a: np.ndarray, b: np.ndarray) -> float:
        return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))

    assert cosine(grpo, grad_p) == pytest.approx(1.0, abs=1e-12)
    assert 1.0 - cosine(ucpo, grad_p) > 1e-3  # measured 6.5e-3: a component off ∇p, not rounding
    assert ucpo[1] / ucpo[0] > grpo[1] / grpo[0]


# -- the unlikeliness reward -----------------------------------------------------------------


def test_unlikeliness_reward_by_hand() -> None:
    """Rewards (1, 1, 0, 1), mean-token log-probs (-0.2, -1.5, -0.7, -0.9): ascending, the ranks
    are (3, 0, 2, 1) (sample 1 the least likely). G = 4, β = 0.25: factors 1 - β·rank/4 =
    (0.8125, 1, 0.875, 0.9375), so r = (0.8125, 1, 0, 0.9375): the rarest correct sample keeps
    its reward, the likeliest loses most. GRPO on them: μ = 0.6875, deviations (0.125, 0.3125,
    -0.6875, 0.25), σ = √(0.6484375/3) = 0.464915, so A ∝ (0.26887, 0.67218, -1.47878, 0.53774)."""
    rewards = np.array([1.0, 1.0, 0.0, 1.0])
    logprobs = np.array([-0.2, -1.5, -0.7, -0.9])
    reshaped = unlikeliness_rewards(rewards, mean_logprobs=logprobs, beta=0.25)
    np.testing.assert_allclose(reshaped, [0.8125, 1.0, 0.0, 0.9375], rtol=1e-12)
    advantages = grpo_advantages(reshaped)
    np.testing.assert_allclose(advantages, [0.26887, 0.67218, -1.47878, 0.53774], atol=2e-5)
    # the rank order: the less likely a correct sample, the larger its advantage
    correct = np.flatnonzero(rewards > 0.5)
    by_likelihood = correct[np.argsort(logprobs[correct])]  # least likely first
    assert np.all(np.diff(advantages[by_likelihood]) < 0)


def test_unlikeliness_reward_edges() -> None:
    rewards = np.array([1.0, 1.0, 1.0])
    # ties rank in sampling order: the first of two equal log-probs is the "less likely"
    np.testing.assert_allclose(
        unlikeliness_rewards(rewards, mean_logprobs=np.array([-1.0, -1.0, -2.0]), beta=0.3),
        [1 - 0.3 / 3, 1 - 0.3 * 2 / 3, 1.0],
    )
    np.testing.assert_array_equal(
        unlikeliness_rewards(rewards, mean_logprobs=np.zeros(3), beta=0.0), rewards
    )
    with pytest.raises(ValueError, match=r"beta must be in \[0, 1\]"):
        unlikeliness_rewards(rewards, mean_logprobs=np.zeros(3), beta=1.5)
    with pytest.raises(ValueError, match="must be finite"):
        unlikeliness_rewards(rewards, mean_logprobs=np.array([0.0, -np.inf, 0.0]), beta=0.2)


def test_the_registry_composes_what_is_defined() -> None:
    assert set(reweighting_names()) == {"none", "ucpo", "unlikeliness"}
    assert POSITIVE_REWEIGHTINGS["ucpo"].stage == "advantages"
    assert POSITIVE_REWEIGHTINGS["unlikeliness"].stage == "rewards"
    assert get_positive_reweighting("none", advantage=POOL_ADVANTAGE) is None
    assert get_positive_reweighting("ucpo", advantage=POOL_ADVANTAGE) is not None
    assert get_positive_reweighting("unlikeliness", advantage="grpo") is not None
    # the unlikeliness reward needs an estimator that reads reward values; ucpo is the way
    with pytest.raises(ValueError, match=r"pooled family.*\['ucpo'\]"):
        get_positive_reweighting("unlikeliness", advantage=POOL_ADVANTAGE)
    with pytest.raises(ValueError, match="'pkpo' reads labels"):
        get_positive_reweighting("unlikeliness", advantage="pkpo")
    with pytest.raises(ValueError, match="unknown positive reweighting 'iq'"):
        get_positive_reweighting("iq", advantage="grpo")
