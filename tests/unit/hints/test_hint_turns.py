"""The hint generator answering in turns (`begin_hints` / `begin_write_ahead` / `resume`), as its
actor does, and `HintRunner`, the driver's side that runs each turn's generations: the same
hints, seeds and metrics as the one-call path; a broken protocol is refused by name."""

from __future__ import annotations

import pytest

from adarl.config.hints import HintsConfig
from adarl.hints.format import hint_prompt
from adarl.hints.generator import HintGenerator, HintRunner, run_hint_call
from adarl.hints.template import hint_mode_solution
from adarl.hints.types import HintRequest
from adarl.models.tokenizer import build_char_tokenizer
from adarl.rollout.builders import build_hint_generator, hint_generator_kwargs
from adarl.rollout.codec import PromptCodec
from adarl.rollout.fake import FakeEngine, FakePrompt
from adarl.tasks.arithmetic import make_example
from adarl.types import GenerationRequest, GenerationResult, SamplingParams

TOKENIZER = build_char_tokenizer()
CODEC = PromptCodec(tokenizer=TOKENIZER, sampling=SamplingParams(stop_token_ids=()))
FIRST = make_example([12, 7, 3], list("+-"), difficulty=0.0)  # levels 12+7 | 12+7=19 | ...
SECOND = make_example([40, 2, 5], list("+-"), difficulty=0.0)
CONFIG = HintsConfig(schedule="sage", source="self", retries=2, fallback="none", seed=3)


def _engine() -> FakeEngine:
    """FIRST's hint mode writes a good answer half the time (retries matter), SECOND's never."""
    script = {
        hint_prompt(FIRST.prompt, hint_mode_solution(FIRST)): FakePrompt(
            pass_rate=0.5, answer="1[12+7]2[12+7=19]3[12+7=19,19-3=]"
        ),
        hint_prompt(SECOND.prompt, hint_mode_solution(SECOND)): FakePrompt(
            pass_rate=0.0, answer="x"
        ),
    }
    return FakeEngine(tokenizer=TOKENIZER, script=script, num_wrong_answers=1, seed=0)


def _requests(step: int) -> list[HintRequest]:
    return [
        HintRequest(example.prompt_id, example, level, step=step)
        for example in (FIRST, SECOND)
        for level in (1, 3)
    ]


def test_turns_give_the_same_hints_and_metrics_as_one_call() -> None:
    direct = build_hint_generator(CONFIG, generate=_engine().generate, codec=CODEC)
    expected = [direct.hints(_requests(step)) for step in (1, 2)]
    expected_metrics = direct.metrics()

    engine = _engine()
    turned = HintGenerator(**hint_generator_kwargs(CONFIG, CODEC))  # no generate: turns only
    got = []
    for step in (1, 2):
        turn = turned.begin_hints(_requests(step))
        rounds = 0
        while not turn.done:
            assert all(isinstance(r, GenerationRequest) for r in turn.generations)
            turn = turned.resume(engine.generate(list(turn.generations)))
            rounds += 1
        assert 1 <= rounds <= 1 + CONFIG.retries
        got.append(list(turn.hints))
    assert got == expected
    metrics = turned.metrics()
    assert {k: v for k, v in metrics.items() if k != "timing/hint_s"} == {
        k: v for k, v in expected_metrics.items() if k != "timing/hint_s"
    }
    assert metrics["sampling/hint_generations"] > 2  # retries ran: more than one per prompt


def test_the_runner_drives_the_turns_and_writes_ahead_like_the_generator() -> None:
    direct = build_hint_generator(CONFIG, generate=_engine().generate, codec=CODEC)
    runner = HintRunner(
        generator=HintGenerator(**hint_generator_kwargs(CONFIG, CODEC)),
        generate=_engine().generate,
        source="self",
    )
    assert runner.write_ahead(4, [FIRST, SECOND]) == direct.write_ahead(4, [FIRST, SECOND])
    assert runner.hints(_requests(4)) == direct.hints(_requests(4))
    assert runner.metrics()["sampling/hint_requests_written_ahead"] == len(_requests(4))
    with pytest.raises(ValueError, match="template hints are derived when asked"):
        HintRunner(
            generator=HintGenerator(source="template"), generate=None, source="template"
        ).write_ahead(1, [FIRST])


def test_a_broken_turn_protocol_is_refused_by_name() -> None:
    generator = HintGenerator(**hint_generator_kwargs(CONFIG, CODEC))
    with pytest.raises(RuntimeError, match="no hint call is waiting"):
        generator.resume([])
    turn = generator.begin_hints(_requests(1))
    assert not turn.done
    with pytest.raises(RuntimeError, match="resume it before beginning another"):
        generator.begin_hints(_requests(1))
    with pytest.raises(ValueError, match=r"got 1 results for \d+ hint-mode generations"):
        generator.resume([GenerationResult(request_id="x", completions=(), weight_version=0)])
    # The failed call is dropped: a new one starts cleanly.
    engine = _engine()
    turn = generator.begin_hints(_requests(2))
    assert len(run_hint_call(generator, engine.generate, turn).hints) == len(_requests(2))
    with pytest.raises(ValueError, match="no generate= was given"):
        run_hint_call(generator, None, generator.begin_hints(_requests(3)))
