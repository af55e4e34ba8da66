"""Exact-gradient tests: every estimator's Monte-Carlo mean gradient on a tabular softmax bandit
equals w(p)·∇p for the weight it declares (`implied_weight`), and that weight is the declared
objective's f' (exactly when p is known; within a stated bound when p is estimated).

Tolerance convention: each of the P×A = 12 gradient components must lie within 3 standard
errors of its expectation (SE = sample std / √T over T independent trials, fixed seeds), plus
an absolute slack of 1e-4·max|expected|. The slack matters only for components that are constant
across trials (e.g. the hard prompt's single correct action in a balanced group with p known:
SE = 0), where events rarer than 1/T — such as ending unresolved, ≤ 5e-5 here — cannot show.
"""

from __future__ import annotations

import numpy as np
import pytest

from adarl.algo.advantages import (
    AdvantageOptions,
    ada_est_advantages,
    dr_grpo_advantages,
    grpo_advantages,
    maxrl_advantages,
    raft_advantages,
    reinforce_baseline_advantages,
    rloo_advantages,
    w_reinforce_advantages,
)
from adarl.algo.allocation import (
    ada_est_allocation,
    equal_prompt_weight_scale,
    gvm_allocation,
)
from adarl.algo.gate import rao_blackwell_pass_rate, terminal_counts
from adarl.algo.implied import balanced_none_weight, implied_weight
from adarl.algo.objectives import objective_weight
from adarl.algo.selection import Correction

from ._bandit import (
    Bandit,
    selected_group_gradients,
    simulate_pools,
    uniform_group_gradients,
    within_standard_errors,
)

TRIALS = 20_000
GROUP = 4


def _assert_matches(samples: np.ndarray, expected: np.ndarray) -> None:
    slack = 1e-4 * np.abs(expected).max()
    ok, z = within_standard_errors(samples, expected, sigmas=3.0, slack=slack)
    assert ok, f"max |mean - expected| = {z.max():.2f} SE (> 3); z =\n{np.round(z, 2)}"


# --- uniform groups -------------------------------------------------------------------------

UNIFORM_CASES = {
    # name: (advantage fn(rewards, p), implied_weight kwargs, declared weight w(p) or None)
    "rloo": (lambda r, p: rloo_advantages(r), {"estimator": "rloo"}, lambda p: np.ones_like(p)),
    "reinforce_baseline": (
        lambda r, p: reinforce_baseline_advantages(r, baseline=p),
        {"estimator": "reinforce_baseline"},
        lambda p: np.ones_like(p),
    ),
    "raft": (lambda r, p: raft_advantages(r), {"estimator": "raft"}, lambda p: np.ones_like(p)),
    "raft_positives": (
        lambda r, p: raft_advantages(r, normalization="positives"),
        {"estimator": "raft", "options": AdvantageOptions(raft_normalization="positives")},
        lambda p: (1 - (1 - p) ** GROUP) / p,  # log p behind the gate Pr[K > 0]
    ),
    "maxrl": (
        lambda r, p: maxrl_advantages(r),
        {"estimator": "maxrl"},
        lambda p: (1 - (1 - p) ** (GROUP - 1)) / p,  # log p truncated at n - 1 terms
    ),
    "dr_grpo": (
        lambda r, p: dr_grpo_advantages(r),
        {"estimator": "dr_grpo"},
        lambda p: np.full_like(p, (GROUP - 1) / GROUP),
    ),
    "grpo": (lambda r, p: grpo_advantages(r), {"estimator": "grpo"}, None),
    "w_reinforce": (  # λ = 0.1 on positives, -1 on negatives: (1 + λ)·∇p (linear)
        lambda r, p: w_reinforce_advantages(r),
        {"estimator": "w_reinforce"},
        lambda p: np.full_like(p, 1.1),
    ),
    "ada_est_known_p": (
        lambda r, p: ada_est_advantages(r, eps=1e-6, pass_rate=p),
        {"estimator": "ada_est", "pass_rate_estimate": "known"},
        lambda p: 1 / np.sqrt(p + 1e-6),
    ),
    "ada_est": (lambda r, p: ada_est_advantages(r, eps=1e-6), {"estimator": "ada_est"}, None),
}


