"""One key, one meaning: each per-prompt sample count has its own name, and every shipped
experiment still resolves to the sampler, draws and group weights it had when one key,
`allocator.samples_per_prompt`, meant all of them."""

from __future__ import annotations

from pathlib import Path

import pytest
from _allocator_streams import scored_pool
from hydra import compose, initialize_config_dir

from adarl.allocator.build import build_group_builder, build_sampler
from adarl.allocator.samplers.base import Sampler
from adarl.config import AdarlConfig
from adarl.config.allocator import AllocatorConfig
from adarl.launch import CONFIG_DIR, load_config

EXPERIMENTS = sorted(p.stem for p in (Path(CONFIG_DIR) / "experiment").glob("*.yaml"))
DRAW_PARAMETERS = (
    "samples_per_prompt",
    "mean_samples_per_prompt",
    "min_samples_per_prompt",
    "max_samples_per_prompt",
    "max_samples_per_step",
    "rollouts_per_step",
    "k_pos",
    "k_neg",
    "presamples",
    "candidates_per_step",
)
POOL_REWARDS = (1, 0, 0, 1, 0, 0, 0, 1, 0, 0)

# What each experiment resolved to at 00d8acc, before the split, through these same builders: the
# sampler, its draw parameters, and the group built from POOL_REWARDS (kept samples, each one's
# sequence weight, Σ|A|). A whole pool weighs (sequence weight × 10) sequences: ada_coverage's 8
# was `samples_per_prompt: 8`, kept equal to `initial_samples: 8` by hand, and is now the first
# draw's default; gvm_raft's n̄ = 4 shows in Σ|A| = 3·4/(10·0.3).
RESOLVED_BEFORE_THE_SPLIT = {
    "ada_coverage": (
        "SequentialSampler",
        dict(
            initial_samples=8,
            k_neg=1,
            k_pos=1,
            max_overshoot_fraction=0.03,
            max_samples_per_prompt=16,
            max_samples_per_step=1024,
            mode="streaming",
            rollouts_per_step=None,
        ),
        (10, 0.8, 16.0),
    ),
    "ada_curated": (
        "KnapsackSampler",
        dict(
            candidates_per_step=128,
            max_samples_per_prompt=32,
            mean_samples_per_prompt=4,
            min_samples_per_prompt=2,
            rollouts_per_step=256,
        ),
        (10, 1.0, 8.694808048),
    ),
    "ada_est": (
        "AdaEstSampler",
        dict(
            max_samples_per_prompt=32,
            max_samples_per_step=None,
            mean_samples_per_prompt=8,
            min_samples_per_prompt=2,
        ),
        (10, 1.0, 7.09929574),
    ),
    "ada_seq_balance": (
        "SequentialSampler",
        dict(
            initial_samples=None,
            k_neg=2,
            k_pos=2,
            max_overshoot_fraction=0.03,
            max_samples_per_prompt=16,
            max_samples_per_step=1024,
            mode="streaming",
            rollouts_per_step=None,
        ),
        (4, 1.0, 5.6),
    ),
    "ada_seq_balance_sage": (
        "SequentialSampler",
        dict(
            initial_samples=None,
            k_neg=2,
            k_pos=2,
            max_overshoot_fraction=0.03,
            max_samples_per_prompt=16,
            max_samples_per_step=1024,
            mode="streaming",
            rollouts_per_step=None,
        ),
        (4, 1.0, 5.6),
    ),
    "ada_seq_pos": (
        "SequentialSampler",
        dict(
            initial_samples=None,
            k_neg=0,
            k_pos=2,
            max_overshoot_fraction=0.03,
            max_samples_per_prompt=16,
            max_samples_per_step=1024,
            mode="streaming",
            rollouts_per_step=None,
        ),
        (4, 1.0, 5.6),
    ),
    "dapo": (
        "DynamicFilterSampler",
        dict(max_samples_per_step=1024, samples_per_prompt=4),
        (10, 1.0, 8.694808048),
    ),
    "dr_grpo": (
        "UniformSampler",
        dict(max_samples_per_step=None, rollouts_per_step=None, samples_per_prompt=4),
        (10, 1.0, 4.2),
    ),
    "dro": (
        "UniformSampler",
        dict(max_samples_per_step=None, rollouts_per_step=None, samples_per_prompt=8),
        (10, 1.0, 8.694808048),
    ),
    "f_grpo": (
        "UniformSampler",
        dict(max_samples_per_step=None, rollouts_per_step=None, samples_per_prompt=8),
        (10, 1.0, 6.086365633),
    ),
    "greso": (
        "HistorySkip",
        dict(max_samples_per_step=256, rollouts_per_step=256, samples_per_prompt=4),
        (10, 1.0, 8.694808048),
    ),
    "grpo": (
        "UniformSampler",
        dict(max_samples_per_step=None, rollouts_per_step=None, samples_per_prompt=4),
        (10, 1.0, 8.694808048),
    ),
    # Added after the split (issue 38): grpo's allocator, so grpo's draws and weights.
    "grpo_anchored": (
        "UniformSampler",
        dict(max_samples_per_step=None, rollouts_per_step=None, samples_per_prompt=4),
        (10, 1.0, 8.694808048),
    ),
    "gvm_grpo": (
        "GvmSampler",
        dict(
            max_samples_per_prompt=32,
            max_samples_per_step=None,
            mean_samples_per_prompt=4,
            min_samples_per_prompt=0,
            presamples=8,
        ),
        (10, 1.0, 8.694808048),
    ),
    "gvm_raft": (
        "GvmSampler",
        dict(
            max_samples_per_prompt=32,
            max_samples_per_step=None,
            mean_samples_per_prompt=4,
            min_samples_per_prompt=0,
            presamples=8,
        ),
        (10, 1.0, 4.0),
    ),
    "hora_grpo": (
        "KnapsackSampler",
        dict(
            candidates_per_step=64,
            max_samples_per_prompt=32,
            mean_samples_per_prompt=8,
            min_samples_per_prompt=2,
            rollouts_per_step=512,
        ),
        (10, 1.0, 8.694808048),
    ),
    "knapsack_grpo": (
        "KnapsackSampler",
        dict(
            candidates_per_step=64,
            max_samples_per_prompt=32,
            mean_samples_per_prompt=4,
            min_samples_per_prompt=2,
            rollouts_per_step=256,
        ),
        (10, 1.0, 8.694808048),
    ),
    # MaxRL, added after the split: A = (r - 0.3)/0.3, so Σ|A| = 3·(0.7/0.3) + 7.
    "maxrl_anchored": (
        "UniformSampler",
        dict(max_samples_per_step=None, rollouts_per_step=None, samples_per_prompt=4),
        (10, 1.0, 14.0),
    ),
    "passk_grpo": (
        "UniformSampler",
        dict(max_samples_per_step=None, rollouts_per_step=None, samples_per_prompt=8),
        (10, 1.0, 2.683274373),
    ),
    "pkpo": (
        "UniformSampler",
        dict(max_samples_per_step=None, rollouts_per_step=None, samples_per_prompt=8),
        (10, 1.0, 5.0),
    ),
    "qwen2_5_math_1_5b_grpo": (
        "UniformSampler",
        dict(max_samples_per_step=None, rollouts_per_step=None, samples_per_prompt=4),
        (10, 1.0, 8.694808048),
    ),
    "qwen2_5_math_1_5b_seq_balance": (
        "SequentialSampler",
        dict(
            initial_samples=None,
            k_neg=2,
            k_pos=2,
            max_overshoot_fraction=0.03,
            max_samples_per_prompt=32,
            max_samples_per_step=16384,
            mode="streaming",
            rollouts_per_step=None,
        ),
        (4, 1.0, 5.6),
    ),
    "raft": (
        "UniformSampler",
        dict(max_samples_per_step=None, rollouts_per_step=None, samples_per_prompt=4),
        (10, 1.0, 3.0),
    ),
    # RAFT-positives on the anchored update, added after the split: raft_log's draws and group.
    "raft_anchored": (
        "UniformSampler",
        dict(max_samples_per_step=None, rollouts_per_step=None, samples_per_prompt=4),
        (10, 1.0, 10.0),
    ),
    "raft_log": (
        "UniformSampler",
        dict(max_samples_per_step=None, rollouts_per_step=None, samples_per_prompt=4),
        (10, 1.0, 10.0),
    ),
    "reinforce_ada_reference": (
        "SequentialSampler",
        dict(
            initial_samples=None,
            k_neg=2,
            k_pos=2,
            max_overshoot_fraction=0.03,
            max_samples_per_prompt=32,
            max_samples_per_step=2048,
            mode="rounds",
            rollouts_per_step=None,
        ),
        (4, 1.0, 2.0),
    ),
    "rloo": (
        "UniformSampler",
        dict(max_samples_per_step=None, rollouts_per_step=None, samples_per_prompt=4),
        (10, 1.0, 4.666666667),
    ),
    "sage": (
        "UniformSampler",
        dict(max_samples_per_step=None, rollouts_per_step=None, samples_per_prompt=4),
        (10, 1.0, 8.694808048),
    ),
    "sage_light": (
        "UniformSampler",
        dict(max_samples_per_step=None, rollouts_per_step=None, samples_per_prompt=4),
        (10, 1.0, 8.694808048),
    ),
}


