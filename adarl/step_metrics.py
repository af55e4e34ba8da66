"""A step's numbers before they are logged: the components' metrics merged into one mapping (each
name owned by one component) and the wall time of each stage.

    driver ─ merge_metrics({"allocator": ..., "learners": ..., ...}) ─► the step's metrics
    session ─ merge_metrics({"step": ..., "evaluation": ...})        ─► MetricsLogger.log
    driver, session ─ with timer.stage("train"): ...                 ─► timing/train_s
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field


def merge_metrics(sources: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """One step's metrics from several components; a name emitted by two of them is a bug.

    `sources` maps a component's name to its metrics. Raises ValueError naming the metric and
    both components, so that no component silently overwrites another's number.
    """
    merged: dict[str, float] = {}
    owner: dict[str, str] = {}
    for component, metrics in sources.items():
        for name, value in metrics.items():
            if name in merged:
                raise ValueError(
                    f"metric {name!r} is emitted by both {owner[name]} and {component}; metric "
                    "names must be unique: rename one of them"
                )
            merged[name] = value
            owner[name] = component
    return merged


@dataclass
class StageTimer:
    """Wall time per named stage, accumulated over the run and per step.

    Stages of the step itself (`step_seconds`) are popped into that step's metrics; stages
    outside a step (evaluation, checkpointing: `per_step=False`) only add to the run's totals,
    so they are never counted in the next step's timings.
    """

    step_seconds: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    total_seconds: dict[str, float] = field(default_factory=lambda: defaultdict(float))

    @contextmanager
    def stage(self, name: str, *, per_step: bool = True) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            elapsed = time.perf_counter() - start
            if per_step:
                self.step_seconds[name] += elapsed
            self.total_seconds[name] += elapsed

    def pop_step(self) -> dict[str, float]:
        out = {f"timing/{name}_s": seconds for name, seconds in self.step_seconds.items()}
        self.step_seconds = defaultdict(float)
        return out