@pytest.mark.parametrize("name", list(UNIFORM_CASES))
def test_uniform_group_estimators(bandit: Bandit, name: str) -> None:
    advantage, implied_kwargs, declared = UNIFORM_CASES[name]
    p = bandit.pass_rates
    rng = np.random.default_rng(11)
    samples = uniform_group_gradients(
        bandit,
        group_sizes=np.full(bandit.num_prompts, GROUP),
        advantage_fn=lambda rewards, x: advantage(rewards, p[x]),
        trials=TRIALS,
        rng=rng,
    )
    weight = implied_weight(p, group_size=GROUP, **implied_kwargs)
    _assert_matches(samples, bandit.weighted_gradient(weight))
    if declared is not None:  # the closed form quoted in the docs is the exact weight
        np.testing.assert_allclose(weight, declared(p), rtol=1e-9)


def test_rloo_and_reinforce_match_linear_objective_gradient(bandit: Bandit) -> None:
    """Directly against autograd ∇Σ_x p_x, no implied-weight function in between."""
    for advantage in (rloo_advantages, lambda r: reinforce_baseline_advantages(r, baseline=0.3)):
        samples = uniform_group_gradients(
            bandit,
            group_sizes=np.full(3, GROUP),
            advantage_fn=lambda rewards, x, a=advantage: a(rewards),
            trials=TRIALS,
            rng=np.random.default_rng(5),
        )
        _assert_matches(samples, bandit.objective_gradient("linear"))


def test_grpo_implied_weight_is_arcsin_in_the_limit() -> None:
    """GRPO's finite-n weight: exact sum; → 1/√(p(1-p)) as n → ∞ (seed 001 §Why arcsin).

    Stated bounds, ratio to the arcsin weight for p ∈ [0.1, 0.9]: n = 4 lies in [0.43, 0.71]
    (the gate u_4(p) and the small-sample σ shrink it, most at the extremes: GRPO-n4 is far from
    arcsin); n = 256 lies within 1% of 1.
    """
    p = np.linspace(0.1, 0.9, 9)
    arcsin = objective_weight(p, objective="arcsin")
    small = implied_weight(p, estimator="grpo", group_size=4) / arcsin
    large = implied_weight(p, estimator="grpo", group_size=256) / arcsin
    assert np.all((small > 0.43) & (small < 0.71)), small
    # Exact at p = 1/2 by hand: K=2 (prob 6/16) gives (4/16)/√(1/3), K∈{1,3} (8/16) give
    # (3/16)/(1/2): E = 0.1624 + 0.1875 = 0.3499; divided by √(1/4) → 0.6998.
    assert small[4] == pytest.approx(2 * (6 / 16 * 0.25 * np.sqrt(3) + 8 / 16 * 0.375), rel=1e-5)
    np.testing.assert_allclose(large, 1.0, atol=0.01)


def test_raft_positives_is_log_objective_behind_a_gate(bandit: Bandit) -> None:
    """raft(normalization="positives") vs autograd ∇Σ log p_x, scaled by the gate 1-(1-p)^n."""
    p = bandit.pass_rates
    samples = uniform_group_gradients(
        bandit,
        group_sizes=np.full(3, GROUP),
        advantage_fn=lambda rewards, x: raft_advantages(rewards, normalization="positives"),
        trials=TRIALS,
        rng=np.random.default_rng(6),
    )
    gate = 1 - (1 - p) ** GROUP
    _assert_matches(samples, gate[:, None] * bandit.objective_gradient("log"))


def test_maxrl_is_the_truncated_log_objective(bandit: Bandit) -> None:
    """MaxRL vs autograd of MaxRL's truncated objective Σ_x Σ_{t=1}^{n-1} -(1-p_x)^t/t, whose
    gradient is (1 - (1-p)^(n-1))/p·∇p: not the truncation at n that RAFT's positives reach
    (that one is 1 - (1-p)^n; at n = 4 and p = 0.5 they differ by 7%, ~20 SE here)."""
    p = bandit.pass_rates
    samples = uniform_group_gradients(
        bandit,
        group_sizes=np.full(3, GROUP),
        advantage_fn=lambda rewards, x: maxrl_advantages(rewards),
        trials=TRIALS,
        rng=np.random.default_rng(8),
    )
    gate = 1 - (1 - p) ** (GROUP - 1)
    _assert_matches(samples, gate[:, None] * bandit.objective_gradient("log"))
    wrong = 1 - (1 - p) ** GROUP
    ok, _ = within_standard_errors(
        samples, wrong[:, None] * bandit.objective_gradient("log"), sigmas=3.0, slack=0.0
    )
    assert not ok  # the test can tell the two truncations apart


