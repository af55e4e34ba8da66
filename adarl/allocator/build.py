"""`build_*`: translate an `AllocatorPlan` (`AllocatorConfig.plan()`: the config validated once,
its derived counts resolved once) into the allocator's keyword-only components."""

from __future__ import annotations

from typing import Any

from adarl.algo.advantages import POOL_ADVANTAGE, get_uniform_estimator
from adarl.allocator.allocator import BudgetAllocator
from adarl.allocator.coverage_phase import CoveragePhase
from adarl.allocator.curation import HistorySkip
from adarl.allocator.estimators import build_estimator, build_reweighting
from adarl.allocator.group_builder import GroupBuilder
from adarl.allocator.rehearsal import RehearsalStore
from adarl.allocator.samplers.base import Sampler
from adarl.allocator.samplers.dynamic_filter import DynamicFilterSampler
from adarl.allocator.samplers.estimation import AdaEstSampler, GvmSampler
from adarl.allocator.samplers.knapsack import KnapsackSampler
from adarl.allocator.samplers.sequential import SequentialSampler
from adarl.allocator.samplers.uniform import UniformSampler
from adarl.allocator.stats import PromptStatsStore
from adarl.config.allocator import SEQUENTIAL_SAMPLERS, AllocatorConfig, AllocatorPlan
from adarl.config.seeds import seed_or_default


def value_objective(config: AllocatorConfig) -> tuple[str, float, int]:
    """The objective f (with power's exponent and pass@k's k) whose gradient the knapsack's
    declared value counts: the declared f for pooled advantages, what a uniform-group estimator's
    registry entry says it serves otherwise (`UniformEstimator.objective`; F-GRPO's factor left
    out)."""
    group = config.group
    if group.advantage == POOL_ADVANTAGE:
        return group.objective, group.objective_alpha, group.objective_k
    objective = get_uniform_estimator(group.advantage).objective
    return objective, group.objective_alpha, group.objective_k


def build_sampler(plan: AllocatorPlan) -> Sampler:
    """The configured sampler, wrapped by a curation skip when `curation.skip` is set."""
    config = plan.config
    sampler = _build_sampler(plan)
    cur = config.curation
    if cur.skip == "none":
        return sampler
    return HistorySkip(  # type: ignore[return-value]  # a Sampler through delegation
        sampler,
        rule=cur.skip,
        seed=seed_or_default(config.seed),
        inverse_probability_weights=cur.inverse_probability_weights,
        max_skipped_visits=cur.max_skipped_visits,
        max_candidates_per_step=config.candidate_cap(),
        samples_per_prompt=config.uniform_samples_per_prompt,
        min_inclusion_probability=cur.min_inclusion_probability,
        greso_p_easy=cur.greso_p_easy,
        greso_p_hard=cur.greso_p_hard,
        greso_target_zero_variance=cur.greso_target_zero_variance,
        greso_step_size=cur.greso_step_size,
        greso_min_p=cur.greso_min_p,
        greso_max_p=cur.greso_max_p,
        positive_threshold=config.positive_threshold,
    )