def _compose(*overrides: str) -> AdarlConfig:
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        return load_config(compose(config_name="config", overrides=list(overrides)))


def _draw_parameters(sampler: Sampler) -> dict[str, object]:
    found = {
        name: getattr(sampler, name)
        for name in DRAW_PARAMETERS
        if hasattr(sampler, name) and not callable(getattr(sampler, name))
    }
    draw_rule = getattr(sampler, "draw_rule", None)
    if draw_rule is not None:  # the sequential samplers' chunked first and later draws
        found["initial_samples"] = draw_rule.initial_samples
        found["max_overshoot_fraction"] = draw_rule.max_overshoot_fraction
        found["mode"] = sampler.mode.value  # type: ignore[attr-defined]
    return found


def test_every_experiment_is_pinned() -> None:
    assert sorted(RESOLVED_BEFORE_THE_SPLIT) == EXPERIMENTS


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_every_experiment_resolves_to_the_draws_and_weights_it_had(experiment: str) -> None:
    sampler_class, draw, (kept, sequence_weight, total) = RESOLVED_BEFORE_THE_SPLIT[experiment]
    plan = _compose(f"+experiment={experiment}").allocator.plan()
    sampler = build_sampler(plan)
    assert type(sampler).__name__ == sampler_class
    assert _draw_parameters(sampler) == draw
    group = build_group_builder(plan).build(
        prompt_id="p",
        pool=scored_pool(POOL_REWARDS),
        resolved=True,
        step=0,
        prior_pass_rate=0.4,
        estimate=0.3,
    )
    assert group is not None
    assert len(group.rollouts) == kept
    assert group.sequence_weight == pytest.approx(sequence_weight, rel=1e-12)
    assert sum(abs(a) for a in group.advantages) == pytest.approx(total, abs=1e-8)


