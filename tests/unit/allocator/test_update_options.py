"""Issue 38's update-side options as configuration, through the real group builder built from the
config's plan: W-REINFORCE, the likelihood-aware reweightings of the positives (UCPO after any
estimator, the default's pooled logit on whole pools included; the unlikeliness reward before
GRPO) against hand computations on fixed groups of rewards and behaviour log-probs, the coverage
phase (which builder trains when), the validation messages and what each run declares. (The
allocator's rollout clock and its resume: tests/component/allocator/test_allocator_resume.py;
the statistical claims through the real components: test_allocator_coverage.py.)"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from adarl.algo.advantages import grpo_advantages, pkpo_advantages
from adarl.algo.implied import log_gate
from adarl.allocator import build_group_builder
from adarl.allocator.build import build_coverage_phase
from adarl.allocator.group_builder import GroupBuilder
from adarl.allocator.objective import PASS_RATES, declare_objective
from adarl.config import AdarlConfig, validate_combinations
from adarl.config.allocator import AllocatorConfig, GroupConfig, SequentialConfig
from adarl.types import Completion, FinishReason, Group, Rollout, ScoredRollout

P = np.array(PASS_RATES)


def _grpo(n: int = 8, **group: object) -> AllocatorConfig:
    """`+experiment=grpo allocator.uniform_samples_per_prompt=n` with `group` overrides."""
    return AllocatorConfig(
        sampler="uniform",
        uniform_samples_per_prompt=n,
        group=GroupConfig(**{"group_size": None, "advantage": "grpo", **group}),
    )


def _default(**group: object) -> AllocatorConfig:
    """`+experiment=ada_coverage`'s allocator with `group` overrides."""
    return AllocatorConfig(
        sampler="seq_balance",
        max_samples_per_prompt=16,
        sequential=SequentialConfig(k_pos=1, k_neg=1, initial_samples=8),
        group=GroupConfig(
            **{"group_size": None, "objective": "logit", "correction": "selection", **group}
        ),
    )


def _pool(
    rewards: Sequence[float], token_logprobs: Sequence[Sequence[float]]
) -> list[ScoredRollout]:
    """One prompt's pool: each rollout's reward and its response's behaviour log-probs."""
    return [
        ScoredRollout(
            rollout=Rollout(
                request_id=f"r{i}",
                prompt_id="p",
                prompt_token_ids=(1, 2),
                completion=Completion(
                    token_ids=tuple(range(10, 10 + len(lp))),
                    logprobs=tuple(lp),
                    finish_reason=FinishReason.STOP,
                ),
                weight_version=0,
            ),
            reward=float(r),
        )
        for i, (r, lp) in enumerate(zip(rewards, token_logprobs, strict=True))
    ]


def _build(
    config: AllocatorConfig, pool: list[ScoredRollout], builder: GroupBuilder | None = None
) -> Group:
    """`pool`'s group by `config`'s builder (or by `builder`)."""
    builder = builder or build_group_builder(config.plan())
    group = builder.build(prompt_id="p", pool=pool, resolved=True, step=0, prior_pass_rate=0.5)
    assert group is not None
    return group


# Mean-token log-probs (-0.1, -0.5, -1.0, -0.3): the responses have different lengths, so the
# mean, not the sum, is what ranks them (sums: -0.1, -1.5, -1.0, -0.6).
LOGPROBS = [[-0.1], [-0.5, -0.5, -0.5], [-1.0], [-0.3, -0.3]]


# -- W-REINFORCE --------------------------------------------------------------------------------


def test_w_reinforce_through_the_group_builder_and_its_declaration() -> None:
    config = _grpo(4, advantage="w_reinforce", w_reinforce_lambda=0.1)
    mixed = _build(config, _pool([1, 0, 0, 1], LOGPROBS))
    assert mixed.advantages == (0.1, -1.0, -1.0, 0.1)
    # no baseline: an all-wrong group still pushes down (GRPO's would be all zero)
    assert _build(config, _pool([0, 0, 0, 0], LOGPROBS)).advantages == (-1.0,) * 4
    declaration = declare_objective(config.plan())
    assert declaration.exact
    assert declaration.statement.startswith("p (weight 1 + λ = 1.1; W-REINFORCE")
    np.testing.assert_allclose(list(declaration.implied_weight.values()), 1.1, rtol=1e-12)
    half = declare_objective(_grpo(8, advantage="w_reinforce", w_reinforce_lambda=0.5).plan())
    np.testing.assert_allclose(list(half.implied_weight.values()), 1.5, rtol=1e-12)