def _build_sampler(plan: AllocatorPlan) -> Sampler:
    config = plan.config
    name = config.sampler
    if name == "uniform":
        return UniformSampler(
            samples_per_prompt=config.uniform_samples_per_prompt,
            max_samples_per_step=plan.max_samples_per_step,
            rollouts_per_step=plan.rollout_budget,
            positive_threshold=config.positive_threshold,
        )
    if name == "knapsack":
        cur = config.curation
        budget = plan.rollout_budget
        assert budget is not None
        objective, alpha, objective_k = value_objective(config)
        return KnapsackSampler(
            value=cur.knapsack_value,
            rollouts_per_step=budget,
            mean_samples_per_prompt=config.mean_samples_per_prompt,
            min_samples_per_prompt=cur.min_samples_per_prompt,
            max_samples_per_prompt=plan.max_samples_per_prompt,
            candidates_per_step=config.knapsack_candidates(),
            objective=objective,
            objective_alpha=alpha,
            objective_k=objective_k,
            explore_fraction=cur.explore_fraction,
            max_skipped_visits=cur.max_skipped_visits,
            inverse_probability_weights=cur.inverse_probability_weights,
            seed=seed_or_default(config.seed),
            positive_threshold=config.positive_threshold,
        )
    if name in SEQUENTIAL_SAMPLERS:
        seq = config.sequential
        return SequentialSampler(
            k_pos=seq.k_pos,
            k_neg=0 if name == "seq_pos" else seq.k_neg,
            max_samples_per_prompt=plan.max_samples_per_prompt,
            max_samples_per_step=plan.max_samples_per_step,
            mode=seq.mode,
            initial_samples=seq.initial_samples,
            max_overshoot_fraction=seq.max_overshoot_fraction,
            use_history=seq.use_history,
            round_repeat=seq.round_repeat,
            max_rounds=seq.max_rounds,
            positive_threshold=config.positive_threshold,
            rollouts_per_step=config.rollouts_per_step,
        )
    if name == "dynamic_filter":
        df = config.dynamic_filter
        assert plan.max_samples_per_step is not None
        return DynamicFilterSampler(
            samples_per_prompt=config.uniform_samples_per_prompt,
            target_groups=config.prompts_per_step,
            max_samples_per_step=plan.max_samples_per_step,
            min_pass_rate=df.min_pass_rate,
            max_pass_rate=df.max_pass_rate,
            min_keep_rate=df.min_keep_rate,
            positive_threshold=config.positive_threshold,
        )
    est = config.estimation
    if name == "ada_est":
        return AdaEstSampler(
            mean_samples_per_prompt=config.mean_samples_per_prompt,
            min_samples_per_prompt=est.min_samples_per_prompt,
            max_samples_per_prompt=plan.max_samples_per_prompt,
            epsilon=est.epsilon,
            rule=est.ada_est_rule,
            objective=config.group.objective,
            objective_alpha=config.group.objective_alpha,
            objective_k=config.group.objective_k,
            pilot_samples=est.pilot_samples,
            max_age_steps=est.max_age_steps,
            prior_alpha=est.prior_alpha,
            prior_beta=est.prior_beta,
            max_samples_per_step=plan.max_samples_per_step,
            positive_threshold=config.positive_threshold,
        )
    if name == "gvm":
        return GvmSampler(
            presamples=est.gvm_presamples,
            mean_samples_per_prompt=config.mean_samples_per_prompt,
            min_samples_per_prompt=est.min_samples_per_prompt,
            max_samples_per_prompt=plan.max_samples_per_prompt,
            alpha=est.gvm_alpha,
            beta=est.gvm_beta,
            max_samples_per_step=plan.max_samples_per_step,
            positive_threshold=config.positive_threshold,
        )
    raise AssertionError(f"validate() let through allocator.sampler={name!r}")


def build_group_builder(plan: AllocatorPlan) -> GroupBuilder:
    """The plan's group builder: its estimator and reweighting built (adarl/allocator/
    estimators.py), its selection settings."""
    config = plan.config
    group = config.group
    return GroupBuilder(
        group_size=group.group_size,
        estimator=build_estimator(config),
        reweighting=build_reweighting(group),
        unresolved_policy=group.unresolved_policy,
        downsample_order=group.downsample_order,
        positive_threshold=config.positive_threshold,
        pool_weight=plan.pool_weight,
        seed=seed_or_default(config.seed),
    )


def build_coverage_phase(plan: AllocatorPlan) -> CoveragePhase | None:
    """The coverage phase (`allocator.group.coverage_phase_rollouts`) with its own builder;
    None without one."""
    if plan.coverage_phase is None:
        return None
    return CoveragePhase(
        rollouts=plan.config.group.coverage_phase_rollouts,
        builder=build_group_builder(plan.coverage_phase),
    )


def build_rehearsal(config: AllocatorConfig) -> RehearsalStore | None:
    """DPH-RL's rehearsal store (`allocator.rehearsal`); None when it is off."""
    rehearsal = config.rehearsal
    if not rehearsal.enabled:
        return None
    return RehearsalStore(
        min_samples=rehearsal.min_samples,
        rows_per_step=rehearsal.per_step,
        positive_threshold=config.positive_threshold,
    )


def allocator_kwargs(plan: AllocatorPlan) -> dict[str, Any]:
    """`BudgetAllocator`'s keyword arguments for `plan`."""
    config = plan.config
    est = config.estimation
    return {
        "sampler": build_sampler(plan),
        "group_builder": build_group_builder(plan),
        "coverage_phase": build_coverage_phase(plan),
        "stats": PromptStatsStore(
            ema_decay=est.ema_decay,
            prior_alpha=est.prior_alpha,
            prior_beta=est.prior_beta,
            half_life_steps=config.curation.history_half_life_steps,
            min_pool_weight=config.curation.min_pool_weight,
            max_prior_strength=config.curation.max_prior_strength,
        ),
        "prior_pool": config.curation.prior_pool,
        "seed": seed_or_default(config.seed),
        "max_carry_age_steps": config.dynamic_filter.max_carry_age_steps,
        "positive_threshold": config.positive_threshold,
        "rehearsal": build_rehearsal(config),
    }


def build_allocator(config: AllocatorConfig) -> BudgetAllocator:
    """The allocator `config` describes (validated first)."""
    return BudgetAllocator(**allocator_kwargs(config.plan()))
