"""One step's rollout phase: requests streamed through the engines until the allocator says the
step is complete. The step loop (adarl/driver/step_loop.py) runs it once per step; the benchmarks
and the component tests run the same code on a simulated rollout pool in virtual time
(adarl/rollout/simulated.py), so what they measure is the training loop.

    allocator.update(...) ─► StreamUpdate ─┬─ requests ─► rollout pool ─► reward pool ──┐
        ▲                                  ├─ hints ─► hint generator ──────────────────┤
        │                                  ├─ statistics ─► learners ───────────────────┤
        │                                  └─ prompts_wanted ─► prompt source ──────────┤
        └── next update(results= | hints= | statistics= | new_examples=) ◄─────────────┘
            (one allocator call per wave; the call that completes the step finishes it)

`PhaseParts` is what a phase runs on, built once by its caller (the session, a benchmark, a
test); `collect_groups(step, examples, parts)` runs one step's phase, `RolloutStream(parts)`
the phases of several open steps streamed into each other.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from adarl.allocator.allocator import BudgetAllocator, StepResult, StreamUpdate
from adarl.allocator.pool_reward import PoolReward
from adarl.hints.types import Hint, HintRequest
from adarl.rollout.codec import PromptCodec
from adarl.step_metrics import merge_metrics
from adarl.types import (
    GenerationRequest,
    GenerationResult,
    PromptRequest,
    Rollout,
    ScoredRollout,
    StatisticsReply,
    StatisticsRequest,
    TaskExample,
)


class PromptSourceLike(Protocol):
    def next_batch(self, num_examples: int) -> list[TaskExample]: ...
    def state_dict(self) -> dict[str, Any]: ...
    def load_state_dict(self, state: Mapping[str, Any]) -> None: ...
    def metrics(self) -> dict[str, float]: ...


class RolloutPoolLike(Protocol):
    """`RolloutPool`, or `SimulatedRolloutPool` (adarl/rollout/simulated.py): the same calls."""

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


@dataclass(frozen=True)
class PhaseParts:
    """What a rollout phase runs on: built once by its caller, shared by every phase it runs."""

    allocator: BudgetAllocator
    rollout: RolloutPoolLike
    rewards: RewardPoolLike
    prompts: PromptSourceLike  # asked for refills (the dynamic filter's `prompts_wanted`)
    codec: PromptCodec
    hints: HintGeneratorLike | None = None  # None: a hint request is an error
    pool_reward: PoolReward | None = None  # e.g. DRO's R3: rescores the finished pools
    # A sampler's statistics requests (GVM's gradient norms), answered by the learners at the
    # current weights; None: a statistics request is an error.
    statistics: Callable[[StatisticsRequest], StatisticsReply] | None = None
    clock: Callable[[], float] = time.perf_counter  # a simulated pool's virtual clock in benches


@dataclass(frozen=True)
class RolloutPhase:
    """What one step's sampling produced, and what it cost."""

    result: StepResult  # the allocator's groups, counts and sampling/signal metrics
    metrics: dict[str, float]  # the rollout and reward pools' metrics and the phase's timings
    rollouts: int  # responses generated for training in this phase
    tokens: int  # their response tokens
    prompt_tokens: int  # their prompts' tokens, once per response (the learner reads each)
    wall_s: float  # the phase's duration on `clock`


