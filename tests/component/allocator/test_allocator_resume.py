"""Resume: an allocator restored from `state_dict` (between steps or mid-step) continues exactly as
one that never stopped: same requests, same groups, same metrics."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from _allocator_world import FakeWorld, StepTrace, deterministic_metrics

from adarl.algo.advantages import grpo_advantages, pkpo_advantages
from adarl.allocator import build_allocator
from adarl.config.allocator import (
    AllocatorConfig,
    CurationConfig,
    GroupConfig,
    RehearsalConfig,
    SequentialConfig,
)

PASS_RATES = [0.0, 0.05, 0.2, 0.5, 0.8, 1.0] * 3
CONFIGS = {
    "seq_balance_streaming": AllocatorConfig(
        sampler="seq_balance",
        prompts_per_step=18,
        max_samples_per_step=250,
        sequential=SequentialConfig(max_overshoot_fraction=0.2),
    ),
    "seq_pos_rounds": AllocatorConfig(
        sampler="seq_pos",
        prompts_per_step=18,
        sequential=SequentialConfig(k_pos=1, mode="rounds", round_repeat=4, max_rounds=3),
        group=GroupConfig(downsample_order="earliest"),
    ),
    "dynamic_filter": AllocatorConfig(
        sampler="dynamic_filter", prompts_per_step=6, group=GroupConfig(advantage="grpo")
    ),
    "ada_est": AllocatorConfig(sampler="ada_est", prompts_per_step=18, mean_samples_per_prompt=6),
    "gvm": AllocatorConfig(
        sampler="gvm", prompts_per_step=18, group=GroupConfig(group_size=None, advantage="grpo")
    ),
    # History before rollout (issue 19): skips and splits read every earlier outcome, the pooled
    # priors and GRESO's adapted probabilities, all of which must come back from the state.
    "greso_skip": AllocatorConfig(
        sampler="uniform",
        prompts_per_step=18,
        group=GroupConfig(group_size=None, advantage="grpo"),
        curation=CurationConfig(skip="greso", inverse_probability_weights=False),
    ),
    "posterior_skip": AllocatorConfig(
        sampler="uniform",
        prompts_per_step=18,
        group=GroupConfig(group_size=None, advantage="rloo"),
        curation=CurationConfig(skip="posterior", min_inclusion_probability=0.3),
    ),
    "knapsack_declared": AllocatorConfig(
        sampler="knapsack",
        prompts_per_step=18,
        max_samples_per_prompt=12,
        group=GroupConfig(group_size=None, advantage="grpo"),
        curation=CurationConfig(candidates_per_step=24, explore_fraction=0.1),
    ),
    # Coverage first (issue 38): 72 rollouts a step, a phase of 80: steps 0 and 1 train PKPO,
    # step 2 GRPO; only the allocator's rollout clock, restored, says which.
    "coverage_phase": AllocatorConfig(
        sampler="uniform",
        prompts_per_step=18,
        group=GroupConfig(
            group_size=None,
            advantage="grpo",
            objective_k=2,
            coverage_phase_rollouts=80,
            coverage_advantage="pkpo",
        ),
    ),
    # DPH-RL's rehearsal store (issue 38): D_pef, the prompts it holds out of each step and the
    # cycle of its rows, all of which must come back from the state.
    "uniform_rehearsal": AllocatorConfig(
        sampler="uniform",
        uniform_samples_per_prompt=8,
        prompts_per_step=18,
        group=GroupConfig(group_size=None, advantage="grpo"),
        rehearsal=RehearsalConfig(enabled=True, per_step=4),
    ),
    "knapsack_rl": AllocatorConfig(
        sampler="knapsack",
        prompts_per_step=18,
        max_samples_per_prompt=12,
        group=GroupConfig(group_size=None, advantage="grpo"),
        curation=CurationConfig(knapsack_value="knapsack_rl", explore_fraction=0.0),
    ),
}


def run(config: AllocatorConfig, *, interrupt_at: tuple[int, int] | None) -> list:
    """Three steps; with `interrupt_at = (step, results)` the allocator is pickled after that
    many results of that step and replaced by a fresh one loaded from the pickle."""
    # The same 18 prompts every step (epochs: per-prompt statistics matter); 54 more refill the
    # dynamic filter.
    world = FakeWorld(PASS_RATES * 4)
    batches = [world.examples[:18]] * 3
    refill = iter(world.examples[18:])
    allocator = build_allocator(config)
    history = []
    for step, batch in enumerate(batches):
        world.engine.update_weights(step, {})
        trace = StepTrace()
        if interrupt_at is not None and interrupt_at[0] == step:
            assert (
                world.run_step(
                    allocator,
                    step,
                    batch,
                    refill=refill,
                    trace=trace,
                    stop_after_results=interrupt_at[1],
                )
                is None
            )
            state = pickle.loads(pickle.dumps(allocator.state_dict()))
            allocator = build_allocator(config)
            allocator.load_state_dict(state)
            result = world.resume_step(allocator)
        else:
            result = world.run_step(allocator, step, batch, refill=refill, trace=trace, manual=True)
        history.append(([(r.request_id, r.num_samples, r.seed) for r in trace.requests], result))
    return history


@pytest.mark.parametrize("name", list(CONFIGS))
@pytest.mark.parametrize("interrupt_at", [(1, 0), (1, 7)])
def test_restored_allocator_continues_exactly(name: str, interrupt_at: tuple[int, int]) -> None:
    config = CONFIGS[name]
    reference = run(config, interrupt_at=None)
    resumed = run(config, interrupt_at=interrupt_at)
    assert all(result.groups for _, result in reference)  # the runs train on something
    for (ref_requests, ref_result), (requests, result) in zip(reference, resumed, strict=True):
        assert requests == ref_requests
        assert result.groups == ref_result.groups
        assert result.term_groups == ref_result.term_groups
        assert deterministic_metrics(result.metrics) == deterministic_metrics(ref_result.metrics)


def test_the_coverage_phase_ends_at_its_rollouts() -> None:
    """The allocator's clock: 72 rollouts a step, so steps 0 and 1 (0 and 72 before them, < 80)
    train PKPO's pass@2 advantages and step 2 (144) GRPO's, each on its groups' own rewards."""
    history = run(CONFIGS["coverage_phase"], interrupt_at=None)
    assert [result.metrics["signal/coverage_phase"] for _, result in history] == [1.0, 1.0, 0.0]
    for step, (_, result) in enumerate(history):
        for group in result.groups:
            rewards = np.array([s.reward for s in group.rollouts])
            expected = pkpo_advantages(rewards, k=2) if step < 2 else grpo_advantages(rewards)
            np.testing.assert_allclose(group.advantages, expected, rtol=1e-12)
