"""Per-step sampling and signal metrics: where the rollouts went and what signal they bought."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from adarl.allocator.samplers.base import PromptStatus, is_positive
from adarl.types import Group, ScoredRollout

# Pool pass-rate bins for the samples-per-prompt histogram: exact 0 and exact 1 are their own
# bins (the prompts that cannot produce signal), the open interval is cut in quarters.
PASS_RATE_BINS: tuple[tuple[str, float, float], ...] = (
    ("0", 0.0, 0.0),
    ("0-0.25", 0.0, 0.25),
    ("0.25-0.5", 0.25, 0.5),
    ("0.5-0.75", 0.5, 0.75),
    ("0.75-1", 0.75, 1.0),
    ("1", 1.0, 1.0),
)


def pass_rate_bin(p: float) -> str:
    """The `PASS_RATE_BINS` name of pass rate p: 0, (0, ¼), [¼, ½), [½, ¾), [¾, 1), 1."""
    if p <= 0.0:
        return "0"
    if p >= 1.0:
        return "1"
    for name, _, high in PASS_RATE_BINS[1:-1]:
        if p < high:
            return name
    raise AssertionError(f"pass rate {p} fell outside every bin")


def is_mixed(group: Group) -> bool:
    """Whether a trained group has mixed outcomes (not all rewards equal): the gate is open."""
    return len({s.reward for s in group.rollouts}) > 1


def step_metrics(
    *,
    pools: Mapping[str, Sequence[ScoredRollout]],
    verdicts: Mapping[str, PromptStatus],
    trained: Sequence[Group],
    kept: Sequence[Group],
    carried_in: int,
    carried_out: int,
    carried_expired: int,
    carried_age_max: int,
    target_groups: int | None,
    requests: int,
    positive_threshold: float,
) -> dict[str, float]:
    drawn = {pid: pool for pid, pool in pools.items() if pool}
    counts = [len(pool) for pool in drawn.values()]
    rollouts = sum(counts)
    tokens = sum(len(s.rollout.completion.token_ids) for pool in drawn.values() for s in pool)
    truncated = sum(s.rollout.completion.truncated for pool in drawn.values() for s in pool)
    statuses = list(verdicts.values())
    metrics: dict[str, float] = {
        "sampling/prompts": float(len(verdicts)),
        "sampling/prompts_drawn": float(len(drawn)),
        "sampling/requests": float(requests),
        "sampling/rollouts": float(rollouts),
        "sampling/tokens": float(tokens),
        "sampling/truncated_fraction": truncated / rollouts if rollouts else 0.0,
        "sampling/samples_per_prompt_mean": rollouts / len(counts) if counts else 0.0,
        "sampling/samples_per_prompt_max": float(max(counts, default=0)),
        "sampling/carried_in_groups": float(carried_in),
        "sampling/carried_out_groups": float(carried_out),
        "sampling/carried_expired_groups": float(carried_expired),
        "sampling/carried_age_max_steps": float(carried_age_max),
        "signal/resolved_prompts": float(statuses.count(PromptStatus.RESOLVED)),
        "signal/unresolved_prompts": float(statuses.count(PromptStatus.UNRESOLVED)),
        "signal/filtered_prompts": float(statuses.count(PromptStatus.FILTERED)),
        "signal/unresolved_fraction": (
            statuses.count(PromptStatus.UNRESOLVED) / len(statuses) if statuses else 0.0
        ),
        "signal/groups_trained": float(len(trained)),
        "signal/sequences_trained": float(sum(len(g.rollouts) for g in trained)),
        "signal/mixed_group_fraction": (
            sum(is_mixed(g) for g in trained) / len(trained) if trained else 0.0
        ),
        "signal/reward_mean": (
            sum(s.reward for pool in drawn.values() for s in pool) / rollouts if rollouts else 0.0
        ),
        "signal/reward_errors": float(
            sum(s.reward_error is not None for pool in drawn.values() for s in pool)
        ),
    }
    # Drawn but in no kept group (trained now or carried to a later step): the rollouts a
    # sampler spends to find signal, or throws away by downsampling.
    kept_ids = {id(s) for g in kept for s in g.rollouts}
    discarded = [s for pool in drawn.values() for s in pool if id(s) not in kept_ids]
    metrics["sampling/discarded_samples"] = float(len(discarded))
    metrics["sampling/discarded_token_share"] = (
        sum(len(s.rollout.completion.token_ids) for s in discarded) / tokens if tokens else 0.0
    )
    if target_groups is not None:
        metrics["signal/groups_target"] = float(target_groups)
        metrics["signal/groups_short"] = float(max(0, target_groups - len(trained)))
    # Samples per prompt by pool pass rate p̃ = N⁺/N: where the compute went.
    by_bin: dict[str, list[int]] = {name: [] for name, _, _ in PASS_RATE_BINS}
    for pool in drawn.values():
        positives = sum(is_positive(s.reward, positive_threshold) for s in pool)
        by_bin[pass_rate_bin(positives / len(pool))].append(len(pool))
    for name, sizes in by_bin.items():
        metrics[f"sampling/prompts_by_pass_rate/{name}"] = float(len(sizes))
        metrics[f"sampling/samples_per_prompt_by_pass_rate/{name}"] = (
            sum(sizes) / len(sizes) if sizes else 0.0
        )
    return metrics
