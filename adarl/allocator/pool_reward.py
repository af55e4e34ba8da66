"""Pool rewards: a reward stage over a prompt's whole finished pool, with one scoring pass.

Some rewards cannot be computed response by response: DRO's R3 (adarl/reward/r3.py) needs every
rollout of a prompt (a per-token deviation across them) and a teacher-forced scoring pass of the
policy. Such a stage runs once per step, between the end of sampling and group building:

    collect_groups (adarl/rollout_phase.py), after the allocator reports the step complete:
        pools    = allocator.finished_pools()                 # prompts that will become groups
        rescored = pool_reward.rescore(pools, score=rollout.score)   # one batched scoring pass
        allocator.rescore_pools(rescored)                     # new rewards, pool statistics
        result   = allocator.finish_step(...)                 # groups built on the new rewards

The driver routes the scoring pass to the rollout pool (the engines live there; the allocator may
be a Ray actor), exactly as it routes rollouts: it neither knows nor cares which reward asked. A
sampler that reads the statistics a stage reports (the DRO variance filter) implements
`PoolStatisticsObserver`; the allocator hands it every rescored pool's statistics in one call.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from adarl.types import ScoredRollout, TaskExample

# `RolloutPool.score`: teacher-forced log π_T(response_i[t] | prompt_i, response_i[:t]).
ScoreFn = Callable[..., list[list[float]]]


@dataclass(frozen=True)
class FinishedPool:
    """One prompt's pool at the end of sampling, in sampling order, with the rewards it has."""

    prompt_id: str
    example: TaskExample
    rollouts: tuple[ScoredRollout, ...]


@dataclass(frozen=True)
class RescoredPool:
    """A pool stage's verdict on one pool: a reward per rollout (in the pool's order) and named
    statistics for samplers that read them (e.g. "max_deviation", "reaches_top_k")."""

    rewards: tuple[float, ...]
    statistics: Mapping[str, float] = field(default_factory=dict)


class PoolReward(Protocol):
    """A reward stage over finished pools (see the module docstring)."""

    def rescore(self, pools: Sequence[FinishedPool], *, score: ScoreFn) -> dict[str, RescoredPool]:
        """New rewards and statistics for `pools`, keyed by prompt id. `score` is the rollout
        pool's batched teacher-forced scoring call."""
        ...

    def metrics(self) -> dict[str, float]:
        """What the stage measured since the previous call (one step in training)."""
        ...


@runtime_checkable
class PoolStatisticsObserver(Protocol):
    """A sampler that reads pool statistics (the DRO variance filter)."""

    def observe_pool_statistics(self, statistics: Mapping[str, Mapping[str, float]]) -> None:
        """Every rescored pool's statistics of this step, keyed by prompt id, in one call after
        the pool stage and before the step's verdicts are read."""
        ...