# -- UCPO -------------------------------------------------------------------------------------


def test_ucpo_after_grpo_by_hand() -> None:
    """The hand computation of tests/unit/algo/test_update_options.py::test_ucpo_by_hand through
    the builder: GRPO's (0.5, 0.5, 0.5, -1.5) (its ε: × 1/(1 + 2e-6)) become (0.460589,
    0.490388, 0.549024, -1.5), the positive mass 1.5 kept."""
    group = _build(_grpo(4, positive_reweighting="ucpo"), _pool([1, 1, 1, 0], LOGPROBS))
    scale = 0.5 / (0.5 + 1e-6)
    np.testing.assert_allclose(
        group.advantages, np.array([0.460589, 0.490388, 0.549024, -1.5]) * scale, atol=1e-6
    )
    assert sum(group.advantages[:3]) == pytest.approx(1.5 * scale, rel=1e-12)


def test_ucpo_composes_with_the_default_pooled_logit_on_whole_pools() -> None:
    """The default's pool of 4, (1, 1, 1, 0): logit's corrected advantages ±n/n± are A⁺ = 4/3,
    A⁻ = -4, then × pool_weight/N = 8/4 = 2: A⁺ = 8/3, A⁻ = -8. UCPO keeps the positive mass
    S = 8 and moves τ = 0.5 of it by 1/q: A_i = 0.5·8/3 + 0.5·8·u_i, u = (0.201962, 0.301292,
    0.496746) (the log-probs of the hand computation): (2.141181, 2.538501, 3.320318)."""
    pool = _pool([1, 1, 1, 0], LOGPROBS)
    plain = _build(_default(), pool)
    assert plain.advantages == pytest.approx((8 / 3, 8 / 3, 8 / 3, -8.0))
    group = _build(_default(positive_reweighting="ucpo", ucpo_tau=0.5), pool)
    np.testing.assert_allclose(group.advantages, [2.141181, 2.538501, 3.320318, -8.0], atol=1e-6)
    assert sum(group.advantages[:3]) == pytest.approx(8.0, rel=1e-12)  # the positive mass
    assert group.sequence_weight == plain.sequence_weight == 2.0  # the pool still weighs n = 8
    # the less likely the correct sample, the larger its share
    assert group.advantages[0] < group.advantages[1] < group.advantages[2]


def test_ucpo_after_w_reinforce_moves_lambda_mass() -> None:
    group = _build(
        _grpo(4, advantage="w_reinforce", positive_reweighting="ucpo", ucpo_tau=1.0),
        _pool([1, 1, 0, 0], LOGPROBS),
    )
    share = np.exp([0.1, 0.5]) / np.exp([0.1, 0.5]).sum()  # 1/q by exp(-ℓ) over the positives
    np.testing.assert_allclose(group.advantages, [*(0.2 * share), -1.0, -1.0], rtol=1e-12)


# -- the unlikeliness reward -----------------------------------------------------------------


def test_unlikeliness_before_grpo_by_hand() -> None:
    """Rewards (1, 1, 0, 1) with mean-token log-probs (-0.2, -1.5, -0.7, -0.9): ranks (3, 0, 2,
    1), β = 0.25, G = 4: rewards (0.8125, 1, 0, 0.9375), GRPO's A = (0.26887, 0.67218, -1.47878,
    0.53774) (tests/unit/algo/test_update_options.py). The group keeps the verifier's rewards and
    labels: the reshaping only enters the advantages."""
    logprobs = [[-0.2, -0.2], [-1.5], [-0.7], [-0.9, -0.9, -0.9]]
    pool = _pool([1, 1, 0, 1], logprobs)
    group = _build(_grpo(4, positive_reweighting="unlikeliness"), pool)
    np.testing.assert_allclose(group.advantages, [0.26887, 0.67218, -1.47878, 0.53774], atol=2e-5)
    reshaped = np.array([0.8125, 1.0, 0.0, 0.9375])
    np.testing.assert_allclose(group.advantages, grpo_advantages(reshaped), rtol=1e-12)
    assert [s.reward for s in group.rollouts] == [1.0, 1.0, 0.0, 1.0]
    assert group.pool_positives == 3
    # the rank order: rarer correct samples (1, then 3, then 0) get larger advantages
    assert group.advantages[1] > group.advantages[3] > group.advantages[0] > 0
    # F-GRPO's factor reads the verifier's labels (3 of 4), not the reshaped rewards
    focal = _build(_grpo(4, positive_reweighting="unlikeliness", focal_gamma=1.0), pool)
    np.testing.assert_allclose(focal.advantages, np.array(group.advantages) * 0.25, rtol=1e-12)


