"""The group builder calls adarl.algo and wraps the result; statistics, metrics and config."""

from __future__ import annotations

import numpy as np
import pytest

from adarl.algo.advantages import grpo_advantages, reinforce_baseline_advantages
from adarl.algo.allocation import ema_pass_rate_update
from adarl.algo.selection import corrected_advantages
from adarl.allocator.estimators import PooledAdvantage, UniformAdvantage
from adarl.allocator.group_builder import GroupBuilder
from adarl.allocator.metrics import pass_rate_bin, step_metrics
from adarl.allocator.samplers.base import PromptStatus
from adarl.allocator.stats import PromptStatsStore
from adarl.config.allocator import AllocatorConfig, GroupConfig, SequentialConfig
from adarl.learner.batching import BatchCounts
from adarl.types import Completion, FinishReason, Group, Rollout, ScoredRollout, TrainBatch


def pool_of(rewards: list[float], *, prompt_id: str = "p", tokens: int = 3) -> list[ScoredRollout]:
    return [
        ScoredRollout(
            rollout=Rollout(
                request_id=f"r{i}",
                prompt_id=prompt_id,
                prompt_token_ids=(1, 2),
                completion=Completion(
                    token_ids=tuple(range(10, 10 + tokens)),
                    logprobs=(-0.5,) * tokens,
                    finish_reason=FinishReason.STOP,
                ),
                weight_version=3,
            ),
            reward=r,
        )
        for i, r in enumerate(rewards)
    ]


def test_pool_mode_reference_group() -> None:
    # Released Reinforce-Ada: earliest 2 positives + earliest 2 negatives, A = r - p̃ (pool).
    pool = pool_of([0, 0, 1, 0, 1, 1, 0, 0])  # p̃ = 3/8
    builder = GroupBuilder(group_size=4, downsample_order="earliest", positive_threshold=0.7)
    group = builder.build(prompt_id="p", pool=pool, resolved=True, step=0, prior_pass_rate=0.5)
    assert group is not None
    assert [s.rollout.request_id for s in group.rollouts] == ["r0", "r1", "r2", "r4"]
    assert group.advantages == pytest.approx((-0.375, -0.375, 0.625, 0.625))
    assert (group.pool_size, group.pool_positives, group.resolved) == (8, 3, True)


def test_pool_mode_selection_correction_matches_algo() -> None:
    rewards = [1, 0, 0, 0, 0, 0, 1, 0, 0, 0]
    builder = GroupBuilder(
        group_size=4, estimator=PooledAdvantage(correction="selection", objective="log"), seed=5
    )
    group = builder.build(
        prompt_id="p", pool=pool_of(rewards), resolved=True, step=2, prior_pass_rate=0.5
    )
    assert group is not None
    kept = np.array([s.reward for s in group.rollouts])
    expected = corrected_advantages(
        kept,
        pool_rewards=np.array(rewards, dtype=float),
        correction="selection",
        objective="log",
        group_size=4,
    )
    assert group.advantages == pytest.approx(tuple(expected))


def test_random_downsampling_is_seeded_by_step_and_prompt() -> None:
    rewards = [float(i % 3 == 0) for i in range(30)]
    builder = GroupBuilder(group_size=4, seed=1)

    def kept(step: int, pid: str) -> list[str]:
        group = builder.build(
            prompt_id=pid,
            pool=pool_of(rewards, prompt_id=pid),
            resolved=True,
            step=step,
            prior_pass_rate=0.5,
        )
        assert group is not None
        return [s.rollout.request_id for s in group.rollouts]

    assert kept(0, "p") == kept(0, "p")
    assert len({tuple(kept(step, "p")) for step in range(8)}) > 1


def test_unresolved_policies() -> None:
    pool = pool_of([0, 0, 0, 0, 0, 1])
    base = dict(group_size=4, downsample_order="earliest")
    drop = GroupBuilder(**base, unresolved_policy="drop")
    assert drop.build(prompt_id="p", pool=pool, resolved=False, step=0, prior_pass_rate=0.5) is None
    zero = GroupBuilder(**base, unresolved_policy="zero_advantage")
    group = zero.build(prompt_id="p", pool=pool, resolved=False, step=0, prior_pass_rate=0.5)
    assert group is not None and group.advantages == (0.0,) * 4 and not group.resolved
    keep = GroupBuilder(**base, unresolved_policy="keep_available")
    group = keep.build(prompt_id="p", pool=pool, resolved=False, step=0, prior_pass_rate=0.5)
    assert group is not None
    # 1 positive + 3 earliest negatives, A = r - 1/6.
    assert [s.reward for s in group.rollouts] == [0, 0, 0, 1]
    assert group.advantages == pytest.approx((-1 / 6, -1 / 6, -1 / 6, 5 / 6))


