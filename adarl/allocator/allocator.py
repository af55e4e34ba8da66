"""`BudgetAllocator`: per-prompt statistics, the step's stream of `PromptRequest`s, kept groups.

A plain class (`adarl.cluster` wraps it as a Ray actor; every public method is a plain method so
that it can be called remotely). One step, as the driver runs it (`codec`: `PromptCodec`):

    submit(allocator.start_step(step, examples))              # first draws of every prompt
    # (the driver sends the start, each wave of results and the finish in `update` calls:
    #  one round trip per wave; see `update`)
    while not allocator.step_complete():
        if (k := allocator.needs_prompts()):                   # dynamic filter refills
            submit(allocator.add_prompts(source.take(k)))       # [] = no prompts left
            continue
        result = rollout_pool.next_completed()
        request, sent = in_flight.pop(result.request_id)
        scored = reward_pool.score(codec.rollouts(request, sent, result), [request.example] * n)
        submit(allocator.observe(result.request_id, scored))
    step_result = allocator.finish_step(engine_utilisation=pool_util)  # groups, counts, metrics
    batch = TrainBatch.from_groups(step_result.groups, pad_token_id=codec.pad_token_id)

(`submit` turns `PromptRequest`s into `GenerationRequest`s with the codec and hands them to
`rollout_pool.submit`; `adarl.bench.sampler.run_real_step` is a complete, runnable version.)

Requests are seeded and named from (seed, step, prompt id, draw index), so the same inputs give
the same requests whatever the order results come back in, and a restored allocator continues
exactly. Surplus kept groups (dynamic filter) are carried to later steps, oldest first, each
with the step that produced it and its weight version, until `max_carry_age_steps` expires it.

Overlapping steps (`max_open_steps` > 1, `rollout.cross_step_allocation`): `update(begin=...)` may
open step t+1 while step t still samples, so that t+1's first draws fill the engines t's tail
leaves idle. Each open step is a lane with its own pools, requests and sampler (a fresh copy of
the configured one: only samplers whose `start_step` resets everything, `steps_independent`);
results are routed to the lane that holds their request; steps finish in the order they opened,
and `complete`/`result` of an update are the oldest open step's. The per-prompt statistics are
shared: a step reads the records of the steps finished before it opened (with overlap, usually
not its predecessor's).
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from adarl.allocator.group_builder import GroupBuilder
from adarl.allocator.hint_stage import HintStage
from adarl.allocator.metrics import step_metrics
from adarl.allocator.pool_reward import FinishedPool, PoolStatisticsObserver, RescoredPool
from adarl.allocator.samplers.base import (
    PromptHistory,
    PromptStatus,
    Sampler,
    check_new_prompt_ids,
    derive_seed,
    is_positive,
)
from adarl.allocator.stats import PromptStats, PromptStatsStore
from adarl.hints.types import Hint, HintRequest
from adarl.types import (
    Group,
    PromptRequest,
    ScoredRollout,
    StatisticsReply,
    StatisticsRequest,
    TaskExample,
)

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class CarriedGroup:
    """A kept group waiting for a later step: produced at `step` by policy `weight_version`."""

    group: Group
    step: int
    weight_version: int


@dataclass(frozen=True)
class StepResult:
    """What one step's sampling produced: the groups to train on and what happened to the rest."""

    step: int
    groups: tuple[Group, ...]  # to train on: carried-in groups first (oldest first), then new
    resolved_prompts: int
    unresolved_prompts: int  # stopped at a cap or by the budget without the exit condition
    dropped_prompts: int  # prompts of this step that produced no group (trained or carried)
    carried_in: int  # groups from earlier steps trained now
    carried_out: int  # surplus groups of this step kept for later steps
    budget_exhausted: bool
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class StreamUpdate:
    """The allocator's answer to one `update` call: what to dispatch now, where the step stands.

    One call per batch of returned results keeps the driver at one round trip per batch when the
    allocator is a Ray actor (instead of observe + step_complete + needs_prompts per result);
    the step's start and finish ride on the first and last of those calls (`update(begin=...,
    finish_when_complete=True)`).
    """

    requests: tuple[PromptRequest, ...]  # to dispatch now
    prompts_wanted: int  # `needs_prompts()` after this update
    complete: bool  # `step_complete()` after this update
    # A statistic the sampler needs before it can draw more (GVM's gradient norms of its
    # pilot): the driver computes it with the learners and passes the reply to `update`.
    statistics: StatisticsRequest | None = None
    # Hints the hint stage asks for (collapsed prompts): the driver passes them to the hint
    # generator and its `Hint`s to `update` (adarl/allocator/hint_stage.py).
    hints: tuple[HintRequest, ...] = ()
    # The finished step, when the call asked for it (`finish_when_complete`) and completed it.
    result: StepResult | None = None