# -- the declarations and the validation -------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "words"),
    [
        (_default(positive_reweighting="ucpo"), "UCPO (τ = 0.2)"),
        (_grpo(positive_reweighting="ucpo", ucpo_tau=0.5), "UCPO (τ = 0.5)"),
        (_grpo(positive_reweighting="unlikeliness"), "the unlikeliness reward (β = 0.25)"),
    ],
)
def test_a_reweighting_declares_no_objective(config: AllocatorConfig, words: str) -> None:
    declaration = declare_objective(config.plan())
    assert words in declaration.statement
    assert "declares no f(p) objective" in declaration.statement
    assert not declaration.exact and not declaration.implied_weight and not declaration.gate


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (
            _default(positive_reweighting="unlikeliness"),
            r"positive_reweighting='unlikeliness' with allocator\.group\.advantage='pool'.*"
            r"\['ucpo'\]",
        ),
        (
            _grpo(advantage="pkpo", objective_k=4, positive_reweighting="unlikeliness"),
            r"'pkpo' reads labels",
        ),
        (_grpo(positive_reweighting="iq"), r"positive_reweighting='iq' is not one of"),
        (_grpo(ucpo_tau=1.5), r"ucpo_tau=1.5 must be in \[0.0, 1.0\]"),
        (_grpo(unlikeliness_beta=-0.1), r"unlikeliness_beta=-0.1 must be in \[0.0, 1.0\]"),
        (_grpo(w_reinforce_lambda=-1.0), r"w_reinforce_lambda=-1.0 must be in \[0.0, inf\]"),
        (_grpo(coverage_phase_rollouts=-1), r"coverage_phase_rollouts=-1 must be >= 0"),
        (
            _default(coverage_phase_rollouts=10, coverage_objective="pass@8"),
            r"coverage_objective='pass@8' is not one of .*null: the run's own",
        ),
        (
            _grpo(coverage_phase_rollouts=1000),
            r"needs the phase's objective or estimator.*coverage_advantage",
        ),
        (_grpo(coverage_advantage="pkpo"), r"coverage_advantage='pkpo' names the coverage phase"),
        (
            _grpo(coverage_phase_rollouts=1000, coverage_objective="log"),
            r"coverage_objective='log' is the declared f of pooled advantages.*coverage_advantage",
        ),
        (
            _default(coverage_phase_rollouts=1000, coverage_objective="logit"),
            r"name what the run trains already.*coverage_phase_rollouts=0",
        ),
        (
            AllocatorConfig(
                sampler="ada_est",
                group=GroupConfig(
                    advantage="ada_est", coverage_phase_rollouts=1000, coverage_advantage="grpo"
                ),
            ),
            r"sampler='ada_est': its allocation is paired with its own advantage",
        ),
        (
            _grpo(4, coverage_phase_rollouts=1000, coverage_advantage="pkpo"),
            r"the coverage phase \(allocator\.group\.coverage_\*\): .*'pkpo' with objective_k=8 "
            r"needs groups of at least 8",
        ),
    ],
)
def test_validation_names_the_key_and_the_fix(config: AllocatorConfig, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        config.validate()


# -- coverage first, accuracy after ------------------------------------------------------------


def test_the_coverage_phase_builds_until_its_rollouts_then_the_run_s_own() -> None:
    config = _grpo(8, objective_k=4, coverage_phase_rollouts=1000, coverage_advantage="pkpo")
    phase = build_coverage_phase(config.plan())
    assert phase is not None and phase.active
    run_s_own = build_group_builder(config.plan())
    rewards = [1, 0, 0, 0, 1, 0, 0, 0]
    pool = _pool(rewards, [[-0.5]] * 8)
    phase.observe(999)
    assert phase.active and phase.metrics(trained_in_phase=True) == {"signal/coverage_phase": 1}
    first = _build(config, pool, phase.builder_for_step(run_s_own))
    np.testing.assert_allclose(first.advantages, pkpo_advantages(np.array(rewards), k=4))
    phase.observe(1)
    assert not phase.active and phase.builder_for_step(run_s_own) is run_s_own
    np.testing.assert_allclose(
        _build(config, pool, run_s_own).advantages, grpo_advantages(np.array(rewards))
    )
    # Its clock is its state.
    again = build_coverage_phase(config.plan())
    assert again is not None
    again.load_state_dict(phase.state_dict())
    assert again.rollouts_observed == 1000 and not again.active


def test_the_declaration_prints_both_phases() -> None:
    config = _grpo(8, objective_k=4, coverage_phase_rollouts=20_000, coverage_advantage="pkpo")
    declaration = declare_objective(config.plan())
    assert declaration.statement.startswith(
        "for its first 20000 training rollouts (to the end of the step that reaches them), "
        "pass@4: 1 - (1 - p)^4 (weight 4(1 - p)^3), exactly (PKPO"
    )
    assert "; after them, GRPO's implicit objective" in declaration.statement
    assert "FLAT" not in declaration.statement
    assert not declaration.exact  # GRPO's own statement is an n → ∞ one
    grpo = declare_objective(_grpo(8).plan())
    assert declaration.implied_weight == grpo.implied_weight  # the dict: the run's own phase


def test_pass_at_k_is_flat_under_the_default_sampler_and_log_is_not() -> None:
    """Under Seq-Balance(1, 1) after a first draw of 8 the unbiased p̂ is 0, ½ or 1 (½ when the
    first two labels differ), and pass@8's correction h(p̂) = 8p̂(1 - p̂)^8 is 0 at 0 and 1: the
    exact implied weight is E[h(p̂)·1{both labels}]/(p(1 - p)) = 2p(1 - p)·h(½)/(p(1 - p)) =
    2h(½) = 1/32 at every p, so that phase is refused (issue 39.3's refusal), naming the phase's
    keys. log p's correction h = 1 - p̂ is linear: its weight is 1/p gated by 1 - (1 - p)^15."""
    flat = _default(coverage_phase_rollouts=20_000, coverage_objective="pass_at_k").plan()
    with pytest.raises(ValueError) as refused:
        declare_objective(flat)
    message = str(refused.value)
    assert message.startswith("the coverage phase (allocator.group.coverage_objective='pass_at_k'")
    assert "0.05: 0.0312, 0.1: 0.0313" in message and "0.9: 0.0313" in message
    assert "flat in p" in message and "coverage_objective=log" in message
    linear = declare_objective(
        _default(coverage_phase_rollouts=20_000, coverage_objective="linear").plan()
    )
    assert "its weight is FLAT in p" in linear.statement.split("; after them, ")[0]
    log = declare_objective(
        _default(coverage_phase_rollouts=20_000, coverage_objective="log").plan()
    )
    assert "FLAT" not in log.statement and log.exact
    assert log.statement.startswith(
        "for its first 20000 training rollouts (to the end of the step that reaches them), "
        "log p (weight 1/p), gated by 1 - (1 - p)^15 at cap 16 [implied weight w by p: 0.05: 10.7"
    )
    assert "; after them, logit p = log p - log(1 - p)" in log.statement
    first = declare_objective(_default(objective="log").plan())
    np.testing.assert_allclose(
        list(first.implied_weight.values()), log_gate(P, max_samples=16) / P, rtol=1e-9
    )


def test_the_coverage_phase_meets_the_other_areas_checks() -> None:
    """DRO's R3 rewards are real-valued: a coverage phase on PKPO's labels is refused as the run's
    own advantage would be; a uniform phase after pooled advantages takes no correction."""
    config = AdarlConfig()
    config.allocator = _grpo(
        8, objective_k=4, coverage_phase_rollouts=100, coverage_advantage="pkpo"
    )
    config.dro.reward = "r3"
    with pytest.raises(ValueError, match=r"dro\.reward=r3 with allocator\.group\.advantage='pkpo'"):
        validate_combinations(config)
    phase = _default(coverage_phase_rollouts=100, coverage_advantage="grpo").coverage_phase_config()
    assert phase is not None and phase.group.correction == "none"
    assert phase.group.objective == "logit" and phase.group.coverage_phase_rollouts == 0
