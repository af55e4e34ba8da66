"""The allocator for real, against the scripted `FakeEngine` and the real exact-match verifier.

`FakeWorld` holds prompts with known pass rates; `FakeWorld.run_step` plays the driver's loop
in-process: requests are generated as they are dispatched and their results are handed back in a
seeded random order (as a pool of engines would return them), until the allocator says the step
is complete.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from adarl.allocator import BudgetAllocator, StepResult
from adarl.models.tokenizer import build_char_tokenizer
from adarl.reward.exact import ExactMatchVerifier
from adarl.rollout.codec import PromptCodec
from adarl.rollout.fake import FakeEngine, FakePrompt
from adarl.types import PromptRequest, SamplingParams, ScoredRollout, TaskExample


@dataclass
class StepTrace:
    """What the driver saw in one step: every request, and every prompt's rewards in order."""

    requests: list[PromptRequest] = field(default_factory=list)
    rewards: dict[str, list[float]] = field(default_factory=dict)
    scored: dict[str, list[ScoredRollout]] = field(default_factory=dict)
    max_open_requests: int = 0


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
        script = {
            e.prompt: FakePrompt(pass_rate=p, answer=e.answer)
            for e, p in zip(self.examples, pass_rates, strict=True)
        }
        self.engine = FakeEngine(tokenizer=self.tokenizer, script=script, seed=engine_seed)

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
    ) -> StepResult | None:
        """Play one step; returns the StepResult (None if stopped early for a resume test)."""
        trace = trace if trace is not None else StepTrace()
        rng = random.Random(f"{order_seed}/{step}")
        open_requests: list[PromptRequest] = []

        def dispatch(requests: list[PromptRequest]) -> None:
            trace.requests.extend(requests)
            open_requests.extend(requests)

        dispatch(allocator.start_step(step, self.examples if examples is None else examples))
        self.continue_step(
            allocator, open_requests, dispatch, rng, refill, trace, stop_after_results
        )
        if stop_after_results is not None and not allocator.step_complete():
            self._suspended = (open_requests, dispatch, rng, refill, trace)
            return None
        return allocator.finish_step()

    def continue_step(
        self, allocator, open_requests, dispatch, rng, refill, trace, stop_after
    ) -> None:
        results = 0
        while not allocator.step_complete():
            if stop_after is not None and results >= stop_after:
                return
            wanted = allocator.needs_prompts()
            if wanted:
                more = (
                    []
                    if refill is None
                    else [e for _, e in zip(range(wanted), refill, strict=False)]
                )
                dispatch(allocator.add_prompts(more))
                continue
            trace.max_open_requests = max(trace.max_open_requests, len(open_requests))
            request = open_requests.pop(rng.randrange(len(open_requests)))
            scored = self.generate(request)
            pid = request.example.prompt_id
            trace.rewards.setdefault(pid, []).extend(s.reward for s in scored)
            trace.scored.setdefault(pid, []).extend(scored)
            dispatch(allocator.observe(request.request_id, scored))
            results += 1

    def resume_step(self, allocator: BudgetAllocator) -> StepResult:
        """Finish a step stopped with `stop_after_results` on (maybe another) allocator."""
        open_requests, dispatch, rng, refill, trace = self._suspended
        self.continue_step(allocator, open_requests, dispatch, rng, refill, trace, None)
        return allocator.finish_step()