def collect_groups(step: int, examples: Sequence[TaskExample], parts: PhaseParts) -> RolloutPhase:
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
    stream = RolloutStream(parts)
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

    def __init__(self, parts: PhaseParts) -> None:
        self.parts = parts
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
            self.parts.rollout.metrics()
            self.parts.rewards.metrics()
            if self.parts.hints is not None:
                self.parts.hints.metrics()
        self.tallies[step] = _PhaseTally(start_s=self.parts.clock())
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
            for result in self.parts.rollout.drain_completed():
                self.pending.pop(result.request_id)
                dropped += len(result.completions)
        self.parts.allocator.discard_open_steps()
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
            if self.parts.hints is None:
                raise RuntimeError(
                    f"step {step}: the allocator asked for {len(state.hints)} hints but this "
                    "rollout phase has no hint generator (PhaseParts.hints)"
                )
            answers = self.parts.hints.hints(state.hints)
            self._update(hints=answers)
            return
        if state.statistics is not None:
            if self.parts.statistics is None:
                raise RuntimeError(
                    f"step {step}: the sampler asked for {state.statistics.kind!r} statistics but "
                    "this rollout phase has no statistics provider (PhaseParts.statistics)"
                )
            start = self.parts.clock()
            reply = self.parts.statistics(state.statistics)
            tally.in_statistics += self.parts.clock() - start
            self._update(statistics=reply)
            return
        if state.prompts_wanted:
            self._update(new_examples=self.parts.prompts.next_batch(state.prompts_wanted))
            return
        if not self.pending:
            raise RuntimeError(
                f"step {step}: the allocator is waiting for results but no request is in "
                "flight; this is a bug in the sampler (it neither finished nor asked for more)"
            )
        start = self.parts.clock()
        returned = self.parts.rollout.drain_completed()
        tally.waited += self.parts.clock() - start
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
        scored = self.parts.rewards.score(flat, flat_examples) if flat else []
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
        self._ask_allocator(**kwargs)
        while self.state is not None and self.state.result is not None:
            self._finished(self.state.result)
            # The next open step may have completed already (nothing of it left in flight).
            self.state = None
            if self.tallies:
                self._ask_allocator()

    def _ask_allocator(self, **kwargs: Any) -> None:
        tally = self.tallies[min(self.tallies)]
        start = self.parts.clock()
        finish = self.parts.pool_reward is None
        state = self.parts.allocator.update(**kwargs, finish_when_complete=finish)
        tally.in_allocator += self.parts.clock() - start
        self._dispatch(state.requests, tally)
        self.state = state

    def _dispatch(self, requests: Sequence[PromptRequest], tally: _PhaseTally) -> None:
        if not requests:
            return
        start = self.parts.clock()
        sent = [self.parts.codec.generation_request(r) for r in requests]
        for request, generation in zip(requests, sent, strict=True):
            self.pending[request.request_id] = (request, generation)
        self.parts.rollout.submit(sent)
        tally.dispatching += self.parts.clock() - start

    def _finish_with_pool_reward(self, step: int) -> None:
        assert self.parts.pool_reward is not None
        tally = self.tallies[step]
        start = self.parts.clock()
        rescored = self.parts.pool_reward.rescore(
            self.parts.allocator.finished_pools(), score=self.parts.rollout.score
        )
        stage_metrics = {
            **self.parts.pool_reward.metrics(),
            "timing/pool_reward_s": self.parts.clock() - start,
        }
        start = self.parts.clock()
        self.parts.allocator.rescore_pools(rescored)
        tally.in_allocator += self.parts.clock() - start
        pool_metrics = self.parts.rollout.metrics()
        utilisation = pool_metrics.get("perf/rollout_engine_utilisation")
        start = self.parts.clock()
        result = self.parts.allocator.finish_step(engine_utilisation=utilisation)
        tally.in_allocator += self.parts.clock() - start
        self.state = None
        self._record(result, pool_metrics, stage_metrics)

    def _finished(self, result: StepResult) -> None:
        """A step the allocator finished in an update: its phase, with the engines' use."""
        pool_metrics = self.parts.rollout.metrics()
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
                "reward pool": self.parts.rewards.metrics(),
                "pool reward": stage_metrics,
                "hint generator": self.parts.hints.metrics()
                if self.parts.hints is not None
                else {},
                "rollout phase": {
                    "timing/rollout_wait_s": tally.waited,
                    "timing/allocator_s": tally.in_allocator,
                    "timing/dispatch_s": tally.dispatching,
                    "timing/statistics_s": tally.in_statistics,
                },
            }
        )
        end = self.parts.clock()
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
