"""Drive a sampler with synthetic reward streams (no engine): each prompt has a fixed sequence of
0/1 rewards, handed out in sampling order, so stopping points can be computed by hand; and a
prompt's scored pool with given rewards, for the group builder."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

from adarl.allocator.samplers.base import Draw, PromptHistory, Sampler
from adarl.types import Completion, FinishReason, Rollout, ScoredRollout


def scored_pool(rewards: Sequence[float], *, prompt_id: str = "p") -> list[ScoredRollout]:
    """One prompt's pool: a 3-token rollout per reward, in sampling order."""
    completion = Completion(
        token_ids=(10, 11, 12), logprobs=(-0.5,) * 3, finish_reason=FinishReason.STOP
    )
    return [
        ScoredRollout(
            rollout=Rollout(
                request_id=f"r{i}",
                prompt_id=prompt_id,
                prompt_token_ids=(1, 2),
                completion=completion,
                weight_version=0,
            ),
            reward=float(r),
        )
        for i, r in enumerate(rewards)
    ]


def no_history(prompt_ids: Sequence[str], pass_rate: float = 0.5) -> dict[str, PromptHistory]:
    return {
        pid: PromptHistory(pass_rate=pass_rate, samples=0, grad_norm=None) for pid in prompt_ids
    }


class StreamDriver:
    """Answers draws from per-prompt reward streams, in a seeded random arrival order."""

    def __init__(self, streams: Mapping[str, Sequence[float]], *, seed: int = 0) -> None:
        self.streams = {pid: list(s) for pid, s in streams.items()}
        self.served = {pid: 0 for pid in streams}
        self.rng = random.Random(seed)
        self.log: list[Draw] = []
        self.max_in_flight = 0

    def answer(self, draw: Draw) -> list[float]:
        start = self.served[draw.prompt_id]
        self.served[draw.prompt_id] = start + draw.num_samples
        stream = self.streams[draw.prompt_id]
        if start + draw.num_samples > len(stream):
            raise AssertionError(f"stream of {draw.prompt_id} too short for {draw}")
        return stream[start : start + draw.num_samples]

    def run_step(self, sampler: Sampler, step: int = 0, *, max_events: int = 100_000) -> None:
        prompt_ids = list(self.streams)
        sampler.start_step(step, prompt_ids, no_history(prompt_ids))
        self.run_open(sampler, max_events=max_events)

    def run_open(self, sampler: Sampler, *, max_events: int = 100_000) -> None:
        open_draws: list[Draw] = list(sampler.next())
        self.log.extend(open_draws)
        for _ in range(max_events):
            if sampler.done():
                assert not open_draws
                return
            self.max_in_flight = max(self.max_in_flight, sum(d.num_samples for d in open_draws))
            draw = open_draws.pop(self.rng.randrange(len(open_draws)))
            sampler.observe(draw.prompt_id, self.answer(draw))
            new = sampler.next()
            self.log.extend(new)
            open_draws.extend(new)
        raise AssertionError("sampler never finished")
