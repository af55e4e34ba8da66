"""The allocator for real, against the scripted `FakeEngine` and the real exact-match verifier.

`FakeWorld` holds prompts with known pass rates. `FakeWorld.run_step` runs one step through the
driver's own rollout phase (`adarl.driver.rollout_phase.collect_groups`) on a `SimulatedRolloutPool`
(results come back in simulated-latency order, varied by `order_seed`) and a real `RewardPool`,
recording what was requested and scored. Only `stop_after_results` (a step interrupted mid-way,
for resume tests) plays the allocator's calls by hand, since the real loop never stops mid-step.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from adarl.allocator import BudgetAllocator, StepResult
from adarl.driver.rollout_phase import PhaseParts, collect_groups
from adarl.models.tokenizer import build_char_tokenizer
from adarl.reward.exact import ExactMatchVerifier
from adarl.reward.pool import RewardPool
from adarl.rollout.codec import PromptCodec
from adarl.rollout.fake import FakeEngine, FakePrompt
from adarl.rollout.simulated import LatencyModel, SimulatedRolloutPool
from adarl.types import (
    Completion,
    GenerationRequest,
    PromptRequest,
    Rollout,
    SamplingParams,
    ScoredRollout,
    StatisticsReply,
    StatisticsRequest,
    TaskExample,
)

# Small and fast: 4 engines of 64 slots, short responses; only the arrival order matters here.
TEST_LATENCY = LatencyModel(engines=4, slots=64, median_response_tokens=50, max_response_tokens=200)


@dataclass
class StepTrace:
    """What the driver saw in one step: every request, and every prompt's rewards in order."""

    requests: list[GenerationRequest | PromptRequest] = field(default_factory=list)
    rewards: dict[str, list[float]] = field(default_factory=dict)
    scored: dict[str, list[ScoredRollout]] = field(default_factory=dict)
    max_open_requests: int = 0


class _TracingPool(SimulatedRolloutPool):
    def __init__(self, trace: StepTrace, **kwargs) -> None:
        super().__init__(**kwargs)
        self.trace = trace
        self.open = 0

    def submit(self, requests: Sequence[GenerationRequest]) -> None:
        self.trace.requests.extend(requests)
        self.open += len(requests)
        self.trace.max_open_requests = max(self.trace.max_open_requests, self.open)
        super().submit(requests)

    def drain_completed(self):
        results = super().drain_completed()
        self.open -= len(results)
        return results


class _TracingRewards:
    def __init__(self, pool: RewardPool, trace: StepTrace) -> None:
        self.pool, self.trace = pool, trace

    def score(self, rollouts: Sequence[Rollout], examples: Sequence[TaskExample]):
        scored = self.pool.score(rollouts, examples)
        for item in scored:
            pid = item.rollout.prompt_id
            self.trace.rewards.setdefault(pid, []).append(item.reward)
            self.trace.scored.setdefault(pid, []).append(item)
        return scored

    def metrics(self) -> dict[str, float]:
        return self.pool.metrics()


class _Refill:
    """A prompt source over an iterator (the dynamic filter's refills)."""

    def __init__(self, refill: Iterator[TaskExample] | None) -> None:
        self.refill = refill

    def next_batch(self, num_examples: int) -> list[TaskExample]:
        if self.refill is None:
            return []
        return [e for _, e in zip(range(num_examples), self.refill, strict=False)]

    def metrics(self) -> dict[str, float]:
        return {}


# The allocator's accounting of its own work in this process: wall-clock compute and the number
# of calls it served. A resumed run serves a different number of calls (the state round trip) in
# a different time; neither is a decision of the algorithm.
SELF_ACCOUNTING_KEYS = frozenset({"timing/allocator_compute_s", "perf/allocator_calls"})


def deterministic_metrics(metrics: dict[str, float]) -> dict[str, float]:
    """A step's metrics less the allocator's self-accounting: what is left is a pure function of
    the allocator's state and the rollouts it saw."""
    assert metrics.keys() >= SELF_ACCOUNTING_KEYS  # present; only their values are dropped
    return {key: value for key, value in metrics.items() if key not in SELF_ACCOUNTING_KEYS}


def unit_gradient_norms(request: StatisticsRequest) -> StatisticsReply:
    """A statistics provider for tests without a learner: G = 1 for every sample (GVM then
    allocates by pass rate alone)."""
    return StatisticsReply(
        kind=request.kind, values=(1.0,) * len(request.rollouts), weight_version=0
    )


