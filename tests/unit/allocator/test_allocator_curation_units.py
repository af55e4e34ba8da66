"""Curation's configuration and its pieces in isolation: validation that names the fix, what each
run declares it optimises, the skip bound, the exact budget of a knapsack plan and GRESO's
adaptation. (The statistical claims are in tests/component/allocator/test_allocator_curation.py.)"""

from __future__ import annotations

import pytest

from adarl.allocator import build_allocator
from adarl.allocator.curation import HistorySkip
from adarl.allocator.objective import declare_objective
from adarl.allocator.samplers.base import PromptHistory, PromptStatus
from adarl.allocator.samplers.knapsack import KnapsackSampler
from adarl.allocator.samplers.uniform import UniformSampler
from adarl.allocator.stats import PromptStatsStore
from adarl.config.allocator import AllocatorConfig, CurationConfig, GroupConfig


def test_validation_names_the_input_and_the_fix() -> None:
    with pytest.raises(ValueError, match="rollouts_per_step=100 needs a sampler"):
        AllocatorConfig(sampler="ada_est", rollouts_per_step=100).validate()
    with pytest.raises(ValueError, match=r"skip='greso' needs allocator\.sampler=uniform"):
        AllocatorConfig(sampler="ada_est", curation=CurationConfig(skip="greso")).validate()
    with pytest.raises(ValueError, match="cannot spend the budget"):
        AllocatorConfig(
            sampler="knapsack", max_samples_per_prompt=4, mean_samples_per_prompt=8
        ).validate()
    with pytest.raises(ValueError, match=r"curation\.skip='sometimes'"):
        AllocatorConfig(curation=CurationConfig(skip="sometimes")).validate()
    # 512 candidates of 2 samples may all be due under the skip bound: 1,024 > 256 rollouts.
    bounded = CurationConfig(candidates_per_step=512, min_samples_per_prompt=2)
    with pytest.raises(ValueError, match=r"lower curation\.candidates_per_step to <= 128"):
        AllocatorConfig(sampler="knapsack", curation=bounded).validate()
    unbounded = CurationConfig(
        candidates_per_step=512, min_samples_per_prompt=2, max_skipped_visits=None
    )
    AllocatorConfig(sampler="knapsack", curation=unbounded).validate()


def test_budget_defaults_to_grpos_spend() -> None:
    assert AllocatorConfig(sampler="knapsack").rollout_budget() == 64 * 4
    assert AllocatorConfig(sampler="uniform").rollout_budget() is None  # plain GRPO: unchanged
    skip = AllocatorConfig(sampler="uniform", curation=CurationConfig(skip="posterior"))
    assert skip.rollout_budget() == 256
    assert AllocatorConfig(sampler="uniform", rollouts_per_step=100).rollout_budget() == 100


def test_declarations_say_what_a_skip_does_to_the_objective() -> None:
    kept = AllocatorConfig(
        sampler="uniform",
        group=GroupConfig(group_size=None, advantage="rloo"),
        curation=CurationConfig(skip="posterior"),
    )
    statement = declare_objective(kept.plan()).statement
    assert "weighted 1/π_x" in statement and "unchanged in expectation" in statement
    assert declare_objective(kept.plan()).exact  # RLOO's p, kept exactly by the 1/π weights
    greso = AllocatorConfig(
        sampler="uniform",
        group=GroupConfig(group_size=None, advantage="grpo"),
        curation=CurationConfig(skip="greso", inverse_probability_weights=False),
    )
    statement = declare_objective(greso.plan()).statement
    assert "re-weighted by the greso skip: Σ_x π_x·f(p_x)" in statement
    assert not declare_objective(greso.plan()).exact


def _history(**fields: object) -> PromptHistory:
    base = dict(pass_rate=0.5, samples=0, grad_norm=None)
    return PromptHistory(**{**base, **fields})  # type: ignore[arg-type]


def test_greso_rule_and_the_skip_bound() -> None:
    skip = HistorySkip(
        UniformSampler(samples_per_prompt=4, rollouts_per_step=8),
        rule="greso",
        seed=0,
        inverse_probability_weights=False,
        max_skipped_visits=2,
        max_candidates_per_step=100,
        samples_per_prompt=4,
    )
    assert skip.probability(_history())[0] == 1.0  # no history: always drawn
    assert skip.probability(_history(samples=8, zero_variance_streak=-2))[0] == pytest.approx(0.25)
    assert skip.probability(_history(samples=8, zero_variance_streak=3))[0] == pytest.approx(0.125)
    forced = skip.probability(_history(samples=8, zero_variance_streak=-9, skipped_visits=2))
    assert forced == (1.0, True)


def test_knapsack_plan_spends_the_budget_and_skips_hopeless_prompts() -> None:
    sampler = KnapsackSampler(
        value="declared",
        rollouts_per_step=40,
        mean_samples_per_prompt=4,
        min_samples_per_prompt=2,
        max_samples_per_prompt=16,
        candidates_per_step=20,
        objective="arcsin",
        explore_fraction=0.1,
        max_skipped_visits=3,
        seed=1,
    )
    histories = {}
    for i in range(20):  # half hopeless (0 of 32), half mixed (16 of 32)
        positives = 0.0 if i < 10 else 16.0
        histories[f"x{i}"] = _history(
            samples=32, decayed_positives=positives, decayed_negatives=32.0 - positives
        )
    histories["x0"] = _history(samples=32, decayed_negatives=32.0, skipped_visits=3)  # forced
    sampler.start_step(0, list(histories), histories)
    assert sampler.needs_prompts() == 0
    planned = {pid: sampler.planned_samples(pid) for pid in histories}
    drawn = {pid for pid in histories if sampler.verdict(pid) is not PromptStatus.SKIPPED}
    assert "x0" in drawn and sampler.inclusion_probability("x0") == 1.0
    assert sum(sampler._allocated.values()) == 40
    assert all(f"x{i}" in drawn for i in range(10, 20))  # every mixed prompt gets samples
    explored = [f"x{i}" for i in range(1, 10) if f"x{i}" in drawn]
    assert len(explored) == 2  # ⌊0.1·40 / 2⌋ of the 9 left out, each with π = 2/9
    for pid in explored:
        assert sampler.inclusion_probability(pid) == pytest.approx(2 / 9)
        assert sampler.advantage_weight(pid) == pytest.approx(9 / 2)
        assert planned[pid] == 2


def test_pooled_prior_reaches_unseen_prompts_of_the_same_difficulty() -> None:
    store = PromptStatsStore(min_pool_weight=4)
    for i in range(20):
        store.record_step(f"hard{i}", step=0, samples=4, positives=0, pool="d7")
        store.record_step(f"easy{i}", step=0, samples=4, positives=4 if i % 5 else 3, pool="d0")
    history = store.history(
        ["new_hard", "new_easy"], step=1, pools={"new_hard": "d7", "new_easy": "d0"}
    )
    a, b = history["new_hard"].posterior()
    assert a / (a + b) < 0.05
    a, b = history["new_easy"].posterior()
    assert a / (a + b) > 0.9


def test_a_curated_allocator_builds_from_each_experiment_shape() -> None:
    for curation in (
        CurationConfig(skip="greso", inverse_probability_weights=False, max_skipped_visits=None),
        CurationConfig(skip="posterior"),
    ):
        allocator = build_allocator(
            AllocatorConfig(
                sampler="uniform",
                group=GroupConfig(group_size=None, advantage="grpo"),
                curation=curation,
            )
        )
        assert isinstance(allocator.sampler, HistorySkip)
