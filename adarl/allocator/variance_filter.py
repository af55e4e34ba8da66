"""`VarianceFilter`: DRO's query filter, wrapped around any sampler.

DRO (arXiv 2506.13351) filters out prompts whose rollouts disagree too little about the reference
answer to teach anything, and prompts too hard for any rollout to bring the reference within
reach. The statistic is the R3 scoring pass's (adarl/reward/r3.py): per finished pool,
`max_deviation` = max_j σ_j (the largest cross-rollout deviation of a reference token's
certainty) and, with a top-k rule, `reaches_top_k` (some rollout makes every reference token's
probability at least 1/(k+1)). It reaches the filter through the allocator
(the `PoolStatisticsObserver` capability, once per step, after the pool stage).

The filter is applied every `interval_steps` steps (the first step included). An application
ranks the M prompts measured since the previous one (their latest measurement) and drops

    * the ⌊drop_fraction · M⌋ with the smallest max_deviation (`adarl.algo.dro.lowest_fraction`,
      ties by prompt id), and
    * every prompt none of whose rollouts reached the top k.

Dropped prompts measured in the applying step are FILTERED now (no group: the learner never sees
their degenerate comparison); all of them join the drop set. A prompt in the drop set is FILTERED
without a draw whenever the prompt source serves it again (it costs no rollout), and the filter
asks for a fresh prompt in its place (a replacement that is dropped too is replaced as well, up
to as many replacements as the step started with prompts, so a step never scans the whole
source; the wrapped sampler's refills, e.g. the dynamic filter's, come on top). At each
application the previous drop set is renewed: the `carry_forward_fraction` of it with the lowest
deviations stays dropped, the rest is re-admitted, to be measured again under the policy as it is
now.

Everything else (draws, verdicts of measured prompts, targets, stopping laws, statistics
requests) is the wrapped sampler's: any attribute the filter does not define is the inner
sampler's, and so are its capabilities (`capability` looks through `inner`), so the filter
composes with every sampler.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from adarl.algo.dro import lowest_fraction
from adarl.allocator.samplers.base import PromptHistory, PromptStatus, Sampler
from adarl.config.dro import DroFilterConfig


class VarianceFilter:
    """A `Sampler` wrapper that filters prompts by the R3 pass's statistics (module docstring).

    Also a `PoolStatisticsObserver` (adarl/allocator/samplers/base.py).
    """

    steps_independent = False  # its skip/filter state spans steps (not delegated)

    def __init__(
        self,
        inner: Sampler,
        *,
        drop_fraction: float,
        interval_steps: int,
        carry_forward_fraction: float,
    ) -> None:
        if not 0.0 <= drop_fraction < 1.0:
            raise ValueError(
                f"variance filter: drop_fraction must be in [0, 1), got {drop_fraction}"
            )
        if interval_steps < 1:
            raise ValueError(f"variance filter: interval_steps must be >= 1, got {interval_steps}")
        if not 0.0 <= carry_forward_fraction < 1.0:
            raise ValueError(
                "variance filter: carry_forward_fraction must be in [0, 1), got "
                f"{carry_forward_fraction}"
            )
        self._inner = inner
        self.drop_fraction = drop_fraction
        self.interval_steps = interval_steps
        self.carry_forward_fraction = carry_forward_fraction
        self.name = f"variance_filter({inner.name})"
        # Across steps: the drop set (prompt id → its max deviation when dropped), the prompts
        # measured since the last application (→ latest max deviation, reached top k), and the
        # steps measured since then (None: never applied, so the next measured step applies).
        self.dropped: dict[str, float] = {}
        self.window: dict[str, tuple[float, bool]] = {}
        self.steps_since_application: int | None = None
        self.applications = 0
        self._reset_step()

    def _reset_step(self) -> None:
        self._order: list[str] = []  # this step's prompts in entry order, skipped ones included
        self._skipped: list[str] = []  # FILTERED at entry: in the drop set, never drawn
        self._filtered: list[str] = []  # measured this step and dropped by this step's application
        self._entered = 0  # prompts the step started with
        self._replacements = 0  # prompts asked of the source in place of skipped ones
        self._source_exhausted = False
        self._applied_now = False
        self._released = 0
        self._top_k_failures = 0

    # -- the Sampler protocol: the parts the filter changes ------------------------------------

    def __getattr__(self, name: str) -> Any:
        # Only called for attributes the filter does not define: those are the inner sampler's.
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._inner, name)

    @property
    def inner(self) -> Sampler:
        """The wrapped sampler: its capabilities are the filter's too (`capability`)."""
        return self._inner

    def start_step(
        self,
        step: int,
        prompt_ids: Sequence[str],
        history: Mapping[str, PromptHistory],
        *,
        carried_groups: int = 0,
    ) -> None:
        self._reset_step()
        self._entered = len(prompt_ids)
        admitted = self._admit(prompt_ids)
        self._inner.start_step(
            step,
            admitted,
            {pid: h for pid, h in history.items() if pid in set(admitted)},
            carried_groups=carried_groups,
        )

    def add_prompts(self, prompt_ids: Sequence[str], history: Mapping[str, PromptHistory]) -> None:
        if not prompt_ids:  # the source has none left: the inner sampler must hear it too
            self._source_exhausted = True
            self._inner.add_prompts([], history)
            return
        self._replacements = max(0, self._replacements - len(prompt_ids))
        admitted = self._admit(prompt_ids)
        if admitted:  # an empty list would tell the inner sampler the source is exhausted
            self._inner.add_prompts(
                admitted, {pid: h for pid, h in history.items() if pid in set(admitted)}
            )

    def _admit(self, prompt_ids: Sequence[str]) -> list[str]:
        """Enter prompts; skip (and ask to replace) those in the drop set. Returns the rest."""
        admitted = []
        for pid in prompt_ids:
            self._order.append(pid)
            if pid in self.dropped:
                self._skipped.append(pid)
                if len(self._skipped) <= self._entered:  # at most `entered` replacements a step
                    self._replacements += 1
            else:
                admitted.append(pid)
        return admitted

    def needs_prompts(self) -> int:
        own = 0 if self._source_exhausted else self._replacements
        return self._inner.needs_prompts() + own

    def done(self) -> bool:
        return self._inner.done() and self.needs_prompts() == 0

    def verdict(self, prompt_id: str) -> PromptStatus:
        if prompt_id in self._skipped or prompt_id in self._filtered:
            return PromptStatus.FILTERED
        return self._inner.verdict(prompt_id)

    def prompt_ids(self) -> list[str]:
        return list(self._order)

    # -- PoolStatisticsObserver ------------------------------------------------------------------

    def observe_pool_statistics(self, statistics: Mapping[str, Mapping[str, float]]) -> None:
        """This step's measured pools; applies the filter when it is due (module docstring)."""
        for pid, stats in statistics.items():
            if "max_deviation" not in stats:
                raise ValueError(
                    f"variance filter: pool {pid!r} has no 'max_deviation' statistic (got "
                    f"{sorted(stats)}); it needs the R3 scoring pass (dro.filter.enabled builds it)"
                )
            reached = bool(stats.get("reaches_top_k", 1.0))
            self._top_k_failures += int(not reached)
            self.window[pid] = (float(stats["max_deviation"]), reached)
        self.steps_since_application = (
            None if self.steps_since_application is None else self.steps_since_application + 1
        )
        due = (
            self.steps_since_application is None
            or self.steps_since_application >= self.interval_steps
        )
        if due:
            self._apply(measured_now=set(statistics))

    def _apply(self, *, measured_now: set[str]) -> None:
        pids = sorted(self.window)
        low = lowest_fraction([self.window[p][0] for p in pids], pids, fraction=self.drop_fraction)
        drops = {p: self.window[p][0] for p in low}
        drops |= {p: dev for p, (dev, reached) in self.window.items() if not reached}
        previous = sorted(self.dropped.items(), key=lambda item: (item[1], item[0]))
        keep = math.floor(self.carry_forward_fraction * len(previous) + 1e-9)
        self._released = len(previous) - keep
        self.dropped = dict(previous[:keep]) | drops
        self._filtered = [p for p in self._order if p in drops and p in measured_now]
        self.window = {}
        self.steps_since_application = 0
        self.applications += 1
        self._applied_now = True

    # -- reporting and checkpointing -------------------------------------------------------------

    def metrics(self) -> dict[str, float]:
        step_prompts = len(self._order)
        filtered = len(self._skipped) + len(self._filtered)
        return {
            **self._inner.metrics(),
            "signal/variance_filter_skipped_prompts": float(len(self._skipped)),
            "signal/variance_filter_dropped_now": float(len(self._filtered)),
            "signal/variance_filter_fraction": filtered / step_prompts if step_prompts else 0.0,
            "signal/variance_filter_top_k_failures": float(self._top_k_failures),
            "signal/variance_filter_applied": float(self._applied_now),
            "signal/variance_filter_released": float(self._released),
            "signal/variance_filter_drop_set_size": float(len(self.dropped)),
            "signal/variance_filter_window_size": float(len(self.window)),
        }

    def state_dict(self) -> dict[str, Any]:
        return {
            "inner": self._inner.state_dict(),
            "dropped": dict(self.dropped),
            "window": {pid: list(value) for pid, value in self.window.items()},
            "steps_since_application": self.steps_since_application,
            "applications": self.applications,
            "step": {
                "order": list(self._order),
                "skipped": list(self._skipped),
                "filtered": list(self._filtered),
                "entered": self._entered,
                "replacements": self._replacements,
                "source_exhausted": self._source_exhausted,
                "applied_now": self._applied_now,
                "released": self._released,
                "top_k_failures": self._top_k_failures,
            },
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self._inner.load_state_dict(state["inner"])
        self.dropped = {pid: float(dev) for pid, dev in state["dropped"].items()}
        self.window = {pid: (float(dev), bool(ok)) for pid, (dev, ok) in state["window"].items()}
        since = state["steps_since_application"]
        self.steps_since_application = None if since is None else int(since)
        self.applications = int(state["applications"])
        step = state["step"]
        self._order = list(step["order"])
        self._skipped = list(step["skipped"])
        self._filtered = list(step["filtered"])
        self._entered = int(step["entered"])
        self._replacements = int(step["replacements"])
        self._source_exhausted = bool(step["source_exhausted"])
        self._applied_now = bool(step["applied_now"])
        self._released = int(step["released"])
        self._top_k_failures = int(step["top_k_failures"])


def build_variance_filter(config: DroFilterConfig, sampler: Sampler) -> Sampler:
    """`sampler` wrapped by the filter when `dro.filter.enabled`, else `sampler` itself."""
    config.validate()
    if not config.enabled:
        return sampler
    return VarianceFilter(  # type: ignore[return-value]  # a Sampler through delegation
        sampler,
        drop_fraction=config.drop_fraction,
        interval_steps=config.interval_steps,
        carry_forward_fraction=config.carry_forward_fraction,
    )