class FakeWorld:
    def __init__(
        self, pass_rates: Sequence[float], *, engine_seed: int = 0, start: int = 0
    ) -> None:
        self.tokenizer = build_char_tokenizer()
        self.codec = PromptCodec(
            tokenizer=self.tokenizer, sampling=SamplingParams(max_new_tokens=8)
        )
        self.verifier = ExactMatchVerifier()
        self.examples = [
            TaskExample(
                prompt_id=f"q{start + i}",
                prompt=f"{start + i}+{start + i}=",
                answer=str(2 * (start + i)),
                task="arithmetic",
            )
            for i in range(len(pass_rates))
        ]
        self.pass_rates = {e.prompt_id: p for e, p in zip(self.examples, pass_rates, strict=True)}
        self.script = {
            e.prompt: FakePrompt(pass_rate=p, answer=e.answer)
            for e, p in zip(self.examples, pass_rates, strict=True)
        }
        self.engine = FakeEngine(tokenizer=self.tokenizer, script=self.script, seed=engine_seed)

    def is_correct(self, request: GenerationRequest, completion: Completion) -> bool:
        prompt = self.tokenizer.decode(list(request.prompt_token_ids), skip_special_tokens=True)
        return completion.text == self.script[prompt].answer

    def run_step(
        self,
        allocator: BudgetAllocator,
        step: int,
        examples: Sequence[TaskExample] | None = None,
        *,
        order_seed: int = 0,
        refill: Iterator[TaskExample] | None = None,
        trace: StepTrace | None = None,
        stop_after_results: int | None = None,
        manual: bool = False,
        statistics=unit_gradient_norms,
    ) -> StepResult | None:
        """Play one step; returns the StepResult (None if stopped early for a resume test).

        `manual`: play the allocator's calls by hand in a seeded random order instead of the
        driver's loop (resume tests compare an interrupted step with one played the same way).
        """
        trace = trace if trace is not None else StepTrace()
        examples = self.examples if examples is None else examples
        self.statistics = statistics
        if manual or stop_after_results is not None:
            return self._run_interrupted(
                allocator, step, examples, order_seed, refill, trace, stop_after_results
            )
        pool = _TracingPool(
            trace,
            engine=self.engine,
            latency=TEST_LATENCY,
            is_correct=self.is_correct,
            seed=order_seed * 1_000 + step,
        )
        with RewardPool(verifiers={"arithmetic": self.verifier}, num_workers=1) as rewards:
            phase = collect_groups(
                step,
                examples,
                PhaseParts(
                    allocator=allocator,
                    rollout=pool,
                    rewards=_TracingRewards(rewards, trace),
                    prompts=_Refill(refill),
                    codec=self.codec,
                    statistics=statistics,
                    clock=pool.now,
                ),
            )
        return phase.result

    # -- a step interrupted mid-way (resume tests) --------------------------------------------

    def generate(self, request: PromptRequest) -> list[ScoredRollout]:
        sent = self.codec.generation_request(request)
        (result,) = self.engine.generate([sent])
        scored = []
        for rollout in self.codec.rollouts(request, sent, result):
            verdict = self.verifier.verify(rollout.completion.text, request.example)
            scored.append(
                ScoredRollout(rollout=rollout, reward=verdict.reward, reward_error=verdict.error)
            )
        return scored

    def _run_interrupted(self, allocator, step, examples, order_seed, refill, trace, stop_after):
        rng = random.Random(f"{order_seed}/{step}")
        open_requests: list[PromptRequest] = []

        def dispatch(requests: list[PromptRequest]) -> None:
            trace.requests.extend(requests)
            open_requests.extend(requests)

        dispatch(allocator.start_step(step, examples))
        dispatch(list(allocator.update().requests))
        self.continue_step(allocator, open_requests, dispatch, rng, refill, trace, stop_after)
        if stop_after is not None and not allocator.step_complete():
            self._suspended = (open_requests, dispatch, rng, refill, trace)
            return None
        return allocator.finish_step()

    def continue_step(
        self, allocator, open_requests, dispatch, rng, refill, trace, stop_after
    ) -> None:
        results = 0
        state = allocator.update()
        while not state.complete:
            if stop_after is not None and results >= stop_after:
                return
            if state.statistics is not None:
                state = allocator.update(statistics=self.statistics(state.statistics))
            elif state.prompts_wanted:
                batch = _Refill(refill).next_batch(state.prompts_wanted)
                state = allocator.update(new_examples=batch)
            else:
                request = open_requests.pop(rng.randrange(len(open_requests)))
                scored = self.generate(request)
                pid = request.example.prompt_id
                trace.rewards.setdefault(pid, []).extend(s.reward for s in scored)
                trace.scored.setdefault(pid, []).extend(scored)
                state = allocator.update(results=[(request.request_id, scored)])
                results += 1
            dispatch(list(state.requests))

    def resume_step(self, allocator: BudgetAllocator) -> StepResult:
        """Finish a step stopped with `stop_after_results` on (maybe another) allocator."""
        open_requests, dispatch, rng, refill, trace = self._suspended
        self.continue_step(allocator, open_requests, dispatch, rng, refill, trace, None)
        return allocator.finish_step()
