"""The step loop. One named call per stage; which algorithm runs is decided by which objects were
built (`adarl.run`), never by a branch here.

    PromptSource ─► BudgetAllocator ─ PromptRequest ─► RolloutPool (engines)
       ▲               ▲   │                              │ GenerationResult ─► Rollout
       │               │   └─ collapsed? ─► HintGenerator ┘ (re-rolled on (x, h))
       │               │                                   ▼
       │               └── observe(ScoredRollout) ◄── RewardPool
       │                                                   ▼
       │                GroupBuilder (inside the allocator): pool ─► downsample ─► correct
       │                                                   │ Group ─► TrainBatch
       │                                                   ▼
       │                LearnerGroup (DeepSpeed ZeRO): one generic loss, one optimizer step
       │                     │ statistics requests (GVM's gradient norms) ◄─► BudgetAllocator
       └── Checkpoint ◄── WeightSync ─► engines (new weight version)

A step:

    examples = prompts.next_batch(prompts_per_step)
    groups   = collect_groups(step, examples)      # allocator ⇄ rollout pool ⇄ reward pool
    batch    = TrainBatch.from_groups(groups)
    trained  = learners.train_step(batch)
    version  = sync_weights()                      # learners ─► engines
    evaluate / log / checkpoint
"""

from __future__ import annotations

import dataclasses
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

from adarl.allocator.allocator import BudgetAllocator, StepResult, StreamUpdate
from adarl.allocator.pool_reward import PoolReward
from adarl.hints.types import Hint, HintRequest
from adarl.learner.group import LearnerGroup, PendingTrainStep
from adarl.rollout.codec import PromptCodec
from adarl.types import (
    GenerationRequest,
    GenerationResult,
    Group,
    PromptRequest,
    Rollout,
    ScoredRollout,
    StatisticsReply,
    StatisticsRequest,
    TaskExample,
    TrainBatch,
)
from adarl.weight_sync.base import WeightSync


class PromptSourceLike(Protocol):
    def next_batch(self, num_examples: int) -> list[TaskExample]: ...
    def state_dict(self) -> dict[str, Any]: ...
    def load_state_dict(self, state: Mapping[str, Any]) -> None: ...
    def metrics(self) -> dict[str, float]: ...


class RolloutPoolLike(Protocol):
    """`RolloutPool`, or a simulated pool with the same calls (adarl.bench.simulated)."""

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]: ...
    def submit(self, requests: Sequence[GenerationRequest]) -> None: ...
    def drain_completed(self) -> list[GenerationResult]: ...
    def score(
        self,
        prompt_token_ids: Sequence[Sequence[int]],
        response_token_ids: Sequence[Sequence[int]],
        *,
        temperature: float = 1.0,
    ) -> list[list[float]]: ...
    def metrics(self) -> dict[str, float]: ...


class RewardPoolLike(Protocol):
    def score(
        self, rollouts: Sequence[Rollout], examples: Sequence[TaskExample]
    ) -> list[ScoredRollout]: ...
    def metrics(self) -> dict[str, float]: ...


class HintGeneratorLike(Protocol):
    """`adarl.hints.HintGenerator` (in-process, or its actor through a blocking proxy)."""

    def hints(self, requests: Sequence[HintRequest]) -> list[Hint]: ...
    def write_ahead(self, step: int, examples: Sequence[TaskExample]) -> dict[str, float]: ...
    def metrics(self) -> dict[str, float]: ...


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


@dataclass(frozen=True)
class RolloutPhase:
    """What one step's sampling produced, and what it cost."""

    result: StepResult  # the allocator's groups, counts and sampling/signal metrics
    metrics: dict[str, float]  # the rollout and reward pools' metrics and the phase's timings
    rollouts: int  # responses generated for training in this phase
    tokens: int  # their response tokens
    prompt_tokens: int  # their prompts' tokens, once per response (the learner reads each)
    wall_s: float  # the phase's duration on `clock`


