"""Ada-Est and GVM live: the real allocator and samplers, the scripted fake engine, and the
driver's own rollout phase (`adarl.driver.rollout_phase.collect_groups`, through
`FakeWorld.run_step`)."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from _allocator_world import FakeWorld, StepTrace

from adarl.algo.allocation import ada_est_allocation, gvm_allocation
from adarl.allocator import build_allocator
from adarl.config.allocator import AllocatorConfig, EstimationConfig, GroupConfig
from adarl.types import StatisticsReply, StatisticsRequest


def test_ada_est_allocation_converges_to_the_rule_at_the_true_pass_rates() -> None:
    """The same prompts every step: after the first step's pilot the EMA tracks p, and the
    allocation approaches ada_est_allocation(p) (λ = 0.5 so a few steps suffice)."""
    rates = [0.05, 0.2, 0.5, 0.8] * 4
    world = FakeWorld(rates, engine_seed=1)
    config = AllocatorConfig(
        sampler="ada_est",
        prompts_per_step=len(rates),
        mean_samples_per_prompt=8,
        max_samples_per_prompt=32,
        estimation=EstimationConfig(ema_decay=0.5, min_samples_per_prompt=1),
        group=GroupConfig(group_size=None, advantage="ada_est"),
    )
    allocator = build_allocator(config)
    first = world.run_step(allocator, 0)
    assert first is not None  # unseen prompts: a pilot of 2 each, paid from the budget
    assert first.metrics["sampling/pilot_samples"] == 2 * len(rates)
    assert first.metrics["sampling/budget_used"] == 8 * len(rates)
    for step in range(1, 12):
        trace = StepTrace()
        result = world.run_step(allocator, step, trace=trace)
    drawn = {g.prompt_id: g.pool_size for g in result.groups}
    target = ada_est_allocation(
        np.array(rates), budget=8 * len(rates), eps=0.05, min_samples=1, max_samples=32
    )
    by_rate: dict[float, list[tuple[int, int]]] = {}
    for example, p, want in zip(world.examples, rates, target, strict=True):
        by_rate.setdefault(p, []).append((drawn[example.prompt_id], int(want)))
    for p, pairs in by_rate.items():
        mean_drawn = np.mean([d for d, _ in pairs])
        mean_target = np.mean([t for _, t in pairs])
        # EMA of 4 prompts' counts: within 35% of the rule's target at the true p.
        assert mean_drawn == pytest.approx(mean_target, rel=0.35), (p, pairs)
    assert result.metrics["sampling/pilot_samples"] == 0  # every prompt is now known
    assert result.metrics["sampling/budget_used"] == 8 * len(rates)  # the budget, exactly
    assert result.metrics["sampling/estimate_error_mean"] < 0.25


def test_gvm_uses_gradient_norms_computed_on_this_steps_pilot() -> None:
    """Every statistics request of step t holds accepted samples of step t's pilot draws, and
    the allocation that follows is gvm_allocation of exactly the norms returned for them."""
    rates = [0.0, 0.1, 0.3, 0.5, 0.7, 0.9] * 3
    world = FakeWorld(rates, engine_seed=2)
    config = AllocatorConfig(
        sampler="gvm",
        prompts_per_step=len(rates),
        mean_samples_per_prompt=4,
        max_samples_per_prompt=32,
        estimation=EstimationConfig(gvm_presamples=8, min_samples_per_prompt=0),
        group=GroupConfig(group_size=None, advantage="grpo"),
    )
    allocator = build_allocator(config)
    asked: list[StatisticsRequest] = []

    def values_for(request: StatisticsRequest) -> tuple[float, ...]:
        # A distinct, deterministic norm per sample (as a learner would give).
        return tuple(
            1.0
            + int(hashlib.sha256(s.rollout.request_id.encode()).hexdigest()[:4], 16) / 65536
            + 0.01 * i
            for i, s in enumerate(request.rollouts)
        )

    def norms(request: StatisticsRequest) -> StatisticsReply:
        asked.append(request)
        return StatisticsReply(kind=request.kind, values=values_for(request), weight_version=0)

    for step in range(3):
        trace = StepTrace()
        result = world.run_step(allocator, step, trace=trace, statistics=norms)
        request = asked[-1]
        assert request.step == step and len(asked) == step + 1  # once per step
        assert all(s.rollout.request_id.startswith(f"{step}:") for s in request.rollouts)
        assert all(s.rollout.request_id.endswith(":0") for s in request.rollouts)  # the pilot
        assert all(s.reward > 0.5 for s in request.rollouts)  # accepted samples only
        per_prompt: dict[str, list[float]] = {}
        for scored, value in zip(request.rollouts, values_for(request), strict=True):
            per_prompt.setdefault(scored.rollout.prompt_id, []).append(value)
        prompts = [e.prompt_id for e in world.examples]
        pilot = {
            pid: np.mean(trace.rewards[pid][:8]) if pid in trace.rewards else 0.0 for pid in prompts
        }
        expected = gvm_allocation(
            np.array([np.mean(per_prompt.get(pid, [0.0])) for pid in prompts]),
            np.array([pilot[pid] for pid in prompts]),
            budget=4 * len(rates),
            min_samples=0,
            max_samples=32 - 8,
        )
        trained = {g.prompt_id: len(g.rollouts) for g in result.groups}
        assert {pid: trained.get(pid, 0) for pid in prompts} == dict(
            zip(prompts, (int(n) for n in expected), strict=True)
        )
        # The pilot is not trained on: groups hold second-stage samples only.
        for group in result.groups:
            assert all(not s.rollout.request_id.endswith(":0") for s in group.rollouts)
        assert result.metrics["sampling/discarded_samples"] >= 8 * len(rates)


@pytest.mark.slow
@pytest.mark.parametrize("experiment", ["ada_est", "gvm_grpo", "gvm_raft"])
def test_estimation_samplers_optimise_their_implied_objective_live(experiment: str) -> None:
    """Exact bandits through the real allocator, sampler (pilot, statistics request, allocation),
    group builder and rollout phase: the mean gradient equals the implied weight conditional on
    each prompt's allocation (n_i and p̂_i are fixed before the trained samples' labels) times
    ∇p, within 3 SE per component and for the effective weight (1,536 prompt-steps per p)."""
    from hydra import compose, initialize_config_dir

    from adarl.bench.bandit import measure
    from adarl.launch import CONFIG_DIR, load_config
    from adarl.rollout.simulated import LatencyModel

    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        config = load_config(
            compose(config_name="config", overrides=[f"+experiment={experiment}"])
        ).allocator
    checks = measure(
        config,
        pass_rates=(0.1, 0.5, 0.9),
        prompts_per_rate=64,
        steps=24,
        latency=LatencyModel(engines=1, slots=256),
        seed=5,
    )
    for check in checks:
        assert np.all(np.abs(check.z_scores) <= 3), check
        gap = abs(check.effective_weight - check.implied_weight)
        assert gap <= 3 * check.se_effective_weight, check