@dataclass
class _OpenRequest:
    prompt_id: str
    num_samples: int


# A step's own state: what `_reset_step` sets, and the sampler running it. With overlapping steps
# (`max_open_steps` > 1) the steps not being worked on are parked as these fields' values and
# swapped back when a call touches them, so every method below reads one step at a time.
_LANE_FIELDS = (
    "_step",
    "_examples",
    "_pools",
    "_open",
    "_finish_order",
    "_carried_in",
    "_carried_expired",
    "_requests",
    "_duplicates_skipped",
    "_statistics_request",
    "_statistics_asked",
    "_statistics_prompts",
    "_compute_s",
    "_calls",
    "sampler",
)


class BudgetAllocator:
    def __init__(
        self,
        *,
        sampler: Sampler,
        group_builder: GroupBuilder,
        stats: PromptStatsStore | None = None,
        seed: int = 0,
        max_carry_age_steps: int = 1,
        positive_threshold: float = 0.5,
        hints: HintStage | None = None,
        prior_pool: str = "difficulty",
        max_open_steps: int = 1,
    ) -> None:
        if prior_pool not in ("difficulty", "task"):
            raise ValueError(f"prior_pool must be 'difficulty' or 'task', got {prior_pool!r}")
        if max_carry_age_steps < 0:
            raise ValueError(f"max_carry_age_steps must be >= 0, got {max_carry_age_steps}")
        if max_open_steps < 1:
            raise ValueError(f"max_open_steps must be >= 1, got {max_open_steps}")
        if max_open_steps > 1:
            if not getattr(sampler, "steps_independent", False):
                raise ValueError(
                    f"max_open_steps={max_open_steps}: sampler {sampler.name!r} keeps state across "
                    "steps, so two of its steps cannot run side by side; overlapping steps "
                    "(rollout.cross_step_allocation) need seq_balance, seq_pos or uniform "
                    "without curation or a variance filter"
                )
            if hints is not None:
                raise ValueError(
                    f"max_open_steps={max_open_steps}: the hint stage keeps one step's collapses "
                    "and budget; turn hints off or rollout.cross_step_allocation=false"
                )
        self.max_open_steps = max_open_steps
        # The configured sampler before any step: each overlapping step runs a copy of it.
        self._fresh_sampler = copy.deepcopy(sampler) if max_open_steps > 1 else None
        self._parked: dict[int, dict[str, Any]] = {}  # step -> its lane (`_LANE_FIELDS`)
        self.sampler = sampler
        self.group_builder = group_builder
        self.stats = stats if stats is not None else PromptStatsStore()
        self.seed = seed
        self.max_carry_age_steps = max_carry_age_steps
        self.positive_threshold = positive_threshold
        self.hints = hints
        self.prior_pool = prior_pool
        if hints is not None:
            hints.samples_per_condition = sampler.prompt_allowance()
        self._carry: list[CarriedGroup] = []
        self._last_metrics: dict[str, float] = {}
        self._reset_step()

    def _reset_step(self) -> None:
        self._step: int | None = None
        self._examples: dict[str, TaskExample] = {}
        self._pools: dict[str, list[ScoredRollout]] = {}
        self._open: dict[str, _OpenRequest] = {}
        self._finish_order: list[str] = []
        self._carried_in: list[CarriedGroup] = []
        self._carried_expired = 0
        self._requests = 0
        self._duplicates_skipped = 0
        # The open statistics request, the prompts it asks about, and the prompt id of each of
        # its rollouts in order (None / empty: none open).
        self._statistics_request: StatisticsRequest | None = None
        self._statistics_asked: list[str] = []
        self._statistics_prompts: list[str] | None = None
        # Time inside the driver-facing calls of this step, and how many there were: with the
        # allocator an actor, the driver's `timing/allocator_s` minus this is the round trips.
        self._compute_s = 0.0
        self._calls = 0

    # -- the step ----------------------------------------------------------------------------

    def start_step(self, step: int, examples: Sequence[TaskExample]) -> list[PromptRequest]:
        """Begin `step` with a batch of prompts; returns the first requests to dispatch. With
        `max_open_steps` > 1 the steps open before keep sampling (the last opened is the one
        worked on until the next call routes elsewhere)."""
        started = time.perf_counter()
        requests = self._start_step(step, examples)
        oldest = min(self.open_steps())
        self._switch_to(oldest)
        self._count_call(started)
        return requests

    def discard_open_steps(self) -> list[int]:
        """Close every open step without groups or statistics (the run ends before they train;
        their requests must have returned or been abandoned by the caller). Returns them."""
        closed = self.open_steps()
        self._parked.clear()
        self._reset_step()
        return closed

    def open_steps(self) -> list[int]:
        """The steps started and not finished, oldest first (one unless steps overlap)."""
        current = [] if self._step is None else [self._step]
        return sorted(current + list(self._parked))

    def _start_step(self, step: int, examples: Sequence[TaskExample]) -> list[PromptRequest]:
        check_new_prompt_ids([e.prompt_id for e in examples], {}, what="start_step")
        open_steps = self.open_steps()
        if open_steps:
            if len(open_steps) >= self.max_open_steps:
                raise RuntimeError(
                    f"start_step({step}): step {open_steps[0]} is still open"
                    + (
                        "; call finish_step() first"
                        if self.max_open_steps == 1
                        else f" and {len(open_steps)} steps are open, the most "
                        f"max_open_steps={self.max_open_steps} allows"
                    )
                )
            if step <= open_steps[-1]:
                raise RuntimeError(
                    f"start_step({step}): step {open_steps[-1]} is open already; steps open in "
                    "increasing order"
                )
            self._park()
            assert self._fresh_sampler is not None
            self.sampler = copy.deepcopy(self._fresh_sampler)
        self._reset_step()
        self._step = step
        self._take_carried(step)
        self._enter(examples)
        if self.hints is not None:
            self.hints.start_step(step, [e.prompt_id for e in examples])
        self.sampler.start_step(
            step,
            [e.prompt_id for e in examples],
            self._history([e.prompt_id for e in examples]),
            carried_groups=len(self._carried_in),
        )
        return self._dispatch()

    def needs_prompts(self) -> int:
        """How many more prompts the step wants now (dynamic filter); 0 otherwise."""
        return self.sampler.needs_prompts() if self._step is not None else 0

    def add_prompts(self, examples: Sequence[TaskExample]) -> list[PromptRequest]:
        """Prompts answering `needs_prompts()`. An empty list, or one holding only prompts this
        step already has (skipped and counted), tells the sampler the source has no more."""
        self._require_open("add_prompts")
        fresh = [e for e in examples if e.prompt_id not in self._examples]
        fresh = list({e.prompt_id: e for e in fresh}.values())
        self._duplicates_skipped += len(examples) - len(fresh)
        self._enter(fresh)
        if self.hints is not None:
            self.hints.add_prompts([e.prompt_id for e in fresh])
        self.sampler.add_prompts(
            [e.prompt_id for e in fresh], self._history([e.prompt_id for e in fresh])
        )
        return self._dispatch()

    def _pool_key(self, example: TaskExample) -> str | None:
        """The prompts an unseen prompt's prior is pooled from: its difficulty's, or the
        task's (None) when rows have no `difficulty` or `prior_pool` is "task"."""
        if self.prior_pool == "task" or example.difficulty is None:
            return None
        return f"difficulty={example.difficulty:g}"

    def _history(self, prompt_ids: Sequence[str]) -> dict[str, PromptHistory]:
        """Every earlier outcome of each prompt as the samplers read it: its record discounted to
        this step and the prior pooled from its pool (adarl/allocator/stats.py)."""
        return self.stats.history(
            prompt_ids,
            step=self._step,
            pools={pid: self._pool_key(self._examples[pid]) for pid in prompt_ids},
        )

    def predicted_collapses(self, step: int, examples: Sequence[TaskExample]) -> list[str]:
        """The prompts of the coming step `step` (not started yet) whose record predicts a
        collapse (`HintStage.predicted_collapses`), in step order: those whose hints the driver
        writes while the step before trains (`hints.write_ahead`). [] without a hint stage. Reads
        the statistics only: which prompts get hints is decided as without it."""
        if self.hints is None:
            return []
        ids = [e.prompt_id for e in examples]
        history = self.stats.history(
            ids, step=step, pools={e.prompt_id: self._pool_key(e) for e in examples}
        )
        return self.hints.predicted_collapses({pid: history[pid] for pid in ids})

    def observe(self, request_id: str, scored: Sequence[ScoredRollout]) -> list[PromptRequest]:
        """Every scored rollout of one request; returns the requests this result unlocks."""
        self._require_open("observe")
        try:
            request = self._open.pop(request_id)
        except KeyError:
            raise KeyError(
                f"observe: unknown request id {request_id!r} (not open in step {self._step}); "
                "pass each request's results exactly once, before finish_step()"
            ) from None
        if len(scored) != request.num_samples:
            self._open[request_id] = request
            raise ValueError(
                f"observe({request_id!r}): got {len(scored)} scored rollouts for a request of "
                f"{request.num_samples}; pass all of a request's rollouts together"
            )
        for item in scored:
            if item.rollout.prompt_id != self._task_prompt_id(request.prompt_id):
                self._open[request_id] = request
                raise ValueError(
                    f"observe({request_id!r}): rollout of prompt {item.rollout.prompt_id!r} in "
                    f"a request for {request.prompt_id!r}"
                )
        self._pools[request.prompt_id].extend(scored)
        self.sampler.observe(request.prompt_id, [s.reward for s in scored])
        if self.hints is not None and self.hints.after_observe(
            request.prompt_id,
            self._pools[request.prompt_id],
            self._examples[request.prompt_id],
            sampling_ended=self.sampler.verdict(request.prompt_id) is not PromptStatus.SAMPLING,
        ):
            self.sampler.abandon(request.prompt_id)  # collapsed: re-rolled with a hint
        if self.sampler.verdict(request.prompt_id) is not PromptStatus.SAMPLING:
            self._finish_order.append(request.prompt_id)
        return self._dispatch()

    def update(
        self,
        *,
        begin: tuple[int, Sequence[TaskExample]] | None = None,
        results: Sequence[tuple[str, Sequence[ScoredRollout]]] = (),
        new_examples: Sequence[TaskExample] | None = None,
        statistics: StatisticsReply | None = None,
        hints: Sequence[Hint] = (),
        finish_when_complete: bool = False,
    ) -> StreamUpdate:
        """`begin=(step, examples)` first starts the step (`start_step`). Then observe every
        `(request_id, scored rollouts)` of `results` in order; if `new_examples` is given, add
        them as the answer to `needs_prompts()` (an empty list: the source has none left); if
        `statistics` is given, it answers the open statistics request. Returns the requests all
        of it unlocked, any statistics request, and the step's state; with
        `finish_when_complete`, a call that leaves the step complete also finishes it
        (`finish_step`) and returns its `StepResult`. One call, one round trip."""
        started = time.perf_counter()
        requests: list[PromptRequest] = []
        if begin is not None:
            if self._step is not None and self.max_open_steps == 1:
                raise RuntimeError(
                    f"update(begin={begin[0]}): step {self._step} is still open; finish it first"
                )
            requests += self._start_step(*begin)
        for request_id, scored in results:
            self._switch_to(self._lane_of(request_id))
            requests += self.observe(request_id, scored)
        if self._parked:  # what follows is the oldest step's (the one the driver waits for)
            self._switch_to(min(self.open_steps()))
        if new_examples is not None:
            requests += self.add_prompts(new_examples)
        if statistics is not None:
            requests += self._observe_statistics(statistics)
        for hint in hints:
            requests += self._observe_hint(hint)
        request, unlocked = self._poll_statistics()
        requests += unlocked
        update = StreamUpdate(
            requests=tuple(requests),
            prompts_wanted=self.needs_prompts(),
            complete=self.step_complete(),
            statistics=request,
            hints=tuple(self.hints.take_requests()) if self.hints is not None else (),
        )
        if finish_when_complete and update.complete:
            result = self._finish_step(engine_utilisation=None, started=started)
            return dataclasses.replace(update, result=result)
        self._count_call(started)
        return update

    def _observe_hint(self, hint: Hint) -> list[PromptRequest]:
        """A hint for a collapsed prompt: its new condition (x, h) joins the step as a fresh
        prompt of the sampler (no history: the hinted condition has none)."""
        if self.hints is None:
            raise RuntimeError("update(hints=...): this allocator has no hint stage")
        sampler_id = self.hints.on_hint(hint)
        if sampler_id is None:
            return []
        self._examples[sampler_id] = self._examples[hint.prompt_id]
        self._pools[sampler_id] = []
        # Paid from the hint stage's budget (hints.max_extra_rollouts_fraction), not from the
        # samples the step's unhinted prompts may still draw.
        self.sampler.fund([sampler_id])
        self.sampler.add_prompts([sampler_id], self.stats.history([sampler_id]))
        return self._dispatch()

    def _task_prompt_id(self, sampler_id: str) -> str:
        """The task prompt a sampler-side id stands for (itself, or x for a hinted x@hℓ)."""
        if self.hints is None:
            return sampler_id
        return self.hints.condition(sampler_id).prompt_id

    def step_complete(self) -> bool:
        """True once nothing is in flight and the sampler wants no more draws or prompts."""
        return (
            self._step is not None
            and not self._open
            and self._statistics_prompts is None
            and not (self.hints is not None and self.hints.busy())
            and self.sampler.done()
        )

    def _poll_statistics(self) -> tuple[StatisticsRequest | None, list[PromptRequest]]:
        """The statistics request open now, made when the sampler first asks (then kept until
        answered), and the requests unlocked when it needs no learner call.

        A sampler asks for prompts (it never sees rollouts); the request holds their accepted
        samples (reward > positive_threshold). With none accepted at all, every asked prompt
        gets 0 at once.
        """
        if self._statistics_request is not None or self._step is None or self._open:
            return self._statistics_request, []
        wanted = self.sampler.statistics_wanted()
        if not wanted:
            return None, []
        accepted = [
            (pid, s)
            for pid in wanted
            for s in self._pools[pid]
            if is_positive(s.reward, self.positive_threshold)
        ]
        self._statistics_asked = list(wanted)
        self._statistics_prompts = [pid for pid, _ in accepted]
        self._statistics_request = StatisticsRequest(
            step=self._step, kind="gradient_norm", rollouts=tuple(s for _, s in accepted)
        )
        if accepted:
            return self._statistics_request, []
        empty = StatisticsReply(kind="gradient_norm", values=(), weight_version=-1)
        return None, self._observe_statistics(empty)

    def _observe_statistics(self, reply: StatisticsReply) -> list[PromptRequest]:
        if self._statistics_prompts is None or self._statistics_request is None:
            raise RuntimeError("update(statistics=...): no statistics request is open")
        if len(reply.values) != len(self._statistics_prompts):
            raise ValueError(
                f"statistics reply has {len(reply.values)} values for a request of "
                f"{len(self._statistics_prompts)} rollouts; answer every rollout, in order"
            )
        sums: dict[str, float] = {pid: 0.0 for pid in self._statistics_asked}
        counts: dict[str, int] = {pid: 0 for pid in self._statistics_asked}
        for pid, value in zip(self._statistics_prompts, reply.values, strict=True):
            sums[pid] += float(value)
            counts[pid] += 1
        means = {pid: sums[pid] / counts[pid] if counts[pid] else 0.0 for pid in sums}
        self._statistics_prompts = None
        self._statistics_request = None
        self.stats.report_gradient_norms(means, step=self._step if self._step is not None else -1)
        self.sampler.observe_statistics(means)
        return self._dispatch()

    def in_flight(self) -> int:
        """Requests dispatched and not yet observed."""
        return len(self._open)

    def finished_pools(self) -> list[FinishedPool]:
        """The pools that will become groups (resolved or unresolved, not empty), in prompt
        order: the input of a pool reward stage (adarl/allocator/pool_reward.py), called between
        `step_complete()` and `finish_step()`."""
        self._require_complete("finished_pools")
        kept = (PromptStatus.RESOLVED, PromptStatus.UNRESOLVED)
        return [
            FinishedPool(
                prompt_id=pid, example=self._examples[pid], rollouts=tuple(self._pools[pid])
            )
            for pid in self.sampler.prompt_ids()
            if self._pools[pid] and self.sampler.verdict(pid) in kept
        ]

    def rescore_pools(self, rescored: Mapping[str, RescoredPool]) -> None:
        """Replace finished pools' rewards with a pool reward stage's, and hand its statistics
        to a sampler that reads them (`PoolStatisticsObserver`). Groups, per-prompt statistics
        and step metrics then use the new rewards."""
        self._require_complete("rescore_pools")
        for pid, new in rescored.items():
            pool = self._pools.get(pid)
            if pool is None or len(new.rewards) != len(pool):
                raise ValueError(
                    f"rescore_pools: prompt {pid!r} has "
                    f"{'no pool' if pool is None else f'{len(pool)} rollouts'} in step "
                    f"{self._step} but {len(new.rewards)} rewards were given; rescore exactly "
                    "the pools finished_pools() returned"
                )
            self._pools[pid] = [
                dataclasses.replace(s, reward=float(r))
                for s, r in zip(pool, new.rewards, strict=True)
            ]
        if isinstance(self.sampler, PoolStatisticsObserver):
            self.sampler.observe_pool_statistics(
                {pid: dict(new.statistics) for pid, new in rescored.items()}
            )

    def finish_step(self, *, engine_utilisation: float | None = None) -> StepResult:
        """Build the kept groups, update per-prompt statistics, carry surplus, close the step.

        `engine_utilisation`: the rollout pool's busy fraction over this step's sampling
        (`RolloutPool.metrics()["perf/rollout_engine_utilisation"]`), logged with the step's
        metrics as `sampling/engine_utilisation`; the allocator cannot see the engines itself.
        """
        return self._finish_step(engine_utilisation=engine_utilisation, started=time.perf_counter())

    def _finish_step(self, *, engine_utilisation: float | None, started: float) -> StepResult:
        """`finish_step` of the oldest open step, counted as one call begun at `started` (its
        own, or `update`'s); the next open step, if any, is worked on after it."""
        if self._parked:
            self._switch_to(min(self.open_steps()))
        self._require_open("finish_step")
        if not self.step_complete():
            raise RuntimeError(
                f"finish_step: step {self._step} is not complete ({len(self._open)} requests in "
                f"flight, sampler done={self.sampler.done()}, needs_prompts="
                f"{self.sampler.needs_prompts()}); keep observing results until step_complete()"
            )
        step = self._step
        assert step is not None
        verdicts = {pid: self.sampler.verdict(pid) for pid in self.sampler.prompt_ids()}
        target = self.sampler.target_groups()
        # With a target, groups are taken in completion order (the surplus is what came last);
        # without one, in prompt order, so results do not depend on arrival order.
        order = self._finish_order if target is not None else self.sampler.prompt_ids()
        order = order + [pid for pid in verdicts if pid not in set(order)]
        new_groups: list[Group] = []
        for pid in order:
            verdict = verdicts[pid]
            if verdict not in (PromptStatus.RESOLVED, PromptStatus.UNRESOLVED):
                continue
            group = self.group_builder.build(
                prompt_id=self._task_prompt_id(pid),
                # A pilot only estimated (its draw count depended on nothing, but the trained
                # draw's count depended on its labels): it stays out of the group.
                pool=self._pools[pid][self.sampler.pilot_samples(pid) :],
                resolved=verdict is PromptStatus.RESOLVED,
                step=step,
                prior_pass_rate=self.stats.pass_rate(pid),
                law=self.sampler.sequential_law(),
                estimate=self.sampler.pass_rate_estimate(pid),
            )
            if group is None:
                continue
            weight = self.sampler.advantage_weight(pid)
            if weight != 1.0:  # drawn with probability 1/weight: Horvitz-Thompson (curation)
                group = dataclasses.replace(
                    group, advantages=tuple(a * weight for a in group.advantages)
                )
            new_groups.append(group)
        for pid, pool in self._pools.items():
            if self._task_prompt_id(pid) != pid:
                continue  # a hinted condition: the statistics estimate the unhinted prompt
            if verdicts.get(pid) is PromptStatus.SKIPPED:
                self.stats.record_skip(pid)
                continue
            labels = "".join(
                "1" if is_positive(s.reward, self.positive_threshold) else "0" for s in pool
            )
            self.stats.record_step(
                pid,
                step=step,
                samples=len(pool),
                positives=labels.count("1"),
                pool=self._pool_key(self._examples[pid]),
                visit_weight=1.0 / self.sampler.inclusion_probability(pid),
                labels=labels,
            )

        trained = [c.group for c in self._carried_in]
        surplus: list[Group] = []
        if target is None:
            trained.extend(new_groups)
        else:
            room = max(0, target - len(trained))
            trained.extend(new_groups[:room])
            surplus = new_groups[room:]
        if self.max_carry_age_steps > 0:
            self._carry.extend(
                CarriedGroup(group=g, step=step, weight_version=_weight_version(g)) for g in surplus
            )
            carried_out = len(surplus)
        else:  # no carrying: surplus is discarded, as in DAPO
            self._carried_expired += len(surplus)
            carried_out = 0

        sampler_metrics = self.sampler.metrics()
        # Per task prompt: a hinted prompt's conditions (x, x@h1, ...) are one prompt whose
        # rollouts are all its pools and whose verdict is its last condition's.
        task_pools: dict[str, list[ScoredRollout]] = {}
        for pid, pool in self._pools.items():
            task_pools.setdefault(self._task_prompt_id(pid), []).extend(pool)
        task_verdicts = (
            verdicts
            if self.hints is None
            else {x: verdicts[sid] for x, sid in self.hints.current.items() if sid in verdicts}
        )
        # Prompts skipped before rollout were candidates, not prompts of the step (counted by the
        # sampler's sampling/skipped_prompts).
        task_verdicts = {
            pid: v for pid, v in task_verdicts.items() if v is not PromptStatus.SKIPPED
        }
        metrics = step_metrics(
            pools=task_pools,
            verdicts=task_verdicts,
            trained=trained,
            kept=new_groups,
            carried_in=len(self._carried_in),
            carried_out=carried_out,
            carried_expired=self._carried_expired,
            carried_age_max=max((step - c.step for c in self._carried_in), default=0),
            target_groups=target,
            requests=self._requests,
            positive_threshold=self.positive_threshold,
        )
        metrics.update(sampler_metrics)
        if self.hints is not None:
            metrics.update(self.hints.finish(self._pools))
        metrics["sampling/duplicate_prompts_skipped"] = float(self._duplicates_skipped)
        if engine_utilisation is not None:
            metrics["sampling/engine_utilisation"] = float(engine_utilisation)
        self._count_call(started)
        metrics["timing/allocator_compute_s"] = self._compute_s
        metrics["perf/allocator_calls"] = float(self._calls)
        budget_exhausted = bool(sampler_metrics.get("sampling/budget_exhausted", 0.0))
        dropped = len(task_verdicts) - len({g.prompt_id for g in new_groups})
        result = StepResult(
            step=step,
            groups=tuple(trained),
            resolved_prompts=sum(v is PromptStatus.RESOLVED for v in task_verdicts.values()),
            unresolved_prompts=sum(v is PromptStatus.UNRESOLVED for v in task_verdicts.values()),
            dropped_prompts=dropped,
            carried_in=len(self._carried_in),
            carried_out=carried_out,
            budget_exhausted=budget_exhausted,
            metrics=metrics,
        )
        self._warn(result)
        self._last_metrics = metrics
        self._reset_step()
        if self._parked:
            self._restore(min(self._parked))
        return result

    # -- statistics --------------------------------------------------------------------------

    def prompt_stats(self, prompt_id: str) -> PromptStats | None:
        return self.stats.get(prompt_id)

    def metrics(self) -> dict[str, float]:
        """The last finished step's metrics."""
        return dict(self._last_metrics)

    # -- checkpointing -----------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue exactly, an open step included (picklable). Not with
        overlapping steps open: a checkpoint is taken between steps, none sampling ahead."""
        if self._parked:
            raise RuntimeError(
                f"state_dict: steps {self.open_steps()} are open; overlapping steps are not "
                "checkpointed (the session opens no step past a checkpoint)"
            )
        return {
            "sampler": self.sampler.state_dict(),
            "stats": self.stats.state_dict(),
            "carry": list(self._carry),
            "last_metrics": dict(self._last_metrics),
            "step": {
                "step": self._step,
                "examples": dict(self._examples),
                "pools": {pid: list(pool) for pid, pool in self._pools.items()},
                "open": {rid: (r.prompt_id, r.num_samples) for rid, r in self._open.items()},
                "finish_order": list(self._finish_order),
                "carried_in": list(self._carried_in),
                "carried_expired": self._carried_expired,
                "requests": self._requests,
                "duplicates_skipped": self._duplicates_skipped,
                "statistics": (
                    self._statistics_request,
                    list(self._statistics_asked),
                    self._statistics_prompts,
                ),
            },
            "hints": self.hints.state_dict() if self.hints is not None else None,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.sampler.load_state_dict(state["sampler"])
        self.stats.load_state_dict(state["stats"])
        self._carry = list(state["carry"])
        self._last_metrics = dict(state["last_metrics"])
        s = state["step"]
        self._step = s["step"]
        self._examples = dict(s["examples"])
        self._pools = {pid: list(pool) for pid, pool in s["pools"].items()}
        self._open = {rid: _OpenRequest(pid, n) for rid, (pid, n) in s["open"].items()}
        self._finish_order = list(s["finish_order"])
        self._carried_in = list(s["carried_in"])
        self._carried_expired = int(s["carried_expired"])
        self._requests = int(s["requests"])
        self._duplicates_skipped = int(s["duplicates_skipped"])
        request, asked, prompts = s["statistics"]
        self._statistics_request = request
        self._statistics_asked = list(asked)
        self._statistics_prompts = None if prompts is None else list(prompts)
        if (state.get("hints") is None) != (self.hints is None):
            raise ValueError(
                "allocator state and this allocator disagree on hints (one has a hint stage, "
                "the other not): resume with the run's own hints settings"
            )
        if self.hints is not None:
            self.hints.load_state_dict(state["hints"])

    # -- internals ---------------------------------------------------------------------------

    def _lane_of(self, request_id: str) -> int:
        """The open step whose request this is (the one worked on first)."""
        if request_id in self._open or not self._parked:
            return self._step if self._step is not None else -1
        for step, lane in self._parked.items():
            if request_id in lane["_open"]:
                return step
        return self._step if self._step is not None else -1  # unknown: observe says so

    def _park(self) -> None:
        assert self._step is not None
        self._parked[self._step] = {name: getattr(self, name) for name in _LANE_FIELDS}

    def _restore(self, step: int) -> None:
        for name, value in self._parked.pop(step).items():
            setattr(self, name, value)

    def _switch_to(self, step: int) -> None:
        """Work on open step `step` (no-op when it is the current one)."""
        if step == self._step or step not in self._parked:
            return
        self._park()
        self._restore(step)

    def _count_call(self, started: float) -> None:
        self._compute_s += time.perf_counter() - started
        self._calls += 1

    def _require_open(self, what: str) -> None:
        if self._step is None:
            raise RuntimeError(f"{what}: no step is open; call start_step(step, examples) first")

    def _require_complete(self, what: str) -> None:
        self._require_open(what)
        if not self.step_complete():
            raise RuntimeError(
                f"{what}: step {self._step} is still sampling ({len(self._open)} requests in "
                "flight); call it once step_complete() is true, before finish_step()"
            )

    def _enter(self, examples: Sequence[TaskExample]) -> None:
        for example in examples:
            self._examples[example.prompt_id] = example
            self._pools.setdefault(example.prompt_id, [])

    def _take_carried(self, step: int) -> None:
        """Expire carried groups older than the age limit; take the rest for this step."""
        fresh = [c for c in self._carry if step - c.step <= self.max_carry_age_steps]
        self._carried_expired = len(self._carry) - len(fresh)
        target = self.sampler.target_groups()
        take = len(fresh) if target is None else min(target, len(fresh))
        self._carried_in, self._carry = fresh[:take], fresh[take:]

    def _dispatch(self) -> list[PromptRequest]:
        assert self._step is not None
        requests = []
        for draw in self.sampler.next():
            request_id = f"{self._step}:{draw.prompt_id}:{draw.index}"
            self._open[request_id] = _OpenRequest(draw.prompt_id, draw.num_samples)
            hint, hint_level = None, 0
            if self.hints is not None:
                condition = self.hints.condition(draw.prompt_id)
                hint, hint_level = condition.text, condition.level
                self.hints.record_dispatch(draw.prompt_id, draw.num_samples)
            requests.append(
                PromptRequest(
                    request_id=request_id,
                    example=self._examples[draw.prompt_id],
                    num_samples=draw.num_samples,
                    step=self._step,
                    seed=derive_seed(self.seed, self._step, draw.prompt_id, draw.index),
                    hint=hint,
                    hint_level=hint_level,
                )
            )
        self._requests += len(requests)
        return requests

    def _warn(self, result: StepResult) -> None:
        # (A step with no mixed group is reported once, by the session, where the console is.)
        m = result.metrics
        if m.get("signal/groups_short", 0.0) > 0:
            logger.warning(
                "step %d: trained on %d groups, %d short of the target of %d (%s); the step "
                "goes on with what it has",
                result.step,
                len(result.groups),
                int(m["signal/groups_short"]),
                int(m["signal/groups_target"]),
                "sample budget exhausted" if result.budget_exhausted else "prompt source empty",
            )


def _weight_version(group: Group) -> int:
    """The oldest policy version among the group's rollouts (what staleness is measured from)."""
    return min(s.rollout.weight_version for s in group.rollouts)