def test_the_default_sets_its_first_draw_once() -> None:
    """ada_coverage names its first draw once: the pool weight follows it (no second key)."""
    plan = _compose("+experiment=ada_coverage").allocator.plan()
    assert plan.config.group.pool_weight is None
    assert plan.planned_samples_per_prompt == plan.pool_weight == 8
    four = _compose("+experiment=ada_coverage", "allocator.sequential.initial_samples=4")
    assert four.allocator.plan().pool_weight == 4
    heavier = _compose("+experiment=ada_coverage", "allocator.group.pool_weight=16")
    assert heavier.allocator.plan().pool_weight == 16  # still settable on its own


@pytest.mark.parametrize(
    ("experiment", "replacement"),
    [
        ("grpo", r"set allocator\.uniform_samples_per_prompt=8\."),
        ("dapo", r"set allocator\.uniform_samples_per_prompt=8\."),
        ("knapsack_grpo", r"set allocator\.mean_samples_per_prompt=8\."),
        ("ada_est", r"set allocator\.mean_samples_per_prompt=8\."),
        ("ada_coverage", r"sequential\.initial_samples=8 .*group\.pool_weight=8"),
    ],
)
def test_the_retired_key_fails_naming_its_replacement(experiment: str, replacement: str) -> None:
    with pytest.raises(ValueError, match=r"allocator\.samples_per_prompt is retired") as info:
        _compose(f"+experiment={experiment}", "allocator.samples_per_prompt=8")
    assert info.match(replacement)
    assert info.match("allocator.rollouts_per_step")  # the budget's name, in every message


def test_each_count_is_read_where_its_sampler_reads_it() -> None:
    """A key of another sampler changes nothing: the uniform draw is not the mean, and neither
    decides a sequential sampler's draws."""
    base = AllocatorConfig(sampler="uniform").plan()
    assert (
        AllocatorConfig(sampler="uniform", mean_samples_per_prompt=9).plan().pool_weight
        == base.pool_weight
        == 4
    )
    knapsack = AllocatorConfig(sampler="knapsack", mean_samples_per_prompt=8)
    assert knapsack.plan().rollout_budget == 64 * 8
    assert (
        AllocatorConfig(sampler="knapsack", uniform_samples_per_prompt=8).plan().rollout_budget
        == 64 * 4
    )
    sequential = AllocatorConfig(uniform_samples_per_prompt=9, mean_samples_per_prompt=9).plan()
    assert _draw_parameters(build_sampler(sequential)) == _draw_parameters(
        build_sampler(AllocatorConfig().plan())
    )
