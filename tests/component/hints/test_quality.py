"""measure_hint_quality through the scripted engine: every pass rate, parse and leak rate is
scripted, so the report's numbers are known in advance."""

from __future__ import annotations

import pytest

from adarl.config.hints import HintsConfig
from adarl.hints.format import hint_prompt
from adarl.hints.generator import HintGenerator
from adarl.hints.quality import measure_hint_quality
from adarl.hints.template import hint_mode_solution
from adarl.hints.types import HintRequest
from adarl.models.tokenizer import build_char_tokenizer
from adarl.rollout.builders import build_hint_generator
from adarl.rollout.codec import PromptCodec
from adarl.rollout.fake import FakeEngine, FakePrompt
from adarl.tasks.arithmetic import make_example
from adarl.types import SamplingParams

SAMPLES = 400  # a scripted pass rate p is estimated to ±2·√(p(1-p)/400) ≤ 0.05


def test_the_report_recovers_the_scripted_rates() -> None:
    tokenizer = build_char_tokenizer()
    eos = int(tokenizer.eos_token_id)
    codec = PromptCodec(
        tokenizer=tokenizer,
        sampling=SamplingParams(temperature=1.0, max_new_tokens=16, stop_token_ids=(eos,)),
    )
    failing = make_example([12, 7, 3], list("+-"), difficulty=0.0)  # 16
    leaky = make_example([15, 4, 2], list("+-"), difficulty=0.0)  # 17
    solved = make_example([21, 8, 6], list("+-"), difficulty=0.0)  # 23, never failed
    template = HintGenerator(source="template")
    script: dict[str, FakePrompt] = {
        failing.prompt: FakePrompt(0.0, failing.answer),
        leaky.prompt: FakePrompt(0.0, leaky.answer),
        solved.prompt: FakePrompt(1.0, solved.answer),
    }
    hinted_rates = {1: 0.2, 2: 0.5, 3: 0.8}
    for example in (failing, leaky):
        for level, hint in zip(
            (1, 2, 3),
            template.hints([HintRequest(example.prompt_id, example, lv) for lv in (1, 2, 3)]),
            strict=True,
        ):
            script[example.prompt + hint.text] = FakePrompt(hinted_rates[level], example.answer)
    mode = {e.prompt_id: hint_prompt(e.prompt, hint_mode_solution(e)) for e in (failing, leaky)}
    script[mode[failing.prompt_id]] = FakePrompt(1.0, "1[12+7]2[12+7=19]3[12+7=19,19-3=]")
    # The leaky prompt's hint mode states its answer (17) at level 2 on every try.
    script[mode[leaky.prompt_id]] = FakePrompt(1.0, "1[15+4]2[it is 17]3[15+4=19,19-2=]")
    engine = FakeEngine(tokenizer=tokenizer, script=script, num_wrong_answers=1)
    self_hints = build_hint_generator(
        HintsConfig(source="self", fallback="none", retries=1, temperature=1.0, seed=0),
        generate=engine.generate,
        codec=codec,
    )
    report = measure_hint_quality(
        generate=engine.generate,
        codec=codec,
        examples=[failing, leaky, solved],
        verify=lambda example, text: text.strip() == example.answer,
        self_hints=self_hints,
        samples_per_prompt=SAMPLES,
    )
    assert (report.prompts, report.failed) == (3, 2)
    assert report.base_pass_rate == pytest.approx(1 / 3)
    # Three generations: one per failed prompt, and one retry of the leaky prompt.
    assert report.self_generations == 3
    assert report.self_parse_rate == 1.0
    assert report.self_leak_rate == pytest.approx(2 / 9)  # 2 of the 9 levels parsed
    rows = {(row.source, row.level): row for row in report.levels}
    for source in ("template", "self"):
        for level, rate in hinted_rates.items():
            row = rows[(source, level)]
            expected_prompts = 1 if (source, level) == ("self", 2) else 2
            assert row.prompts == expected_prompts
            assert row.pass_rate == pytest.approx(rate, abs=0.05)
            assert row.gate == 1.0
            assert row.control_pass_rate == 0.0 and row.control_gate == 0.0
            assert row.lift == pytest.approx(rate, abs=0.05)


def test_a_template_generator_is_refused() -> None:
    with pytest.raises(ValueError, match="self_hints"):
        measure_hint_quality(
            generate=lambda requests: [],
            codec=PromptCodec(tokenizer=build_char_tokenizer(), sampling=SamplingParams()),
            examples=[],
            verify=lambda example, text: False,
            self_hints=HintGenerator(source="template"),
        )
