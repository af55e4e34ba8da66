"""`BudgetAllocator`: per-prompt statistics, the step's stream of `PromptRequest`s, kept groups.

A plain class (`adarl.cluster` wraps it as a Ray actor; every public method is a plain method so
that it can be called remotely). The rollout phase's `RolloutStream` (adarl/driver/rollout_phase.py;
the benchmarks and component tests run the same loop on a simulated rollout pool) makes one
`update` call per wave, each answered by a `StreamUpdate`:

    state = allocator.update(begin=(step, examples), finish_when_complete=True)
    while state.result is None:
        dispatch(state.requests)              # PromptRequests, through the codec, to the engines
        if state.hints:                       # collapsed prompts (the hint stage)
            answer = {"hints": hint_generator.hints(state.hints)}
        elif state.statistics is not None:    # GVM's gradient norms of its pilot
            answer = {"statistics": learners.sample_statistics(state.statistics, ...)}
        elif state.prompts_wanted:            # refills (dynamic filter, a rollout budget)
            answer = {"new_examples": prompts.next_batch(state.prompts_wanted)}
        else:                                 # every result back by now, scored in one call
            answer = {"results": [(request_id, scored_rollouts), ...]}
        state = allocator.update(**answer, finish_when_complete=True)
    groups = state.result.groups              # and the step's counts and metrics

With a pool reward stage (DRO's R3) the call that completes the step does not finish it:
`finished_pools`, `rescore_pools` and `finish_step` follow (adarl/allocator/pool_reward.py).

Requests are seeded and named from (seed, step, prompt id, draw index), so the same inputs give
the same requests whatever the order results come back in, and a restored allocator continues
exactly. Surplus kept groups (dynamic filter) are carried to later steps, oldest first, each
with the step that produced it and its weight version, until `max_carry_age_steps` expires it.

Each open step is one record (`OpenStep`, adarl/allocator/open_step.py): its prompts, pools,
requests in flight, statistics request, counters and the sampler running it. Overlapping steps
(`max_open_steps` > 1, `rollout.cross_step_allocation`): `update(begin=...)` may open step t+1
while step t still samples, so that t+1's first draws fill the engines t's tail leaves idle. Each
runs a fresh copy of the configured sampler (only samplers whose `start_step` resets everything,
`steps_independent`); a result goes to the step holding its request; steps finish in the order
they opened, and the rest of an update (refills, statistics, hints, `complete`, `result`) is the
oldest open step's. The per-prompt statistics are shared: a step reads the records of the steps
finished before it opened (with overlap, usually not its predecessor's).
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from adarl.allocator.coverage_phase import CoveragePhase
from adarl.allocator.group_builder import GroupBuilder
from adarl.allocator.hint_stage import HintStage
from adarl.allocator.metrics import step_metrics

# CarriedGroup is also the name earlier checkpoints' carried groups unpickle by.
from adarl.allocator.open_step import CarriedGroup, OpenRequest, OpenStep, no_open_step_state
from adarl.allocator.rehearsal import RehearsalStore
from adarl.allocator.samplers.base import (
    HintHost,
    PromptHistory,
    PromptStatus,
    Sampler,
    capability,
    check_new_prompt_ids,
    derive_seed,
    is_positive,
)
from adarl.allocator.stats import PromptStats, PromptStatsStore
from adarl.hints.types import Hint, HintRequest
from adarl.types import (
    FinishedPool,
    Group,
    PromptRequest,
    RescoredPool,
    ScoredRollout,
    StatisticsReply,
    StatisticsRequest,
    TaskExample,
)

logger = logging.getLogger(__name__)


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
    # Groups a loss term trains alone, with the groups (`Group.trained_by`: DPH-RL's rehearsal
    # rows, stored samples of earlier steps drawn no rollout now); empty without such a store.
    term_groups: tuple[Group, ...] = ()


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
        rehearsal: RehearsalStore | None = None,
        coverage_phase: CoveragePhase | None = None,
    ) -> None:
        """`rehearsal`: DPH-RL's store (adarl/allocator/rehearsal.py): its prompts draw no
        rollout, and each finished step carries its rehearsal rows. `coverage_phase`: the
        builder of the first steps and its clock (adarl/allocator/coverage_phase.py); the
        `group_builder` builds the others."""
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
        # The sampler of the oldest open step (of the last one finished when none is open): a
        # step opened while no other is runs it, so its state carries from step to step.
        self.sampler = sampler
        self.group_builder = group_builder
        self.stats = stats if stats is not None else PromptStatsStore()
        self.seed = seed
        self.max_carry_age_steps = max_carry_age_steps
        self.positive_threshold = positive_threshold
        self.hints = hints
        self.prior_pool = prior_pool
        self.rehearsal = rehearsal
        self.coverage_phase = coverage_phase
        if hints is not None:
            host = _hint_host(capability(sampler, HintHost), sampler)
            hints.samples_per_condition = host.prompt_allowance()
        self._carry: list[CarriedGroup] = []
        self._last_metrics: dict[str, float] = {}
        self._steps: dict[int, OpenStep] = {}  # the open steps by number, oldest first

    # -- the step ----------------------------------------------------------------------------

    def start_step(self, step: int, examples: Sequence[TaskExample]) -> list[PromptRequest]:
        """Begin `step` with a batch of prompts; returns the first requests to dispatch. With
        `max_open_steps` > 1 the steps open before keep sampling."""
        started = time.perf_counter()
        requests = self._start_step(step, examples)
        self._count_call(started)
        return requests

    def discard_open_steps(self) -> list[int]:
        """Close every open step without groups or statistics (the run ends before they train;
        their requests must have returned or been abandoned by the caller). Returns them."""
        closed = self.open_steps()
        self._steps.clear()
        return closed

    def open_steps(self) -> list[int]:
        """The steps started and not finished, oldest first (one unless steps overlap)."""
        return sorted(self._steps)

    def _start_step(self, step: int, examples: Sequence[TaskExample]) -> list[PromptRequest]:
        check_new_prompt_ids([e.prompt_id for e in examples], {}, what="start_step")
        open_steps = self.open_steps()
        sampler = self.sampler
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
            assert self._fresh_sampler is not None
            sampler = copy.deepcopy(self._fresh_sampler)
        current = self._steps[step] = OpenStep.open(step, sampler)
        self._take_carried(current)
        if self.rehearsal is not None:  # DPH-RL: rehearsed prompts draw no rollout
            examples, _ = self.rehearsal.leave_out(examples, current.rehearsal_skipped)
        current.enter(examples)
        ids = [e.prompt_id for e in examples]
        if self.hints is not None:
            self.hints.start_step(step, ids)
        sampler.start_step(
            step, ids, self._history(current, ids), carried_groups=len(current.carried_in)
        )
        return self._dispatch(current)

    def needs_prompts(self) -> int:
        """How many more prompts the step wants now (refills); 0 otherwise."""
        return self._oldest().sampler.needs_prompts() if self._steps else 0

    def add_prompts(self, examples: Sequence[TaskExample]) -> list[PromptRequest]:
        """Prompts answering `needs_prompts()`. An empty list, or one holding only prompts this
        step already has (skipped and counted), tells the sampler the source has no more."""
        current = self._oldest("add_prompts")
        fresh = [e for e in examples if e.prompt_id not in current.examples]
        fresh = list({e.prompt_id: e for e in fresh}.values())
        current.duplicates_skipped += len(examples) - len(fresh)
        if self.rehearsal is not None:
            fresh, rehearsed_new = self.rehearsal.leave_out(fresh, current.rehearsal_skipped)
            if not fresh and rehearsed_new:
                return []  # only rehearsed prompts: the source may have others; asked again
        current.enter(fresh)
        ids = [e.prompt_id for e in fresh]
        if self.hints is not None:
            self.hints.add_prompts(ids)
        current.sampler.add_prompts(ids, self._history(current, ids))
        return self._dispatch(current)

    def _pool_key(self, example: TaskExample) -> str | None:
        """The prompts an unseen prompt's prior is pooled from: its difficulty's, or the
        task's (None) when rows have no `difficulty` or `prior_pool` is "task"."""
        if self.prior_pool == "task" or example.difficulty is None:
            return None
        return f"difficulty={example.difficulty:g}"

    def _history(self, current: OpenStep, prompt_ids: Sequence[str]) -> dict[str, PromptHistory]:
        """Every earlier outcome of each prompt as the samplers read it: its record discounted to
        this step and the prior pooled from its pool (adarl/allocator/stats.py)."""
        return self.stats.history(
            prompt_ids,
            step=current.step,
            pools={pid: self._pool_key(current.examples[pid]) for pid in prompt_ids},
        )

    def predicted_collapses(self, step: int, examples: Sequence[TaskExample]) -> list[str]:
        """The prompts of the coming step `step` (not started yet) whose record predicts a
        collapse (`HintStage.predicted_collapses`), in step order: those whose hints the driver
        writes while the step before trains (`hints.write_ahead`). [] without a hint stage. Reads
        the statistics only: which prompts get hints is decided as without it."""
        if self.hints is None:
            return []
        ids = [
            e.prompt_id
            for e in examples
            if self.rehearsal is None or not self.rehearsal.holds(e.prompt_id)
        ]
        history = self.stats.history(
            ids, step=step, pools={e.prompt_id: self._pool_key(e) for e in examples}
        )
        return self.hints.predicted_collapses({pid: history[pid] for pid in ids})

    def observe(self, request_id: str, scored: Sequence[ScoredRollout]) -> list[PromptRequest]:
        """Every scored rollout of one request; returns the requests this result unlocks (for
        the step holding the request)."""
        current = self._holding(request_id)
        request = current.in_flight.pop(request_id)
        if len(scored) != request.num_samples:
            current.in_flight[request_id] = request
            raise ValueError(
                f"observe({request_id!r}): got {len(scored)} scored rollouts for a request of "
                f"{request.num_samples}; pass all of a request's rollouts together"
            )
        for item in scored:
            if item.rollout.prompt_id != self._task_prompt_id(request.prompt_id):
                current.in_flight[request_id] = request
                raise ValueError(
                    f"observe({request_id!r}): rollout of prompt {item.rollout.prompt_id!r} in "
                    f"a request for {request.prompt_id!r}"
                )
        pid = request.prompt_id
        current.pools[pid].extend(scored)
        current.sampler.observe(pid, [s.reward for s in scored])
        if self.hints is not None and self.hints.after_observe(
            pid,
            current.pools[pid],
            current.examples[pid],
            sampling_ended=current.sampler.verdict(pid) is not PromptStatus.SAMPLING,
        ):
            _hint_host(current.hooks.hints, current.sampler).abandon(pid)  # re-rolled with a hint
        if current.sampler.verdict(pid) is not PromptStatus.SAMPLING:
            current.finish_order.append(pid)
        return self._dispatch(current)

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
        (`finish_step`) and returns its `StepResult`. One call, one round trip. With overlapping
        steps, each result goes to its own step and the rest is the oldest open step's."""
        started = time.perf_counter()
        requests: list[PromptRequest] = []
        if begin is not None:
            if self._steps and self.max_open_steps == 1:
                raise RuntimeError(
                    f"update(begin={begin[0]}): step {self.open_steps()[0]} is still open; "
                    "finish it first"
                )
            requests += self._start_step(*begin)
        for request_id, scored in results:
            requests += self.observe(request_id, scored)
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
        current = self._oldest("update(hints=...)")
        current.examples[sampler_id] = current.examples[hint.prompt_id]
        current.pools[sampler_id] = []
        # Paid from the hint stage's budget (hints.max_extra_rollouts_fraction), not from the
        # samples the step's unhinted prompts may still draw.
        _hint_host(current.hooks.hints, current.sampler).fund([sampler_id])
        current.sampler.add_prompts([sampler_id], self.stats.history([sampler_id]))
        return self._dispatch(current)

    def _task_prompt_id(self, sampler_id: str) -> str:
        """The task prompt a sampler-side id stands for (itself, or x for a hinted x@hℓ)."""
        if self.hints is None:
            return sampler_id
        return self.hints.condition(sampler_id).prompt_id

    def step_complete(self) -> bool:
        """True once nothing is in flight and the sampler wants no more draws or prompts."""
        if not self._steps:
            return False
        current = self._oldest()
        return (
            not current.in_flight
            and current.statistics_prompts is None
            and not (self.hints is not None and self.hints.busy())
            and current.sampler.done()
        )

    def _poll_statistics(self) -> tuple[StatisticsRequest | None, list[PromptRequest]]:
        """The statistics request open now, made when the sampler first asks (then kept until
        answered), and the requests unlocked when it needs no learner call.

        A sampler asks for prompts (it never sees rollouts); the request holds their accepted
        samples (reward > positive_threshold). With none accepted at all, every asked prompt
        gets 0 at once.
        """
        if not self._steps:
            return None, []
        current = self._oldest()
        if current.statistics_request is not None or current.in_flight:
            return current.statistics_request, []
        wanted = current.hooks.statistics_wanted()
        if not wanted:
            return None, []
        request = current.ask_statistics(wanted, positive_threshold=self.positive_threshold)
        if request.rollouts:
            return request, []
        empty = StatisticsReply(kind="gradient_norm", values=(), weight_version=-1)
        return None, self._observe_statistics(empty)

    def _observe_statistics(self, reply: StatisticsReply) -> list[PromptRequest]:
        if not self._steps:
            raise RuntimeError("update(statistics=...): no statistics request is open")
        current = self._oldest()
        means = current.answer_statistics(reply)
        self.stats.report_gradient_norms(means, step=current.step)
        assert current.hooks.statistics is not None  # only a StatisticsRequester asks
        current.hooks.statistics.observe_statistics(means)
        return self._dispatch(current)

    def in_flight(self) -> int:
        """Requests of the oldest open step dispatched and not yet observed."""
        return len(self._oldest().in_flight) if self._steps else 0

    def finished_pools(self) -> list[FinishedPool]:
        """The pools that will become groups (resolved or unresolved, not empty), in prompt
        order: the input of a pool reward stage (adarl/allocator/pool_reward.py), called between
        `step_complete()` and `finish_step()`."""
        current = self._complete("finished_pools")
        kept = (PromptStatus.RESOLVED, PromptStatus.UNRESOLVED)
        return [
            FinishedPool(
                prompt_id=pid, example=current.examples[pid], rollouts=tuple(current.pools[pid])
            )
            for pid in current.sampler.prompt_ids()
            if current.pools[pid] and current.sampler.verdict(pid) in kept
        ]

    def rescore_pools(self, rescored: Mapping[str, RescoredPool]) -> None:
        """Replace finished pools' rewards with a pool reward stage's, and hand its statistics
        to a sampler that reads them (`PoolStatisticsObserver`). Groups, per-prompt statistics
        and step metrics then use the new rewards."""
        current = self._complete("rescore_pools")
        for pid, new in rescored.items():
            pool = current.pools.get(pid)
            if pool is None or len(new.rewards) != len(pool):
                raise ValueError(
                    f"rescore_pools: prompt {pid!r} has "
                    f"{'no pool' if pool is None else f'{len(pool)} rollouts'} in step "
                    f"{current.step} but {len(new.rewards)} rewards were given; rescore exactly "
                    "the pools finished_pools() returned"
                )
            current.pools[pid] = [
                dataclasses.replace(s, reward=float(r))
                for s, r in zip(pool, new.rewards, strict=True)
            ]
        if current.hooks.pool_statistics is not None:
            current.hooks.pool_statistics.observe_pool_statistics(
                {pid: dict(new.statistics) for pid, new in rescored.items()}
            )

    # -- finishing a step --------------------------------------------------------------------

    def finish_step(self, *, engine_utilisation: float | None = None) -> StepResult:
        """Build the kept groups, update per-prompt statistics, carry surplus, close the step.

        `engine_utilisation`: the rollout pool's busy fraction over this step's sampling
        (`RolloutPool.metrics()["perf/rollout_engine_utilisation"]`), logged with the step's
        metrics as `sampling/engine_utilisation`; the allocator cannot see the engines itself.
        """
        return self._finish_step(engine_utilisation=engine_utilisation, started=time.perf_counter())

    def _finish_step(self, *, engine_utilisation: float | None, started: float) -> StepResult:
        """`finish_step` of the oldest open step, counted as one call begun at `started` (its
        own, or `update`'s); the next open step, if any, is the oldest after it."""
        current = self._oldest("finish_step")
        if not self.step_complete():
            raise RuntimeError(
                f"finish_step: step {current.step} is not complete ({len(current.in_flight)} "
                f"requests in flight, sampler done={current.sampler.done()}, needs_prompts="
                f"{current.sampler.needs_prompts()}); keep observing results until "
                "step_complete()"
            )
        verdicts = {pid: current.sampler.verdict(pid) for pid in current.sampler.prompt_ids()}
        target = current.sampler.target_groups()
        phase = self.coverage_phase
        own = self.group_builder
        builder = own if phase is None else phase.builder_for_step(own)
        kept = self._build_groups(current, verdicts, target, builder)
        if phase is not None:  # at a step's finish, in step order: overlapping steps agree
            phase.observe(sum(len(pool) for pool in current.pools.values()))
        self._record_outcomes(current, verdicts)
        trained, carried_out = self._train_or_carry(current, kept, target)
        rehearsal: list[Group] = []
        if self.rehearsal is not None:  # unhinted pools may join the store; its rows train
            unhinted = {
                p: pool for p, pool in current.pools.items() if self._task_prompt_id(p) == p
            }
            rehearsal = self.rehearsal.observe_pools(unhinted).rows()
        sampler_metrics = current.sampler.metrics()
        # Prompts skipped before rollout were candidates, not prompts of the step (counted by the
        # sampler's sampling/skipped_prompts).
        task_verdicts = {
            pid: v
            for pid, v in self._task_verdicts(verdicts).items()
            if v is not PromptStatus.SKIPPED
        }
        metrics = self._step_metrics(
            current,
            task_verdicts,
            trained=trained,
            kept=kept,
            carried_out=carried_out,
            target=target,
            sampler_metrics=sampler_metrics,
            engine_utilisation=engine_utilisation,
        )
        if phase is not None:  # 1: trained on the coverage phase's builder
            metrics.update(phase.metrics(trained_in_phase=builder is not own))
        if self.rehearsal is not None:
            metrics.update(self.rehearsal.metrics(skipped=current.rehearsal_skipped))
        current.count_call(started)
        metrics["timing/allocator_compute_s"] = current.compute_s
        metrics["perf/allocator_calls"] = float(current.calls)
        result = StepResult(
            step=current.step,
            groups=tuple(trained),
            resolved_prompts=sum(v is PromptStatus.RESOLVED for v in task_verdicts.values()),
            unresolved_prompts=sum(v is PromptStatus.UNRESOLVED for v in task_verdicts.values()),
            dropped_prompts=len(task_verdicts) - len({g.prompt_id for g in kept}),
            carried_in=len(current.carried_in),
            carried_out=carried_out,
            budget_exhausted=bool(sampler_metrics.get("sampling/budget_exhausted", 0.0)),
            metrics=metrics,
            term_groups=tuple(rehearsal),
        )
        self._warn(result)
        self._last_metrics = metrics
        del self._steps[current.step]
        if self._steps:
            self.sampler = self._oldest().sampler
        return result

    def _build_groups(
        self,
        current: OpenStep,
        verdicts: Mapping[str, PromptStatus],
        target: int | None,
        builder: GroupBuilder,
    ) -> list[Group]:
        """The step's kept groups: one per resolved or unresolved pool the group builder keeps.
        With a target, in completion order (the surplus is what came last); without one, in
        prompt order, so results do not depend on arrival order."""
        order = current.finish_order if target is not None else current.sampler.prompt_ids()
        order = order + [pid for pid in verdicts if pid not in set(order)]
        kept: list[Group] = []
        for pid in order:
            verdict = verdicts[pid]
            if verdict not in (PromptStatus.RESOLVED, PromptStatus.UNRESOLVED):
                continue
            group = builder.build(
                prompt_id=self._task_prompt_id(pid),
                # A pilot only estimated (its draw count depended on nothing, but the trained
                # draw's count depended on its labels): it stays out of the group.
                pool=current.pools[pid][current.hooks.pilot_samples(pid) :],
                resolved=verdict is PromptStatus.RESOLVED,
                step=current.step,
                prior_pass_rate=self.stats.pass_rate(pid),
                law=current.sampler.sequential_law(),
                estimate=current.hooks.pass_rate_estimate(pid),
            )
            if group is None:
                continue
            weight = current.hooks.advantage_weight(pid)
            if weight != 1.0:  # drawn with probability 1/weight: Horvitz-Thompson (curation)
                group = dataclasses.replace(
                    group, advantages=tuple(a * weight for a in group.advantages)
                )
            kept.append(group)
        return kept

    def _record_outcomes(self, current: OpenStep, verdicts: Mapping[str, PromptStatus]) -> None:
        """Each unhinted prompt's pool into its per-prompt record (a skip as a skipped visit),
        weighted 1/π so that the pooled priors describe every candidate, not only those drawn."""
        for pid, pool in current.pools.items():
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
                step=current.step,
                samples=len(pool),
                positives=labels.count("1"),
                pool=self._pool_key(current.examples[pid]),
                visit_weight=1.0 / current.hooks.inclusion_probability(pid),
                labels=labels,
            )

    def _train_or_carry(
        self, current: OpenStep, kept: list[Group], target: int | None
    ) -> tuple[list[Group], int]:
        """The groups to train on now (carried-in first) and how many kept groups were carried
        to later steps: past a target, the surplus waits (or, with no carrying, is dropped)."""
        trained = [c.group for c in current.carried_in]
        surplus: list[Group] = []
        if target is None:
            trained.extend(kept)
        else:
            room = max(0, target - len(trained))
            trained.extend(kept[:room])
            surplus = kept[room:]
        if self.max_carry_age_steps == 0:  # no carrying: surplus is discarded, as in DAPO
            current.carried_expired += len(surplus)
            return trained, 0
        self._carry.extend(
            CarriedGroup(group=g, step=current.step, weight_version=_weight_version(g))
            for g in surplus
        )
        return trained, len(surplus)

    def _task_verdicts(self, verdicts: Mapping[str, PromptStatus]) -> dict[str, PromptStatus]:
        """Per task prompt: a hinted prompt's conditions (x, x@h1, ...) are one prompt whose
        verdict is its last condition's."""
        if self.hints is None:
            return dict(verdicts)
        return {x: verdicts[sid] for x, sid in self.hints.current.items() if sid in verdicts}

    def _step_metrics(
        self,
        current: OpenStep,
        task_verdicts: Mapping[str, PromptStatus],
        *,
        trained: list[Group],
        kept: list[Group],
        carried_out: int,
        target: int | None,
        sampler_metrics: Mapping[str, float],
        engine_utilisation: float | None,
    ) -> dict[str, float]:
        """Where the step's rollouts went and what signal they bought (adarl/allocator/
        metrics.py), with the sampler's and the hint stage's metrics."""
        # Per task prompt: a hinted prompt's rollouts are all its conditions' pools.
        task_pools: dict[str, list[ScoredRollout]] = {}
        for pid, pool in current.pools.items():
            task_pools.setdefault(self._task_prompt_id(pid), []).extend(pool)
        metrics = step_metrics(
            pools=task_pools,
            verdicts=task_verdicts,
            trained=trained,
            kept=kept,
            carried_in=len(current.carried_in),
            carried_out=carried_out,
            carried_expired=current.carried_expired,
            carried_age_max=max((current.step - c.step for c in current.carried_in), default=0),
            target_groups=target,
            requests=current.requests,
            positive_threshold=self.positive_threshold,
        )
        metrics.update(sampler_metrics)
        if self.hints is not None:
            metrics.update(self.hints.finish(current.pools))
        metrics["sampling/duplicate_prompts_skipped"] = float(current.duplicates_skipped)
        if engine_utilisation is not None:
            metrics["sampling/engine_utilisation"] = float(engine_utilisation)
        return metrics

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
        if len(self._steps) > 1:
            raise RuntimeError(
                f"state_dict: steps {self.open_steps()} are open; overlapping steps are not "
                "checkpointed (the session opens no step past a checkpoint)"
            )
        return {
            "sampler": self.sampler.state_dict(),
            "stats": self.stats.state_dict(),
            "carry": list(self._carry),
            "last_metrics": dict(self._last_metrics),
            "step": self._oldest().state_dict() if self._steps else no_open_step_state(),
            "hints": self.hints.state_dict() if self.hints is not None else None,
            "coverage_phase": None if (c := self.coverage_phase) is None else c.state_dict(),
            "rehearsal": None if self.rehearsal is None else self.rehearsal.state_dict(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.sampler.load_state_dict(state["sampler"])
        self.stats.load_state_dict(state["stats"])
        self._carry = list(state["carry"])
        self._last_metrics = dict(state["last_metrics"])
        if self.coverage_phase is not None:  # its clock; earlier checkpoints kept it as the
            # allocator's "rollouts_observed" (and before that none: no phase could be on)
            legacy = {"rollouts_observed": state.get("rollouts_observed", 0)}
            self.coverage_phase.load_state_dict(state.get("coverage_phase") or legacy)
        loaded = OpenStep.from_state(state["step"], self.sampler)
        self._steps = {} if loaded is None else {loaded.step: loaded}
        # Each optional part must be on in both or off in both ("rehearsal" is absent from
        # checkpoints written before the rehearsal store existed: it was off).
        for key, part, setting in (
            ("hints", self.hints, "hints"),
            ("rehearsal", self.rehearsal, "allocator.rehearsal"),
        ):
            if (state.get(key) is None) != (part is None):
                raise ValueError(
                    f"allocator state and this allocator disagree on {key} (one has it, the "
                    f"other not): resume with the run's own {setting} settings"
                )
            if part is not None:
                part.load_state_dict(state[key])

    # -- internals ---------------------------------------------------------------------------

    def _oldest(self, what: str = "") -> OpenStep:
        """The oldest open step: the one the driver waits for."""
        if not self._steps:
            raise RuntimeError(f"{what}: no step is open; call start_step(step, examples) first")
        return self._steps[min(self._steps)]

    def _holding(self, request_id: str) -> OpenStep:
        """The open step whose request this is."""
        self._oldest("observe")  # no step open: say so
        for current in self._steps.values():
            if request_id in current.in_flight:
                return current
        steps = ", ".join(str(step) for step in self.open_steps())
        raise KeyError(
            f"observe: unknown request id {request_id!r} (not open in step {steps}); pass each "
            "request's results exactly once, before finish_step()"
        )

    def _complete(self, what: str) -> OpenStep:
        """The oldest open step, which must be complete (nothing left to sample)."""
        current = self._oldest(what)
        if not self.step_complete():
            raise RuntimeError(
                f"{what}: step {current.step} is still sampling ({len(current.in_flight)} "
                "requests in flight); call it once step_complete() is true, before finish_step()"
            )
        return current

    def _count_call(self, started: float) -> None:
        """A driver-facing call begun at `started`, counted to the oldest open step."""
        if self._steps:
            self._oldest().count_call(started)

    def _take_carried(self, current: OpenStep) -> None:
        """Expire carried groups older than the age limit; take the rest for this step."""
        fresh = [c for c in self._carry if current.step - c.step <= self.max_carry_age_steps]
        current.carried_expired = len(self._carry) - len(fresh)
        target = current.sampler.target_groups()
        take = len(fresh) if target is None else min(target, len(fresh))
        current.carried_in, self._carry = fresh[:take], fresh[take:]

    def _dispatch(self, current: OpenStep) -> list[PromptRequest]:
        requests = []
        for draw in current.sampler.next():
            request_id = f"{current.step}:{draw.prompt_id}:{draw.index}"
            current.in_flight[request_id] = OpenRequest(draw.prompt_id, draw.num_samples)
            hint, hint_level = None, 0
            if self.hints is not None:
                condition = self.hints.condition(draw.prompt_id)
                hint, hint_level = condition.text, condition.level
                self.hints.record_dispatch(draw.prompt_id, draw.num_samples)
            requests.append(
                PromptRequest(
                    request_id=request_id,
                    example=current.examples[draw.prompt_id],
                    num_samples=draw.num_samples,
                    step=current.step,
                    seed=derive_seed(self.seed, current.step, draw.prompt_id, draw.index),
                    hint=hint,
                    hint_level=hint_level,
                )
            )
        current.requests += len(requests)
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


def _hint_host(host: HintHost | None, sampler: Sampler) -> HintHost:
    """`sampler`'s `HintHost` capability (`host`), which a hint stage needs."""
    if host is None:
        raise ValueError(
            f"{sampler.name} allocates over the whole batch and cannot take in a prompt paid from "
            "another budget (a hinted prompt); use the uniform or streaming sequential samplers"
        )
    return host


def _weight_version(group: Group) -> int:
    """The oldest policy version among the group's rollouts (what staleness is measured from)."""
    return min(s.rollout.weight_version for s in group.rollouts)