def test_uniform_estimators_and_whole_pools() -> None:
    rewards = [1.0, 0.0, 0.0, 1.0, 1.0]
    grpo = GroupBuilder(group_size=None, estimator=UniformAdvantage.named("grpo"))
    group = grpo.build(
        prompt_id="p", pool=pool_of(rewards), resolved=True, step=0, prior_pass_rate=0.5
    )
    assert group is not None and len(group.rollouts) == 5
    assert group.advantages == pytest.approx(tuple(grpo_advantages(np.array(rewards))))
    baseline = GroupBuilder(group_size=None, estimator=UniformAdvantage.named("reinforce_baseline"))
    group = baseline.build(
        prompt_id="p", pool=pool_of(rewards), resolved=True, step=0, prior_pass_rate=0.2
    )
    assert group is not None
    assert group.advantages == pytest.approx(
        tuple(reinforce_baseline_advantages(np.array(rewards), baseline=0.2))
    )


def test_groups_collate_into_a_train_batch() -> None:
    builder = GroupBuilder(group_size=2, downsample_order="earliest")
    groups = [
        builder.build(
            prompt_id=p,
            pool=pool_of([1, 0, 1], prompt_id=p),
            resolved=True,
            step=0,
            prior_pass_rate=0.5,
        )
        for p in ("a", "b")
    ]
    batch = TrainBatch.from_groups([g for g in groups if g is not None], pad_token_id=0)
    assert batch.num_sequences == 4
    assert batch.prompt_index.tolist() == [0, 0, 1, 1]
    assert batch.weight_versions.tolist() == [3, 3, 3, 3]


def test_stats_ema_matches_algo() -> None:
    store = PromptStatsStore(ema_decay=0.8, prior_alpha=1.0, prior_beta=2.0)
    assert store.pass_rate("new") == pytest.approx(1 / 3)
    total = positives = np.zeros(1)
    for step, (n, k) in enumerate([(8, 2), (4, 4), (16, 0)]):
        store.record_step("p", step=step, samples=n, positives=k)
        total, positives, p_hat = ema_pass_rate_update(
            total,
            positives,
            new_total=np.array([n]),
            new_positives=np.array([k]),
            decay=0.8,
            prior_a=1.0,
            prior_b=2.0,
        )
        assert store.pass_rate("p") == pytest.approx(float(p_hat[0]))
    stats = store.get("p")
    assert stats is not None and (stats.samples, stats.positives, stats.last_step) == (28, 6, 2)
    store.report_gradient_norms({"p": 1.5}, step=3)
    assert store.history(["p"])["p"].grad_norm == 1.5
    with pytest.raises(ValueError, match="finite number"):
        store.report_gradient_norms({"p": float("nan")}, step=3)
    restored = PromptStatsStore(ema_decay=0.8, prior_alpha=1.0, prior_beta=2.0)
    restored.load_state_dict(store.state_dict())
    assert restored.pass_rate("p") == store.pass_rate("p")


def test_pass_rate_bins() -> None:
    assert [pass_rate_bin(p) for p in (0.0, 0.1, 0.25, 0.5, 0.74, 0.75, 0.99, 1.0)] == [
        "0",
        "0-0.25",
        "0.25-0.5",
        "0.5-0.75",
        "0.5-0.75",
        "0.75-1",
        "0.75-1",
        "1",
    ]


def test_step_metrics_count_what_happened() -> None:
    pools = {"a": pool_of([1, 0, 0, 0]), "b": pool_of([0] * 8), "c": []}
    trained = [
        Group(
            prompt_id="a",
            rollouts=tuple(pools["a"][:2]),
            advantages=(0.5, -0.5),
            pool_size=4,
            pool_positives=1,
            resolved=True,
        ),
        Group(
            prompt_id="b",
            rollouts=tuple(pools["b"][:2]),
            advantages=(0.0, 0.0),
            pool_size=8,
            pool_positives=0,
            resolved=False,
        ),
    ]
    m = step_metrics(
        pools=pools,
        verdicts={
            "a": PromptStatus.RESOLVED,
            "b": PromptStatus.UNRESOLVED,
            "c": PromptStatus.UNRESOLVED,
        },
        trained=trained,
        kept=trained,
        carried_in=0,
        carried_out=0,
        carried_expired=0,
        carried_age_max=0,
        target_groups=4,
        requests=3,
        positive_threshold=0.5,
    )
    assert m["sampling/rollouts"] == 12 and m["sampling/tokens"] == 36
    assert m["sampling/prompts"] == 3 and m["sampling/prompts_drawn"] == 2
    assert m["sampling/samples_per_prompt_mean"] == 6 and m["sampling/samples_per_prompt_max"] == 8
    assert m["signal/mixed_group_fraction"] == 0.5
    assert m["signal/unresolved_prompts"] == 2
    assert m["signal/groups_short"] == 2
    assert m["sampling/prompts_by_pass_rate/0"] == 1
    assert m["sampling/samples_per_prompt_by_pass_rate/0"] == 8
    assert m["sampling/samples_per_prompt_by_pass_rate/0-0.25"] == 0  # p̃ = 1/4 is in [¼, ½)
    assert m["sampling/samples_per_prompt_by_pass_rate/0.25-0.5"] == 4
    # 12 drawn, 2 + 2 kept: 8 discarded, each with 3 of the 36 tokens.
    assert m["sampling/discarded_samples"] == 8
    assert m["sampling/discarded_token_share"] == pytest.approx(24 / 36)
    assert all(k.split("/")[0] in ("sampling", "signal") for k in m)


