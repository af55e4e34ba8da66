"""A rollout budget for the sequential samplers (`allocator.rollouts_per_step` with seq_balance):
the step admits prompts as others settle, every admitted prompt runs its stopping rule to the
end, so the declared objective holds exactly as without a budget, and a step spends about the
budget. Through the real allocator, sampler, group builder, reward pool and the driver's rollout
phase (`adarl.bench.bandit.measure` on exact softmax bandits)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from hydra import compose, initialize_config_dir

from adarl.allocator.build import build_allocator
from adarl.bench.bandit import BanditEngine, BanditPrompts, BanditVerifier, measure
from adarl.config import AllocatorConfig
from adarl.driver.rollout_phase import PhaseParts, collect_groups
from adarl.launch import CONFIG_DIR, load_config
from adarl.reward.pool import RewardPool
from adarl.rollout.codec import PromptCodec
from adarl.rollout.simulated import LatencyModel, SimulatedRolloutPool
from adarl.types import SamplingParams

PASS_RATES = (0.05, 0.2, 0.5, 0.8, 0.95)
BUDGET = 1024


def _allocator(*overrides: str) -> AllocatorConfig:
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        config = compose(config_name="config", overrides=list(overrides))
    return load_config(config).allocator


def _budgeted() -> AllocatorConfig:
    return _allocator(
        "+experiment=ada_seq_balance",
        "allocator.group.objective=logit",
        f"allocator.rollouts_per_step={BUDGET}",
    )


@pytest.mark.slow
def test_a_budget_keeps_the_declared_objective_and_each_prompts_draw_law() -> None:
    """logit under Seq-Balance(2, 2), cap 16, with the step admitting prompts up to a budget of
    1,024 rollouts: E[ĝ] = (1 - p^16 - (1-p)^16)/(p(1-p))·∇p at every p, within 3 SE, and each
    prompt draws the exact E[N] of the draw law without a budget (within 5%). Power: the SE of the
    effective weight ≤ 12%/3 of the target (asserted), so a 12% bias fails."""
    config = _budgeted()
    checks = measure(
        config,
        pass_rates=PASS_RATES,
        prompts_per_rate=2,
        steps=36,
        latency=LatencyModel(engines=1, slots=256),
        seed=7,
    )
    cap = config.max_samples_per_prompt
    for check in checks:
        one_label = check.p**cap + (1 - check.p) ** cap
        target = (1 - one_label) / (check.p * (1 - check.p))
        assert check.implied_weight == pytest.approx(target, rel=1e-9)
        floor = target / (1 - one_label) * math.sqrt(one_label * (1 - one_label) / check.trials)
        se = max(check.se_effective_weight, floor)
        assert se <= 0.12 / 3 * target, check
        assert abs(check.effective_weight - target) <= 3 * se, check
        assert check.expected_samples is not None
        assert check.samples_drawn == pytest.approx(check.expected_samples, rel=0.05), check
        assert check.trials >= 500  # the budget admitted far more than the 2 prompts per rate


def test_a_step_spends_about_its_budget_and_admits_as_prompts_settle() -> None:
    """Every step spends at least its budget (it admits until its settled prompts have) and at
    most the budget plus the cap of the prompts open when it was reached; the mean overshoot is
    small against the budget; the step trains far more prompts than the driver's first batch."""
    config = dataclasses.replace(_budgeted(), prompts_per_step=8, seed=3)
    allocator = build_allocator(config)
    engine = BanditEngine()
    codec = PromptCodec(tokenizer=engine.tokenizer, sampling=SamplingParams(max_new_tokens=1))
    spent, admitted = [], []
    with RewardPool(verifiers={"bandit": BanditVerifier()}, num_workers=1) as rewards:
        for step in range(6):
            source = BanditPrompts(step=step, pass_rates=PASS_RATES, behaviour={})
            pool = SimulatedRolloutPool(
                engine=engine,
                latency=LatencyModel(engines=1, slots=64),
                is_correct=lambda _request, completion: completion.text == "0",
                seed=step,
            )
            phase = collect_groups(
                step,
                source.next_batch(config.prompts_per_step),
                PhaseParts(
                    allocator=allocator,
                    rollout=pool,
                    rewards=rewards,
                    prompts=source,
                    codec=codec,
                    clock=pool.now,
                ),
            )
            spent.append(phase.rollouts)
            admitted.append(phase.result.metrics["sampling/prompts_admitted"])
    cap = config.max_samples_per_prompt
    assert all(s >= BUDGET for s in spent), spent
    assert all(s <= BUDGET + 64 * cap for s in spent), spent  # at most the open prompts' caps
    assert np.mean(spent) <= 1.1 * BUDGET, spent
    assert min(admitted) > 8 * config.prompts_per_step, admitted


def test_a_budget_is_refused_in_rounds_mode_and_with_overlapping_steps() -> None:
    with pytest.raises(ValueError, match=r"set allocator\.sequential\.mode=streaming"):
        _allocator(
            "+experiment=ada_seq_balance",
            "allocator.rollouts_per_step=512",
            "allocator.sequential.mode=rounds",
        )
    with pytest.raises(ValueError, match="refills a step with prompts mid-step"):
        with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
            raw = compose(
                config_name="config",
                overrides=[
                    "+experiment=ada_seq_balance",
                    "allocator.rollouts_per_step=512",
                    "rollout.max_off_policy_steps=1",
                    "rollout.cross_step_allocation=true",
                    "learner.loss.ratio_reference=learner",
                    "learner.loss.tis_cap=2",
                ],
            )
        load_config(raw)