def collect_groups(
    step: int,
    examples: Sequence[TaskExample],
    *,
    allocator: BudgetAllocator,
    rollout: RolloutPoolLike,
    rewards: RewardPoolLike,
    prompts: PromptSourceLike,
    codec: PromptCodec,
    hints: HintGeneratorLike | None = None,
    pool_reward: PoolReward | None = None,
    statistics: Callable[[StatisticsRequest], StatisticsReply] | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> RolloutPhase:
    """One step's rollout phase: stream requests through the engines until the allocator says
    the step is complete (a `RolloutStream` with this one step open).

        dispatch(allocator.update(begin=(step, examples)))     # one allocator call per wave
        until the allocator reports the step complete:
            if it asks for hints (collapsed prompts, SAGE): get them from `hints` (the hint
                  generator) and hand them back; the allocator re-rolls those prompts on (x, h)
            if it asks for a statistic (GVM's gradient norms of its pilot): compute it with
                  `statistics` (the learners) and hand it back
            if it wants more prompts (dynamic filter): hand it prompts.next_batch(k)
            else: take every result already back, score them together, and hand them to the
                  allocator in one call; dispatch the follow-up draws they unlock
        if a pool reward was built (e.g. DRO's R3): rescore the finished pools with one
            scoring pass on the engines (adarl/allocator/pool_reward.py), then finish the step;
            otherwise the call that completed the step finished it (no extra round trip)

    The driver runs exactly this loop; `adarl.bench.sampler` and the component tests run it
    with a simulated rollout pool and its virtual `clock`, so what they measure is this loop.
    Timings (on `clock`): `timing/rollout_wait_s` blocked waiting for engines,
    `timing/allocator_s` in allocator calls, `timing/dispatch_s` building and submitting
    requests, `timing/statistics_s` computing requested statistics, `timing/pool_reward_s` in
    the pool reward stage; the reward pool reports `timing/reward_s` (scoring) and the hint
    generator `timing/hint_s` (writing hints) themselves.
    """
    stream = RolloutStream(
        allocator=allocator,
        rollout=rollout,
        rewards=rewards,
        prompts=prompts,
        codec=codec,
        hints=hints,
        pool_reward=pool_reward,
        statistics=statistics,
        clock=clock,
    )
    stream.open_step(step, examples)
    return stream.run_until_complete(step)


@dataclass
class _PhaseTally:
    """What one open step's phase has cost so far (on the stream's clock)."""

    start_s: float
    waited: float = 0.0
    in_allocator: float = 0.0
    dispatching: float = 0.0
    in_statistics: float = 0.0
    rollouts: int = 0
    tokens: int = 0
    prompt_tokens: int = 0


NextStep = Callable[[], tuple[int, Sequence[TaskExample]] | None]


class RolloutStream:
    """The rollout phases of the open steps, streamed through the engines together.

    One step open at a time is `collect_groups`. With the allocator's overlapping steps
    (`max_open_steps` > 1, `rollout.cross_step_allocation`) the driver opens step t+1 while
    step t samples (`open_next` below), so t+1's first draws fill the engines t's tail leaves
    idle, and t+1 keeps sampling while t trains:

        run_until_complete(t, open_next)   # waves of every open step until t is finished
        run_while(training, open_next)     # waves of the steps after t while the learners train

    Every wave is one drain of the engines, one scoring call and one allocator call, whatever
    steps its results belong to. A wave's waiting, allocator and dispatch time count to the
    oldest open step (the one the driver waits for); rollouts and tokens to their own step. A
    phase's `wall_s` runs from its step's opening, or the previous phase's end if later, to its
    end; the pools' metric windows run from one phase's end to the next.
    """

    def __init__(
        self,
        *,
        allocator: BudgetAllocator,
        rollout: RolloutPoolLike,
        rewards: RewardPoolLike,
        prompts: PromptSourceLike,
        codec: PromptCodec,
        hints: HintGeneratorLike | None = None,
        pool_reward: PoolReward | None = None,
        statistics: Callable[[StatisticsRequest], StatisticsReply] | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.allocator = allocator
        self.rollout = rollout
        self.rewards = rewards
        self.prompts = prompts
        self.codec = codec
        self.hints = hints
        self.pool_reward = pool_reward
        self.statistics = statistics
        self.clock = clock
        self.pending: dict[str, tuple[PromptRequest, GenerationRequest]] = {}
        self.tallies: dict[int, _PhaseTally] = {}  # open step -> its phase so far
        self.finished: dict[int, RolloutPhase] = {}  # finished, not yet taken
        self.last_end_s: float | None = None
        self.state: StreamUpdate | None = None  # the allocator's last answer (oldest step)

    # -- what the driver calls ---------------------------------------------------------------

    def open_steps(self) -> list[int]:
        return sorted(self.tallies)

    def sampling(self) -> int:
        """Rollouts of the steps opened and not yet taken: open ones so far, and finished."""
        open_so_far = sum(t.rollouts for t in self.tallies.values())
        return open_so_far + sum(p.rollouts for p in self.finished.values())

    def sampling_sequence_tokens(self) -> int:
        """Prompt + response tokens of the rollouts `sampling` counts."""
        open_so_far = sum(t.tokens + t.prompt_tokens for t in self.tallies.values())
        return open_so_far + sum(p.tokens + p.prompt_tokens for p in self.finished.values())

    def open_step(self, step: int, examples: Sequence[TaskExample]) -> None:
        """Start `step`'s phase: the allocator's first draws of its prompts go to the engines."""
        if not self.tallies:
            # Opens the pools' windows: their metrics at this phase's end are this phase's
            # (evaluation traffic is counted apart).
            self.rollout.metrics()
            self.rewards.metrics()
            if self.hints is not None:
                self.hints.metrics()
        self.tallies[step] = _PhaseTally(start_s=self.clock())
        self._update(begin=(step, examples))

    def run_until_complete(self, step: int, open_next: NextStep | None = None) -> RolloutPhase:
        """Stream waves until `step`'s phase is finished; `open_next` is asked after every wave
        for a step to open (None: none now)."""
        while step not in self.finished:
            if step not in self.tallies:
                raise RuntimeError(f"step {step} was never opened in this rollout stream")
            self._wave(open_next)
        return self.finished.pop(step)

    def run_while(self, busy: Callable[[], bool], open_next: NextStep | None = None) -> None:
        """Stream waves while `busy()` (checked between waves) and a step is open or opens."""
        while busy():
            if not self.tallies and not self._open_next(open_next):
                return
            self._wave(open_next)

    def take(self, step: int) -> RolloutPhase | None:
        """`step`'s phase if it finished while the driver waited for something else."""
        return self.finished.pop(step, None)

    def discard_open(self) -> int:
        """Wait for every request in flight, then close the open steps without groups (the
        run ends before they train): returns the rollouts dropped."""
        dropped = self.sampling()
        while self.pending:
            for result in self.rollout.drain_completed():
                self.pending.pop(result.request_id)
                dropped += len(result.completions)
        self.allocator.discard_open_steps()
        self.tallies.clear()
        self.finished.clear()
        self.state = None
        return dropped

    # -- one wave ----------------------------------------------------------------------------

    def _wave(self, open_next: NextStep | None) -> None:
        state = self.state
        assert state is not None
        step = min(self.tallies)
        tally = self.tallies[step]
        if state.complete:  # a pool reward stage finishes the step itself
            self._finish_with_pool_reward(step)
            return
        if state.hints:
            if self.hints is None:
                raise RuntimeError(
                    f"step {step}: the allocator asked for {len(state.hints)} hints but this "
                    "rollout phase has no hint generator (pass hints=...)"
                )
            answers = self.hints.hints(state.hints)
            self._update(hints=answers)
            return
        if state.statistics is not None:
            if self.statistics is None:
                raise RuntimeError(
                    f"step {step}: the sampler asked for {state.statistics.kind!r} statistics but "
                    "this rollout phase has no statistics provider (pass statistics=...)"
                )
            start = self.clock()
            reply = self.statistics(state.statistics)
            tally.in_statistics += self.clock() - start
            self._update(statistics=reply)
            return
        if state.prompts_wanted:
            self._update(new_examples=self.prompts.next_batch(state.prompts_wanted))
            return
        if not self.pending:
            raise RuntimeError(
                f"step {step}: the allocator is waiting for results but no request is in "
                "flight; this is a bug in the sampler (it neither finished nor asked for more)"
            )
        start = self.clock()
        returned = self.rollout.drain_completed()
        tally.waited += self.clock() - start
        per_result: list[list[Rollout]] = []
        flat_examples: list[TaskExample] = []
        for result in returned:
            request, sent = self.pending.pop(result.request_id)
            rollouts = PromptCodec.rollouts(request, sent, result)
            per_result.append(rollouts)
            flat_examples += [request.example] * len(rollouts)
            owner = self.tallies[request.step]
            owner.rollouts += len(rollouts)
            owner.tokens += sum(len(r.completion.token_ids) for r in rollouts)
            owner.prompt_tokens += sum(len(r.prompt_token_ids) for r in rollouts)
        flat = [r for rs in per_result for r in rs]
        # One scoring call and one allocator call for everything that came back together.
        scored = self.rewards.score(flat, flat_examples) if flat else []
        observed, offset = [], 0
        for result, rs in zip(returned, per_result, strict=True):
            observed.append((result.request_id, scored[offset : offset + len(rs)]))
            offset += len(rs)
        self._update(results=observed)
        self._open_next(open_next)

    def _open_next(self, open_next: NextStep | None) -> bool:
        coming = open_next() if open_next is not None else None
        if coming is None:
            return False
        self.open_step(*coming)
        return True

    def _update(self, **kwargs: Any) -> None:
        """One allocator call (finishing the oldest step when it completes, unless a pool reward
        stage must rescore it first), then dispatch what it unlocked."""
        tally = self.tallies[min(self.tallies)]
        start = self.clock()
        state = self.allocator.update(**kwargs, finish_when_complete=self.pool_reward is None)
        tally.in_allocator += self.clock() - start
        self._dispatch(state.requests, tally)
        self.state = state
        while self.state is not None and self.state.result is not None:
            self._finished(self.state.result)
            # The next open step may have completed already (nothing of it left in flight).
            self.state = None
            if self.tallies:
                tally = self.tallies[min(self.tallies)]
                start = self.clock()
                state = self.allocator.update(finish_when_complete=self.pool_reward is None)
                tally.in_allocator += self.clock() - start
                self._dispatch(state.requests, tally)
                self.state = state

    def _dispatch(self, requests: Sequence[PromptRequest], tally: _PhaseTally) -> None:
        if not requests:
            return
        start = self.clock()
        sent = [self.codec.generation_request(r) for r in requests]
        for request, generation in zip(requests, sent, strict=True):
            self.pending[request.request_id] = (request, generation)
        self.rollout.submit(sent)
        tally.dispatching += self.clock() - start

    def _finish_with_pool_reward(self, step: int) -> None:
        assert self.pool_reward is not None
        tally = self.tallies[step]
        start = self.clock()
        rescored = self.pool_reward.rescore(
            self.allocator.finished_pools(), score=self.rollout.score
        )
        stage_metrics = {**self.pool_reward.metrics(), "timing/pool_reward_s": self.clock() - start}
        start = self.clock()
        self.allocator.rescore_pools(rescored)
        tally.in_allocator += self.clock() - start
        pool_metrics = self.rollout.metrics()
        utilisation = pool_metrics.get("perf/rollout_engine_utilisation")
        start = self.clock()
        result = self.allocator.finish_step(engine_utilisation=utilisation)
        tally.in_allocator += self.clock() - start
        self.state = None
        self._record(result, pool_metrics, stage_metrics)

    def _finished(self, result: StepResult) -> None:
        """A step the allocator finished in an update: its phase, with the engines' use."""
        pool_metrics = self.rollout.metrics()
        utilisation = pool_metrics.get("perf/rollout_engine_utilisation")
        if utilisation is not None:  # what finish_step logs when handed it
            metrics_with = {**result.metrics, "sampling/engine_utilisation": float(utilisation)}
            result = dataclasses.replace(result, metrics=metrics_with)
        self._record(result, pool_metrics, {})

    def _record(
        self,
        result: StepResult,
        pool_metrics: dict[str, float],
        stage_metrics: dict[str, float],
    ) -> None:
        tally = self.tallies.pop(result.step)
        metrics = merge_metrics(
            {
                "rollout pool": pool_metrics,
                "reward pool": self.rewards.metrics(),
                "pool reward": stage_metrics,
                "hint generator": self.hints.metrics() if self.hints is not None else {},
                "rollout phase": {
                    "timing/rollout_wait_s": tally.waited,
                    "timing/allocator_s": tally.in_allocator,
                    "timing/dispatch_s": tally.dispatching,
                    "timing/statistics_s": tally.in_statistics,
                },
            }
        )
        end = self.clock()
        began = tally.start_s if self.last_end_s is None else max(tally.start_s, self.last_end_s)
        self.last_end_s = end
        self.finished[result.step] = RolloutPhase(
            result=result,
            metrics=metrics,
            rollouts=tally.rollouts,
            tokens=tally.tokens,
            prompt_tokens=tally.prompt_tokens,
            wall_s=end - began,
        )


@dataclass
class StepOutcome:
    step: int
    metrics: dict[str, float]
    result: StepResult


class Driver:
    """Runs steps; owns no algorithm. `adarl.session.TrainingSession` builds it from config.

    With `max_off_policy_steps` = k ≥ 1 the rollout phase of later steps runs while the learners
    train (`rollout.max_off_policy_steps`):

        phase_t = the phase sampled ahead for t, or collect_groups(t) now
        learners.start_train_step(batch_t)           # returns at once
        sample ahead t+1..min(t+k, through)          # engines on the weights they hold
        learners.finish_train_step(); sync_weights()

    A phase sampled ahead used weights ≤ t-1 and is trained at t' ≤ t+k, so it lags by ≤ k
    versions. With k = 0 nothing is sampled ahead and a step is exactly the synchronous loop.

    With `cross_step_allocation` (`rollout.cross_step_allocation`, k ≥ 1) the phases are not
    sampled ahead whole but streamed into each other (`RolloutStream`):

        phase_t = stream.run_until_complete(t)        # step t+1..t+k open as soon as allowed
        learners.start_train_step(batch_t)
        stream.run_while(the learners train)         # steps t+1..t+k keep sampling
        learners.finish_train_step(); sync_weights()  # lands between engine calls

    A step t' opens while step t'-k or later is current, so its samples are drawn on the
    weights that step sampled with or newer and trained at t': they lag by ≤ k versions, as
    above, and no step's tail holds the engines idle while a later step could sample.

    With `write_hints_ahead` (`hints.write_ahead`, k = 0) the engines, idle while the learners
    train, write hints for step t+1 instead: its prompts are drawn then (the draw the next step
    would make) and the allocator names those whose record predicts a collapse.
    """

    def __init__(
        self,
        *,
        prompts: PromptSourceLike,
        codec: PromptCodec,
        allocator: BudgetAllocator,
        rollout: RolloutPoolLike,
        rewards: RewardPoolLike,
        learners: LearnerGroup,
        weight_sync: WeightSync,
        prompts_per_step: int,
        hints: HintGeneratorLike | None = None,
        pool_reward: PoolReward | None = None,
        on_step_end: Callable[[StepOutcome], None] | None = None,
        max_off_policy_steps: int = 0,
        max_rollouts: int | None = None,
        max_sequence_tokens: int | None = None,
        write_hints_ahead: bool = False,
        cross_step_allocation: bool = False,
    ) -> None:
        self.prompts = prompts
        self.codec = codec
        self.allocator = allocator
        self.rollout = rollout
        self.rewards = rewards
        self.learners = learners
        self.weight_sync = weight_sync
        self.prompts_per_step = prompts_per_step
        self.hints = hints
        self.pool_reward = pool_reward
        self.on_step_end = on_step_end
        self.max_off_policy_steps = max_off_policy_steps
        # No step is sampled ahead once this many rollouts, or sequence tokens, are trained.
        self.max_rollouts = max_rollouts
        self.max_sequence_tokens = max_sequence_tokens
        self.timer = StageTimer()
        # Training rollouts of the steps run so far (evaluation, and phases sampled ahead and
        # not yet trained, are counted apart).
        self.rollouts_generated = 0
        self.tokens_generated = 0
        self.sequence_tokens_generated = 0  # prompt + response tokens: what the learner reads
        self.ahead: dict[int, RolloutPhase] = {}  # step -> its phase, sampled ahead (k ≥ 1)
        self.dropped_stale_groups = 0
        if write_hints_ahead and (hints is None or max_off_policy_steps):
            raise ValueError(
                "write_hints_ahead needs a hint generator and max_off_policy_steps=0 (sampling "
                "ahead writes the next steps' hints already)"
            )
        self.write_hints_ahead = write_hints_ahead
        # The next step's prompts, drawn while this step trained to write their hints.
        self.drawn_ahead: tuple[int, list[TaskExample]] | None = None
        if cross_step_allocation and (max_off_policy_steps < 1 or hints is not None or pool_reward):
            raise ValueError(
                "cross_step_allocation needs max_off_policy_steps >= 1, no hint generator and no "
                "pool reward stage (rollout.cross_step_allocation)"
            )
        # The steps' phases streamed into each other (None: one phase at a time).
        self.stream = (
            RolloutStream(
                allocator=allocator,
                rollout=rollout,
                rewards=rewards,
                prompts=prompts,
                codec=codec,
                statistics=self.statistics,
            )
            if cross_step_allocation
            else None
        )

    # -- one step, stage by stage ---------------------------------------------------------------

    def step(self, step: int, *, sample_ahead_through: int | None = None) -> StepOutcome:
        """Run `step`; with k ≥ 1, also sample steps up to min(step + k, sample_ahead_through)
        while it trains (the session stops at a checkpoint so that none holds samples in
        flight; None = no limit but k)."""
        step_start = time.perf_counter()
        if self.stream is not None:
            phase = self.streamed_phase(step, through=sample_ahead_through)
        elif (ahead := self.ahead.pop(step, None)) is not None:
            phase = ahead
        else:
            with self.timer.stage("data"):
                examples = self.next_examples(step)
            with self.timer.stage("rollout"):
                phase = self.collect_groups(step, examples)
        self.rollouts_generated += phase.rollouts
        self.tokens_generated += phase.tokens
        self.sequence_tokens_generated += phase.tokens + phase.prompt_tokens
        result = phase.result
        groups, stale_metrics = self.drop_stale(result.groups)
        with self.timer.stage("batch"):
            batch = TrainBatch.from_groups(groups, pad_token_id=self.codec.pad_token_id)
        with self.timer.stage("train"):
            training = self.start_training(batch)
        if self.stream is not None:
            with self.timer.stage("rollout_ahead"):
                self.stream.run_while(
                    lambda: training is not None and not self.learners.train_step_done(training),
                    self.step_opener(step, through=sample_ahead_through),
                )
        else:
            self.sample_ahead(step, through=sample_ahead_through)
        hints_ahead = self.hints_ahead(step, through=sample_ahead_through)
        with self.timer.stage("train"):
            train_metrics = self.finish_training(training)
        sync_metrics: dict[str, float] = {}
        if train_metrics["train/skipped_empty_batch"] == 0.0:  # new weights exist only then
            with self.timer.stage("weight_sync"):
                sync_metrics = self.sync_weights()
        timings = self.timer.pop_step()
        timings["timing/step_s"] = time.perf_counter() - step_start
        metrics = merge_metrics(
            {
                "allocator": result.metrics,
                "learners": train_metrics,
                "weight sync": sync_metrics,
                "rollout phase": phase.metrics,
                "prompt source": self.prompts.metrics(),
                "pipeline": stale_metrics,
                "hints ahead": hints_ahead,
                "driver": {
                    **timings,
                    "perf/rollouts_total": float(self.rollouts_generated),
                    "perf/tokens_total": float(self.tokens_generated),
                    "perf/sequence_tokens_total": float(self.sequence_tokens_generated),
                },
            }
        )
        outcome = StepOutcome(step=step, metrics=metrics, result=result)
        if self.on_step_end is not None:
            self.on_step_end(outcome)
        return outcome

    def collect_groups(self, step: int, examples: Sequence[TaskExample]) -> RolloutPhase:
        """This step's rollout phase (`collect_groups` above)."""
        return collect_groups(
            step,
            examples,
            allocator=self.allocator,
            rollout=self.rollout,
            rewards=self.rewards,
            prompts=self.prompts,
            codec=self.codec,
            hints=self.hints,
            pool_reward=self.pool_reward,
            statistics=self.statistics,
        )

    def budget_reached(self, *, rollouts_ahead: int = 0, sequence_tokens_ahead: int = 0) -> bool:
        """Whether the rollouts (or their prompt + response tokens) trained, with those sampled
        ahead and not yet trained, reach the run's budget: no further step is sampled then."""
        rollouts = self.rollouts_generated + rollouts_ahead
        tokens = self.sequence_tokens_generated + sequence_tokens_ahead
        return (self.max_rollouts is not None and rollouts >= self.max_rollouts) or (
            self.max_sequence_tokens is not None and tokens >= self.max_sequence_tokens
        )

    def sample_ahead(self, step: int, *, through: int | None) -> None:
        """While step `step` trains, sample the phases of steps step+1..step+k (k =
        `max_off_policy_steps`), at most through `through`, while the rollouts trained and
        sampled ahead stay under the budget (`budget_reached`)."""
        last = step + self.max_off_policy_steps
        if through is not None:
            last = min(last, through)
        for ahead in range(step + 1, last + 1):
            if ahead in self.ahead:
                continue
            phases = self.ahead.values()
            if self.budget_reached(
                rollouts_ahead=sum(p.rollouts for p in phases),
                sequence_tokens_ahead=sum(p.tokens + p.prompt_tokens for p in phases),
            ):
                return  # the run ends at `step` or before `ahead`: nothing to sample for
            with self.timer.stage("rollout_ahead"):
                examples = self.prompts.next_batch(self.prompts_per_step)
                self.ahead[ahead] = self.collect_groups(ahead, examples)

    def streamed_phase(self, step: int, *, through: int | None) -> RolloutPhase:
        """Step `step`'s phase from the stream: opened now unless it opened while earlier steps
        sampled, streamed until it is finished, later steps opening as they are allowed."""
        assert self.stream is not None
        phase = self.stream.take(step)
        if phase is not None:
            return phase
        if step not in self.stream.open_steps():
            with self.timer.stage("data"):
                examples = self.next_examples(step)
            with self.timer.stage("rollout"):
                self.stream.open_step(step, examples)
        with self.timer.stage("rollout"):
            return self.stream.run_until_complete(step, self.step_opener(step, through=through))

    def step_opener(
        self, step: int, *, through: int | None
    ) -> Callable[[], tuple[int, list[TaskExample]] | None]:
        """While `step` samples or trains: the next step to open in the stream, if it may open
        now: within k of `step`, not past `through` (a checkpoint), and while the rollouts
        trained and sampling stay under the budget (`budget_reached`)."""
        assert self.stream is not None
        stream = self.stream
        last = step + self.max_off_policy_steps
        if through is not None:
            last = min(last, through)

        def open_next() -> tuple[int, list[TaskExample]] | None:
            coming = max([step, *stream.open_steps(), *stream.finished]) + 1
            if coming > last:
                return None
            if self.budget_reached(
                rollouts_ahead=stream.sampling(),
                sequence_tokens_ahead=stream.sampling_sequence_tokens(),
            ):
                return None
            return coming, self.prompts.next_batch(self.prompts_per_step)

        return open_next

    def end_stream(self) -> dict[str, float]:
        """At the run's end: wait for the steps still sampling and drop them (counted in
        `sampling/rollouts_discarded_at_end`), so that the last checkpoint holds none."""
        if self.stream is None:
            return {}
        return {"sampling/rollouts_discarded_at_end": float(self.stream.discard_open())}

    def next_examples(self, step: int) -> list[TaskExample]:
        """Step `step`'s prompts: those drawn for it while the step before trained, or the next
        batch of the source."""
        if self.drawn_ahead is not None:
            drawn_for, examples = self.drawn_ahead
            self.drawn_ahead = None
            if drawn_for != step:
                raise RuntimeError(
                    f"step {step}: the prompts drawn ahead were for step {drawn_for}; steps must "
                    "run in order"
                )
            return examples
        return self.prompts.next_batch(self.prompts_per_step)

    def hints_ahead(self, step: int, *, through: int | None) -> dict[str, float]:
        """While `step` trains: draw step+1's prompts and write hints for those the allocator
        predicts to collapse (`write_hints_ahead`), unless the run may end first (the next step
        is past `through`, a checkpoint, or the rollout budget is spent), so that no checkpoint
        holds prompts drawn for a step not run."""
        if not self.write_hints_ahead or self.hints is None:
            return {}
        coming = step + 1
        chosen: list[TaskExample] = []
        run_may_end = (through is not None and coming > through) or self.budget_reached()
        if run_may_end:
            written = self.hints.write_ahead(coming, [])  # no work: its metrics, at zero
        else:
            with self.timer.stage("hint_ahead"):
                examples = self.prompts.next_batch(self.prompts_per_step)
                self.drawn_ahead = (coming, examples)
                predicted = set(self.allocator.predicted_collapses(coming, examples))
                chosen = [e for e in examples if e.prompt_id in predicted]
                written = self.hints.write_ahead(coming, chosen)
        return {"sampling/hints_ahead_predicted": float(len(chosen)), **written}

    def drop_stale(self, groups: Sequence[Group]) -> tuple[list[Group], dict[str, float]]:
        """Drop each group with a sample more than `max_off_policy_steps` versions behind the
        learners (counted); k = 0 checks nothing (its samples are always current)."""
        if self.max_off_policy_steps == 0:
            return list(groups), {}
        current = self.learners.weight_version().version
        kept = [
            g
            for g in groups
            if all(
                current - s.rollout.weight_version <= self.max_off_policy_steps for s in g.rollouts
            )
        ]
        self.dropped_stale_groups += len(groups) - len(kept)
        ahead = len(self.ahead)
        if self.stream is not None:  # later steps opened, finished or not, and not yet trained
            ahead += len(self.stream.open_steps()) + len(self.stream.finished)
        return kept, {
            "sampling/dropped_stale_groups": float(self.dropped_stale_groups),
            "sampling/steps_sampled_ahead": float(ahead),
        }

    def statistics(self, request: StatisticsRequest) -> StatisticsReply:
        """A sampler's statistics request, computed by the learners at the current weights."""
        return self.learners.sample_statistics(request, pad_token_id=self.codec.pad_token_id)

    def start_training(self, batch: TrainBatch) -> PendingTrainStep | None:
        """Send `batch` to the learners; None when there is nothing to learn from (e.g. every
        prompt collapsed): a deliberate skip, logged by `finish_training`."""
        if batch.num_sequences == 0:
            return None
        return self.learners.start_train_step(batch)

    def finish_training(self, training: PendingTrainStep | None) -> dict[str, float]:
        if training is None:
            return {"train/skipped_empty_batch": 1.0, "train/sequences": 0.0}
        trained = self.learners.finish_train_step(training)
        return {**trained.metrics, "train/skipped_empty_batch": 0.0}

    def sync_weights(self) -> dict[str, float]:
        """Push the learners' weights to every engine (their version travels with rollouts)."""
        return self.weight_sync.push(self.learners).metrics()