def test_config_validation_names_the_key() -> None:
    AllocatorConfig().validate()
    with pytest.raises(ValueError, match=r"allocator\.sampler"):
        AllocatorConfig(sampler="nope").validate()
    with pytest.raises(ValueError, match=r"allocator\.sequential\.mode"):
        AllocatorConfig(sequential=SequentialConfig(mode="async")).validate()
    with pytest.raises(ValueError, match="max_overshoot_fraction"):
        AllocatorConfig(sequential=SequentialConfig(max_overshoot_fraction=-0.1)).validate()
    with pytest.raises(ValueError, match="pass_rate_estimate"):
        AllocatorConfig(group=GroupConfig(pass_rate_estimate="rb")).validate()
    with pytest.raises(ValueError, match="samples_per_prompt must be >= 2"):
        AllocatorConfig(sampler="dynamic_filter", uniform_samples_per_prompt=1).validate()


@pytest.mark.parametrize(
    ("normalization", "expected"), [("group", (1.0, 0.0, 0.0, 0.0)), ("positives", (4.0, 0, 0, 0))]
)
def test_raft_normalization_reaches_the_advantages(
    normalization: str, expected: tuple[float, ...]
) -> None:
    # One positive in a group of 4: A = 1 (÷ the group) or n/K = 4 (÷ the accepted samples).
    builder = GroupBuilder(
        group_size=None,
        estimator=UniformAdvantage.named("raft", raft_normalization=normalization),
    )
    group = builder.build(
        prompt_id="p", pool=pool_of([1, 0, 0, 0]), resolved=True, step=0, prior_pass_rate=0.5
    )
    assert group is not None and group.advantages == pytest.approx(expected)


def test_gvm_min_samples_key_reaches_the_sampler() -> None:
    from adarl.allocator.build import build_sampler
    from adarl.config.allocator import EstimationConfig

    config = AllocatorConfig(
        sampler="gvm", estimation=EstimationConfig(min_samples_per_prompt=3, gvm_presamples=8)
    )
    assert build_sampler(config.plan()).min_samples_per_prompt == 3


def test_whole_pool_trains_every_sample_as_n_sequences_worth() -> None:
    # Pool of 8 (3 positives), selection for log with the pool mean p̃ = 3/8: a group of N = 8
    # gives A⁺ = (1 - p̃)·8/3, A⁻ = -(1 - p̃)·8/5; scaled by n/N = 4/8, each sequence counting 1/2.
    rewards = [1, 0, 0, 1, 0, 0, 1, 0]
    builder = GroupBuilder(
        group_size=None,
        estimator=PooledAdvantage("selection", "log", pass_rate_estimate="pool"),
        pool_weight=4,
    )
    group = builder.build(
        prompt_id="p", pool=pool_of(rewards), resolved=True, step=0, prior_pass_rate=0.5
    )
    assert group is not None and len(group.rollouts) == 8  # nothing discarded
    assert group.sequence_weight == 0.5
    h = 1 - 3 / 8
    expected = [h * 8 / 3 * 0.5 if r else -h * 8 / 5 * 0.5 for r in rewards]
    assert group.advantages == pytest.approx(expected)
    # Its total positive weight is h·n, as for a kept group of n = 4.
    assert sum(a for a in group.advantages if a > 0) == pytest.approx(h * 4)
    batch = TrainBatch.from_groups([group], pad_token_id=0)
    assert batch.sequence_weights is not None
    assert batch.sequence_weights.tolist() == [0.5] * 8
    counts = BatchCounts.of(batch)
    assert (counts.num_sequences, counts.loss_sequences) == (8, 4.0)
    assert (counts.num_tokens, counts.loss_tokens) == (24, 12.0)