# --- sequential sampling + balanced downsampling + correction --------------------------------

# Seq-Balance(2, 2) and Seq-Pos(2) with cap 96, one sample at a time: the probability of ending
# unresolved is ≤ 5e-5 for every prompt here (checked below) — negligible against the ~1% SE —
# and is in any case part of `implied_weight`'s exact expectation.
CAP = 96
RULES = {"seq_balance": {"k_pos": 2, "k_neg": 2}, "seq_pos": {"k_pos": 2, "k_neg": 0}}


@pytest.fixture(scope="module")
def pools(bandit: Bandit) -> dict:
    rng = np.random.default_rng(2024)
    return {
        rule: [
            simulate_pools(
                bandit, x, max_samples=CAP, round_size=1, trials=TRIALS, rng=rng, **counts
            )
            for x in range(bandit.num_prompts)
        ]
        for rule, counts in RULES.items()
    }


def _implied(rule: str, p: np.ndarray, **kwargs: object) -> np.ndarray:
    rule_kwargs = {"k": 2} if rule == "seq_pos" else {"k_pos": 2, "k_neg": 2}
    return implied_weight(
        p, estimator=rule, group_size=GROUP, max_samples=CAP, **rule_kwargs, **kwargs
    )


def _pass_rate(estimate: str, rule: str, p: float):
    """What the group builder passes as `pass_rate` for each p̃ estimate."""
    if estimate == "known":
        return p
    if estimate == "pool":
        return None
    return lambda total, positives: rao_blackwell_pass_rate(
        positives=positives, total=total, max_samples=CAP, **RULES[rule]
    )


@pytest.mark.parametrize("estimate", ["known", "pool", "unbiased"])
@pytest.mark.parametrize("correction", [c.value for c in Correction])
@pytest.mark.parametrize("rule", list(RULES))
def test_sequential_estimators(
    bandit: Bandit, pools: dict, rule: str, correction: str, estimate: str
) -> None:
    p = bandit.pass_rates
    samples = np.stack(
        [
            selected_group_gradients(
                bandit,
                x,
                pools[rule][x],
                group_size=GROUP,
                pass_rate=_pass_rate(estimate, rule, float(p[x])),
                unresolved_policy="keep_available",
                correction=correction,
                objective="log",
            )
            for x in range(bandit.num_prompts)
        ],
        axis=1,
    )
    weight = _implied(rule, p, correction=correction, objective="log", pass_rate_estimate=estimate)
    _assert_matches(samples, bandit.weighted_gradient(weight))


def test_caps_are_negligible_here(bandit: Bandit) -> None:
    for counts in RULES.values():
        for p in bandit.pass_rates:
            law = terminal_counts(float(p), max_samples=CAP, **counts)
            assert law.unresolved_probability() < 5e-5


def test_selection_correction_matches_declared_objective_when_p_known(
    bandit: Bandit, pools: dict
) -> None:
    """`selection` + Seq-Balance, p known: the MC mean is ∇Σ f(p_x) of the declared f, for
    several f (autograd), up to the unresolved mass (< 5e-5, see above)."""
    p = bandit.pass_rates
    balance_pools = pools["seq_balance"]
    for objective in ("log", "arcsin", "linear"):
        samples = np.stack(
            [
                selected_group_gradients(
                    bandit,
                    x,
                    balance_pools[x],
                    group_size=GROUP,
                    pass_rate=float(p[x]),
                    unresolved_policy="keep_available",
                    correction="selection",
                    objective=objective,
                )
                for x in range(3)
            ],
            axis=1,
        )
        _assert_matches(samples, bandit.objective_gradient(objective))
        weight = _implied(
            "seq_balance",
            p,
            correction="selection",
            objective=objective,
            pass_rate_estimate="known",
        )
        np.testing.assert_allclose(weight, objective_weight(p, objective=objective), rtol=1e-4)


