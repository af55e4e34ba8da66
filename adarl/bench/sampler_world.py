"""The simulated world of `python -m adarl.bench sampler`: prompts with known pass rates, drawn from
a mix shaped like reasoning data sets, answered by the scripted `FakeEngine`."""

from __future__ import annotations

import random
from dataclasses import dataclass

from adarl.models.tokenizer import build_char_tokenizer
from adarl.rollout.codec import PromptCodec
from adarl.rollout.fake import FakeEngine, FakePrompt
from adarl.types import Completion, GenerationRequest, SamplingParams, TaskExample


@dataclass(frozen=True)
class PassRateMix:
    """Pass-rate distribution of the simulated prompts (shares sum to 1).

    Shaped like the reasoning data sets the seeds describe: many prompts a small model never or
    always solves, a band in between, a tail of rarely solved ones.
    """

    never: float = 0.15  # p = 0
    rare: float = 0.10  # p ~ U(0.01, 0.1)
    middle: float = 0.45  # p ~ U(0.1, 0.9)
    easy: float = 0.15  # p ~ U(0.9, 0.99)
    always: float = 0.15  # p = 1

    def draw(self, rng: random.Random) -> float:
        u = rng.random()
        for share, low, high in (
            (self.never, 0.0, 0.0),
            (self.rare, 0.01, 0.1),
            (self.middle, 0.1, 0.9),
            (self.easy, 0.9, 0.99),
            (self.always, 1.0, 1.0),
        ):
            if u < share:
                return rng.uniform(low, high)
            u -= share
        return 1.0


@dataclass
class FakeWorld:
    """Prompts with scripted pass rates, served by the `FakeEngine`."""

    examples: list[TaskExample]
    pass_rates: dict[str, float]
    engine: FakeEngine
    codec: PromptCodec
    answers: dict[str, str]  # prompt text -> correct answer

    def is_correct(self, request: GenerationRequest, completion: Completion) -> bool:
        prompt = self.codec.tokenizer.decode(
            list(request.prompt_token_ids), skip_special_tokens=True
        )
        return completion.text == self.answers[prompt]


def fake_world(num_prompts: int, seed: int) -> FakeWorld:
    rng = random.Random(f"bench-sampler/{seed}")
    mix = PassRateMix()
    examples, script, rates = [], {}, {}
    for i in range(num_prompts):
        a, b = rng.randrange(100, 1000), rng.randrange(100, 1000)
        # Fresh ids per world: an allocator shared across steps must not take one world's
        # prompt for another's (its history would carry over).
        example = TaskExample(
            prompt_id=f"w{seed}q{i}", prompt=f"{a}+{b}=", answer=str(a + b), task="arithmetic"
        )
        examples.append(example)
        rates[example.prompt_id] = mix.draw(rng)
        script[example.prompt] = FakePrompt(
            pass_rate=rates[example.prompt_id], answer=example.answer
        )
    codec = PromptCodec(tokenizer=build_char_tokenizer(), sampling=SamplingParams(max_new_tokens=8))
    engine = FakeEngine(tokenizer=codec.tokenizer, script=script, seed=seed)
    answers = {prompt: entry.answer for prompt, entry in script.items()}
    return FakeWorld(examples, rates, engine, codec, answers)
