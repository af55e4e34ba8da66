"""The coverage options as configuration: validation that names the key and the fix, what each run
declares it optimises (statements and exactness flags against the closed forms), the group
builder's advantages, and HORA's split against a brute-force search over every allocation.
(The statistical claims, through the real components, are in
tests/component/allocator/test_allocator_coverage.py.)"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from adarl.algo.advantages import (
    focal_grpo_weight,
    focal_scale,
    grpo_advantages,
    passk_training_advantages,
    passk_training_weight,
)
from adarl.algo.curation import hit_utility
from adarl.algo.implied import log_gate
from adarl.allocator import build_allocator, build_group_builder
from adarl.allocator.build import value_objective
from adarl.allocator.objective import PASS_RATES, declare_objective
from adarl.allocator.samplers.base import PromptHistory, PromptStatus
from adarl.allocator.samplers.knapsack import KnapsackSampler
from adarl.config.allocator import AllocatorConfig, CurationConfig, GroupConfig, SequentialConfig
from adarl.types import Completion, FinishReason, Rollout, ScoredRollout

P = np.array(PASS_RATES)


def _uniform(**group: object) -> AllocatorConfig:
    return AllocatorConfig(
        sampler="uniform", uniform_samples_per_prompt=8, group=GroupConfig(group_size=None, **group)
    )


def _hora(**curation: object) -> AllocatorConfig:
    return AllocatorConfig(
        sampler="knapsack",
        mean_samples_per_prompt=8,
        group=GroupConfig(group_size=None, advantage="grpo"),
        curation=CurationConfig(**{"knapsack_value": "hora", "explore_fraction": 0.0, **curation}),
    )


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (_uniform(objective_k=0), r"objective_k=0 must be an integer >= 1"),
        (_uniform(advantage="grpo", focal_gamma=-1.0), r"focal_gamma=-1.0 must be >= 0"),
        (
            _uniform(advantage="raft", focal_gamma=1.0),
            r"focal_gamma=1.0 \(F-GRPO\) multiplies a group-relative advantage.*"
            r"advantage=grpo.*focal_gamma=0",
        ),
        (
            AllocatorConfig(
                sampler="seq_balance", group=GroupConfig(advantage="grpo", focal_gamma=1.0)
            ),
            r"sequential sampler's pool stops on its labels.*sampler=uniform",
        ),
        (
            _uniform(advantage="passk_training", objective_k=16),
            r"objective_k=16 needs groups of at least 16 samples.*samples_per_prompt",
        ),
        (
            _uniform(advantage="pkpo", objective_k=8, pkpo_baseline="loo"),
            r"at least 9 samples.*pkpo_baseline=loo_minus_one",
        ),
        (
            AllocatorConfig(sampler="seq_balance", group=GroupConfig(advantage="pkpo")),
            r"advantage='pkpo' needs uniform groups.*sampler=uniform or dynamic_filter",
        ),
        (
            AllocatorConfig(
                sampler="knapsack",
                group=GroupConfig(group_size=None, advantage="pkpo", objective_k=4),
            ),
            r"at least 4 samples.*curation\.min_samples_per_prompt allows 2",
        ),
        (_uniform(pkpo_baseline="mean"), r"pkpo_baseline='mean' is not one of"),
        (
            _hora(explore_fraction=0.05),
            r"explore_fraction=0.05 with knapsack_value=hora.*explore_fraction=0",
        ),
        (
            _hora(candidates_per_step=300),
            r"hora gives each of 300 candidates.*over the budget of 512.*<= 256",
        ),
    ],
)
def test_invalid_coverage_options_name_the_key_and_the_fix(
    config: AllocatorConfig, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        config.validate()


def test_declarations_state_each_objective_exactly() -> None:
    pkpo = declare_objective(_uniform(advantage="pkpo", objective_k=4).plan())
    assert pkpo.exact
    assert "pass@4: 1 - (1 - p)^4 (weight 4(1 - p)^3), exactly (PKPO" in pkpo.statement
    np.testing.assert_allclose(list(pkpo.implied_weight.values()), 4 * (1 - P) ** 3, rtol=1e-9)

    passk = declare_objective(_uniform(advantage="passk_training", objective_k=4).plan())
    assert passk.exact and "scaled per prompt by 1/σ (Pass@k Training)" in passk.statement
    np.testing.assert_allclose(
        list(passk.implied_weight.values()), passk_training_weight(P, group_size=8, k=4)
    )

    focal = declare_objective(_uniform(advantage="grpo", focal_gamma=2.0).plan())
    assert focal.exact and "weighted by (1 - K/n)^2" in focal.statement
    np.testing.assert_allclose(
        list(focal.implied_weight.values()), focal_grpo_weight(P, group_size=8, gamma=2.0)
    )
    assert not declare_objective(_uniform(advantage="rloo", focal_gamma=1.0).plan()).exact

    # Dynamic filter's conditioning on mixed groups is not in the closed form: not exact.
    filtered = AllocatorConfig(
        sampler="dynamic_filter",
        uniform_samples_per_prompt=8,
        group=GroupConfig(group_size=None, advantage="pkpo", objective_k=4),
    )
    assert not declare_objective(filtered.plan()).exact


def test_a_correction_that_optimises_another_objective_is_refused() -> None:
    """Selection-corrected pass@8 with the unbiased p̂: h(p̂) = 8p̂(1-p̂)^8 is not linear, so the
    exact weight is pass@8's times a factor that exceeds 1 at high p (a gate cannot): refused,
    naming the weight and what to use instead. After the default's draw (first 8, then
    Seq-Balance(1, 1)) p̂ takes only 0, ½ and 1 and the weight is flat: the linear objective,
    refused too. log p stays exact, logit and arcsin (whose weight is f' times a gate ≤ 1) pass."""

    def config(objective: str, **sequential: int) -> AllocatorConfig:
        return AllocatorConfig(
            sampler="seq_balance",
            max_samples_per_prompt=16,
            sequential=SequentialConfig(**sequential),
            group=GroupConfig(
                correction="selection", objective=objective, objective_k=8, group_size=None
            ),
        )

    with pytest.raises(ValueError) as refused:
        declare_objective(config("pass_at_k").plan())
    message = str(refused.value)
    assert (
        "allocator.group.objective='pass_at_k' is not what this configuration optimises" in message
    )
    assert "which a gate cannot be" in message and "allocator.group.advantage=pkpo" in message
    default_draw = {"k_pos": 1, "k_neg": 1, "initial_samples": 8}
    for objective in ("pass_at_k", "arcsin", "power"):
        with pytest.raises(ValueError, match="flat in p: the linear objective p"):
            declare_objective(config(objective, **default_draw).plan())
    assert declare_objective(config("log").plan()).exact
    for objective in ("logit", "arcsin"):
        declare_objective(config(objective).plan())  # its weight is f' times a gate: declared
    np.testing.assert_allclose(
        list(declare_objective(config("log").plan()).gate.values()),
        log_gate(P, max_samples=16),
        rtol=1e-9,
    )


def test_hora_declares_grpo_at_each_planned_n() -> None:
    declaration = declare_objective(_hora().plan())
    assert "HORA's hit utility 1 - E[(1-p)^n]" in declaration.statement
    assert "each prompt at its own planned group size n_x" in declaration.statement
    assert not declaration.exact  # GRPO's own statement is an n → ∞ one


def _scored(reward: float) -> ScoredRollout:
    completion = Completion(
        token_ids=(1,), logprobs=(0.0,), finish_reason=FinishReason.STOP, text="x"
    )
    rollout = Rollout(
        request_id="r",
        prompt_id="q",
        prompt_token_ids=(1,),
        completion=completion,
        weight_version=0,
    )
    return ScoredRollout(rollout=rollout, reward=reward)


@pytest.mark.parametrize(
    ("group", "expected"),
    [
        (
            {"advantage": "passk_training", "objective_k": 3},
            lambda r: passk_training_advantages(r, k=3),
        ),
        (
            {"advantage": "pkpo", "objective_k": 2, "pkpo_baseline": "loo_minus_one"},
            # C(n - c, 1)/C(n, 2)·n = 3/10·5 = 1.5 on each of the 2 positives (n = 5, c = 2).
            lambda r: np.where(r > 0.5, 1.5, 0.0),
        ),
        (
            {"advantage": "grpo", "focal_gamma": 2.0},
            lambda r: grpo_advantages(r) * focal_scale(r, gamma=2.0),
        ),
    ],
)
def test_the_group_builder_trains_the_configured_advantage(group: dict, expected) -> None:
    config = AllocatorConfig(
        sampler="uniform", uniform_samples_per_prompt=5, group=GroupConfig(group_size=None, **group)
    )
    builder = build_group_builder(config.plan())
    rewards = np.array([1.0, 0.0, 0.0, 1.0, 0.0])
    built = builder.build(
        prompt_id="q",
        pool=[_scored(r) for r in rewards],
        resolved=True,
        step=0,
        prior_pass_rate=0.5,
    )
    assert built is not None
    np.testing.assert_allclose(built.advantages, expected(rewards), rtol=1e-12)


def test_value_objective_of_the_pass_at_k_advantages() -> None:
    assert value_objective(_uniform(advantage="pkpo", objective_k=4)) == ("pass_at_k", 0.5, 4)
    assert value_objective(_uniform(advantage="grpo", focal_gamma=1.0))[0] == "arcsin"


def _history(positives: float, negatives: float) -> PromptHistory:
    return PromptHistory(
        pass_rate=0.5,
        samples=int(positives + negatives),
        grad_norm=None,
        decayed_positives=positives,
        decayed_negatives=negatives,
        prior_alpha=7.0,  # the pooled prior: HORA ignores it (uniform Beta(1, 1))
        prior_beta=3.0,
    )


def test_hora_split_is_the_best_allocation_by_brute_force() -> None:
    """Five candidates with different records, a budget of 14, 2 to 6 each: the sampler's counts
    reach the largest total hit utility of all 3,125 allocations within the bounds that spend the
    budget exactly (HORA's rule), under Beta(1 + s, 1 + f)."""
    records = [(0.0, 0.0), (0.0, 9.0), (4.0, 4.0), (8.0, 0.0), (1.0, 3.0)]
    sampler = KnapsackSampler(
        value="hora",
        rollouts_per_step=14,
        mean_samples_per_prompt=3,
        min_samples_per_prompt=2,
        max_samples_per_prompt=6,
        candidates_per_step=5,
    )
    history = {f"q{i}": _history(*record) for i, record in enumerate(records)}
    sampler.start_step(0, list(history), history)
    counts = np.array([sampler.planned_samples(pid) for pid in history])
    a = 1.0 + np.array([s for s, _ in records])
    b = 1.0 + np.array([f for _, f in records])
    values = hit_utility(a, b, max_samples=6)
    best = max(
        sum(values[i, n] for i, n in enumerate(choice))
        for choice in itertools.product(range(2, 7), repeat=5)
        if sum(choice) == 14
    )
    assert counts.sum() == 14 and counts.min() >= 2
    assert sum(values[i, n] for i, n in enumerate(counts)) == pytest.approx(best, abs=1e-12)
    assert all(sampler.inclusion_probability(pid) == 1.0 for pid in history)
    assert all(sampler.verdict(pid) is PromptStatus.SAMPLING for pid in history)
    assert sampler.metrics()["sampling/skipped_prompts"] == 0.0


def test_hora_builds_from_its_experiment_shape() -> None:
    allocator = build_allocator(_hora())
    assert allocator.sampler.name == "hora"


def test_pass_at_k_reaches_every_reader_of_the_objective() -> None:
    """Ada-Est's variance-optimal rule and the declared knapsack value take k from the config."""
    from adarl.config.allocator import EstimationConfig

    ada = build_allocator(
        AllocatorConfig(
            sampler="ada_est",
            group=GroupConfig(advantage="ada_est", objective="pass_at_k", objective_k=3),
            estimation=EstimationConfig(ada_est_rule="variance_optimal"),
        )
    )
    assert (ada.sampler.objective, ada.sampler.objective_k) == ("pass_at_k", 3)  # type: ignore[attr-defined]
    knapsack = build_allocator(
        AllocatorConfig(
            sampler="knapsack",
            mean_samples_per_prompt=8,
            group=GroupConfig(group_size=None, advantage="pkpo", objective_k=4),
            curation=CurationConfig(min_samples_per_prompt=4),
        )
    )
    assert (knapsack.sampler.objective, knapsack.sampler.objective_k) == ("pass_at_k", 4)  # type: ignore[attr-defined]
    seq = build_allocator(
        AllocatorConfig(
            sampler="seq_balance",
            group=GroupConfig(correction="selection", objective="pass_at_k", objective_k=5),
        )
    )
    assert seq.group_builder.estimator.objective_k == 5