def test_none_correction_on_balanced_groups_implies_half_logit_minus_p(bandit: Bandit) -> None:
    """Released Reinforce-Ada (A = r - p) on n/2 + n/2 groups: w = 1/(2p(1-p)) - 1, not 1/p."""
    p = np.linspace(0.1, 0.9, 9)
    weight = implied_weight(  # cap 200: unresolved mass < 1e-7 at these p
        p,
        estimator="seq_balance",
        group_size=GROUP,
        correction="none",
        pass_rate_estimate="known",
        max_samples=200,
    )
    np.testing.assert_allclose(weight, balanced_none_weight(p), rtol=1e-6)
    assert not np.allclose(weight, 1 / p, rtol=0.1)


def test_pool_estimate_bias_is_within_stated_bound() -> None:
    """p replaced by the pool estimate p̃ = N⁺/N (Seq-Balance(2, 2), n = 4, cap 96).

    Stated bounds on |w_p̃(p)/w_declared(p) - 1| for p ∈ [0.1, 0.9]:
      selection/log: ≤ 0.60 (w_p̃ = E[1-p̃]/(1-p)·(1/p); measured 0.09 at p ≤ 0.5 but 0.58 at
        p = 0.9, where the rule's forced k⁻ = 2 negatives make p̃ = N⁺/N far below p);
      none vs 1/(2p(1-p)) - 1: ≤ 0.08 (measured 0.064).
    The measurements above (`p_pool` cases) confirm these exact values by Monte-Carlo.
    """
    p = np.linspace(0.1, 0.9, 9)
    common = {"estimator": "seq_balance", "group_size": GROUP, "max_samples": CAP}
    selection = implied_weight(p, correction="selection", objective="log", **common) * p
    none = implied_weight(p, correction="none", **common) / balanced_none_weight(p)
    assert np.max(np.abs(selection - 1)) <= 0.60, selection
    assert np.max(np.abs(none - 1)) <= 0.08, none
    assert np.max(np.abs(selection - 1)) > 0.05  # the bias is real, not a rounding artefact


def test_rao_blackwell_estimate_makes_selection_log_unbiased(bandit: Bandit, pools: dict) -> None:
    """With p̂ = Pr[r₁ = 1 | N, N⁺] (unbiased under the stopping rule) the `selection`
    coefficient of the log objective, h(p̂) = 1 - p̂, is unbiased: Seq-Balance + selection/log
    then matches autograd ∇Σ log p_x with no p known (cap mass < 5e-5, as above); the exact
    weight equals 1/p within 1e-4 whereas the pool estimate p̃ misses by up to 58%."""
    p = bandit.pass_rates
    samples = np.stack(
        [
            selected_group_gradients(
                bandit,
                x,
                pools["seq_balance"][x],
                group_size=GROUP,
                pass_rate=_pass_rate("unbiased", "seq_balance", float(p[x])),
                unresolved_policy="keep_available",
                correction="selection",
                objective="log",
            )
            for x in range(3)
        ],
        axis=1,
    )
    _assert_matches(samples, bandit.objective_gradient("log"))
    grid = np.linspace(0.1, 0.9, 9)
    weight = _implied(
        "seq_balance",
        grid,
        correction="selection",
        objective="log",
        pass_rate_estimate="unbiased",
    )
    np.testing.assert_allclose(weight * grid, 1.0, atol=1e-4)


def test_unresolved_prompts_are_part_of_the_expectation(bandit: Bandit) -> None:
    """Released-code shape: rounds of 4, cap 8 — prompts often end unresolved. Each policy's MC
    mean matches the exact expectation, which counts unresolved prompts by policy."""
    p = bandit.pass_rates
    rng = np.random.default_rng(8)
    pools = [
        simulate_pools(
            bandit, x, k_pos=2, k_neg=2, max_samples=8, round_size=4, trials=TRIALS, rng=rng
        )
        for x in range(3)
    ]
    assert pools[0].resolved.mean() < 0.5  # the hard prompt is mostly unresolved: a real test
    for policy in ("keep_available", "zero_advantage", "drop"):
        samples = np.stack(
            [
                selected_group_gradients(
                    bandit,
                    x,
                    pools[x],
                    group_size=GROUP,
                    pass_rate=None,
                    unresolved_policy=policy,
                    correction="none",
                )
                for x in range(3)
            ],
            axis=1,
        )
        weight = implied_weight(
            p,
            estimator="seq_balance",
            group_size=GROUP,
            correction="none",
            max_samples=8,
            round_size=4,
            unresolved_policy=policy,
        )
        _assert_matches(samples, bandit.weighted_gradient(weight))


