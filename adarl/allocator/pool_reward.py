"""Pool rewards: a reward stage over a prompt's whole finished pool, with one scoring pass.

Some rewards cannot be computed response by response: DRO's R3 (adarl/reward/r3.py) needs every
rollout of a prompt (a per-token deviation across them) and a teacher-forced scoring pass of the
policy. Such a stage runs once per step, between the end of sampling and group building:

    collect_groups (adarl/driver/rollout_phase.py), after the allocator reports the step complete:
        pools    = allocator.finished_pools()                 # prompts that will become groups
        rescored = pool_reward.rescore(pools, score=rollout.score)   # one batched scoring pass
        allocator.rescore_pools(rescored)                     # new rewards, pool statistics
        result   = allocator.finish_step(...)                 # groups built on the new rewards

The driver routes the scoring pass to the rollout pool (the engines live there; the allocator may
be a Ray actor), exactly as it routes rollouts: it neither knows nor cares which reward asked. A
sampler that reads the statistics a stage reports (the DRO variance filter) has the
`PoolStatisticsObserver` capability (adarl/allocator/samplers/base.py); the allocator hands it
every rescored pool's statistics in one call.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from adarl.types import FinishedPool, RescoredPool, ScoreFn


class PoolReward(Protocol):
    """A reward stage over finished pools (see the module docstring)."""

    def rescore(self, pools: Sequence[FinishedPool], *, score: ScoreFn) -> dict[str, RescoredPool]:
        """New rewards and statistics for `pools`, keyed by prompt id. `score` is the rollout
        pool's batched teacher-forced scoring call."""
        ...

    def metrics(self) -> dict[str, float]:
        """What the stage measured since the previous call (one step in training)."""
        ...