# --- allocation-driven estimators ------------------------------------------------------------


def test_ada_est_optimises_log_objective_with_sample_mean_loss() -> None:
    """Reinforce-Ada-Est, p known: n_i ∝ 1/√p_i samples, A = (r - p)/√p, batch per-sample mean
    ⇒ prompt weight ∝ n_i/√p_i ∝ 1/p_i: ∇Σ log p up to one global constant.

    Pass rates 1/4, 1/9, 1/16 make 1/√p = 2, 3, 4, so budget 36 gives n = 8, 12, 16 exactly.
    """
    p_target = np.array([1 / 4, 1 / 9, 1 / 16])
    logits = np.log(np.stack([[q, (1 - q) / 3, (1 - q) / 3, (1 - q) / 3] for q in p_target]))
    rewards = np.array([[1, 0, 0, 0]] * 3, dtype=np.float64)
    bandit = Bandit(logits=logits, rewards=rewards)
    p = bandit.pass_rates
    sizes = ada_est_allocation(p, budget=36, eps=1e-9, min_samples=1, max_samples=64)
    np.testing.assert_array_equal(sizes, [8, 12, 16])
    samples = uniform_group_gradients(
        bandit,
        group_sizes=sizes,
        advantage_fn=lambda r, x: ada_est_advantages(r, eps=1e-9, pass_rate=p[x]),
        trials=TRIALS,
        rng=np.random.default_rng(9),
    )
    # Per-sample mean over the batch: prompt x's group gradient counts with n_x / Σn.
    batch = samples * (sizes / sizes.sum())[None, :, None]
    constant = (sizes * np.sqrt(p)).mean() / sizes.sum()  # n_x/√p_x / Σn = constant / p_x
    _assert_matches(batch, constant * bandit.objective_gradient("log"))
    # With the group mean r̄ instead of p the exact weight deviates from 1/√p; stated bound for
    # these (p, n) pairs: ≤ 0.45 relative (measured 0.15, 0.31, 0.44: hard prompts' groups are
    # often all-negative, the gate u_n(p)).
    est = np.array(
        [
            implied_weight(
                p[x],
                estimator="ada_est",
                group_size=int(sizes[x]),
                options=AdvantageOptions(ada_est_eps=1e-9),
            )
            for x in range(3)
        ]
    )
    assert np.max(np.abs(est * np.sqrt(p) - 1)) <= 0.45, est * np.sqrt(p)


def test_gvm_allocation_keeps_the_declared_objective(bandit: Bandit) -> None:
    """GVM: n_i ∝ G_i/√(p_i + α/p_i) with exact G_i; RLOO groups of n_i. With per-prompt
    normalisation (1/n_i, or the sample-mean loss rescaled by n̄/n_i) the batch gradient is
    ∇Σ p_x whatever the allocation; without the rescale it is Σ (n_x/n̄) ∇p_x."""
    p = bandit.pass_rates
    grad_norms = bandit.positive_action_gradient_norm()
    sizes = gvm_allocation(grad_norms, p, budget=24, min_samples=2, max_samples=16)
    assert sizes.sum() == 24 and len(set(sizes.tolist())) > 1  # a non-uniform allocation
    samples = uniform_group_gradients(
        bandit,
        group_sizes=sizes,
        advantage_fn=lambda r, x: rloo_advantages(r),
        trials=TRIALS,
        rng=np.random.default_rng(10),
    )
    _assert_matches(samples, bandit.objective_gradient("linear"))
    sample_mean = samples * (sizes / sizes.mean())[None, :, None]  # what a per-sample mean does
    _assert_matches(sample_mean, bandit.weighted_gradient(sizes / sizes.mean()))
    rescaled = sample_mean * equal_prompt_weight_scale(sizes)[None, :, None]
    _assert_matches(rescaled, bandit.objective_gradient("linear"))
    # GVM-GRPO: the exact finite-n weights differ per prompt because n_i differs.
    grpo = uniform_group_gradients(
        bandit,
        group_sizes=sizes,
        advantage_fn=lambda r, x: grpo_advantages(r),
        trials=TRIALS,
        rng=np.random.default_rng(12),
    )
    weight = np.array(
        [implied_weight(p[x], estimator="grpo", group_size=int(sizes[x])) for x in range(3)]
    )
    _assert_matches(grpo, bandit.weighted_gradient(weight))
