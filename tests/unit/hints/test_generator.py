"""HintGenerator: template hints, and the hint mode's parse → leak check → retries → fallback,
driven through the scripted `FakeEngine` (each hint-mode prompt has a scripted answer)."""

from __future__ import annotations

import pytest

from adarl.config.hints import HintsConfig
from adarl.hints.format import hint_prompt
from adarl.hints.generator import HintGenerator
from adarl.hints.template import hint_mode_solution
from adarl.hints.types import HintRequest
from adarl.models.tokenizer import build_char_tokenizer
from adarl.rollout.builders import build_hint_generator
from adarl.rollout.codec import PromptCodec
from adarl.rollout.fake import FakeEngine, FakePrompt
from adarl.tasks.arithmetic import make_example
from adarl.types import SamplingParams, TaskExample

TOKENIZER = build_char_tokenizer()
CODEC = PromptCodec(tokenizer=TOKENIZER, sampling=SamplingParams(stop_token_ids=()))
# 12+7-3 = 16: template levels 12+7 | 12+7=19 | 12+7=19,19-3=
EXAMPLE = make_example([12, 7, 3], list("+-"), difficulty=0.0)
GOOD = "1[12+7]2[12+7=19]3[12+7=19,19-3=]"


def _mode_prompt(example: TaskExample) -> str:
    return hint_prompt(example.prompt, hint_mode_solution(example))


def _generator(
    script: dict[str, FakePrompt], *, retries: int = 2, fallback: str = "none", **config
) -> tuple[HintGenerator, FakeEngine]:
    engine = FakeEngine(tokenizer=TOKENIZER, script=script, num_wrong_answers=1)
    hints = HintsConfig(
        schedule="sage", source="self", retries=retries, fallback=fallback, seed=3, **config
    )
    return build_hint_generator(hints, generate=engine.generate, codec=CODEC), engine


def _requests(example: TaskExample, levels=(1, 2, 3), step: int = 0) -> list[HintRequest]:
    return [HintRequest(example.prompt_id, example, level, step=step) for level in levels]


def test_template_hints_are_the_levels_shown_in_brackets() -> None:
    generator = build_hint_generator(HintsConfig(source="template"), generate=None, codec=CODEC)
    single = make_example([5, 3], ["+"], difficulty=0.0)  # 5+3: no usable level
    hints = generator.hints([*_requests(EXAMPLE), HintRequest(single.prompt_id, single, 2)])
    assert [h.text for h in hints] == ["[12+7]", "[12+7=19]", "[12+7=19,19-3=]", None]
    assert [h.source for h in hints] == ["template"] * 3 + ["none"]
    assert "single step" in (hints[3].error or "")
    metrics = generator.metrics()
    assert metrics["sampling/hint_requests"] == 4
    assert metrics["sampling/hints_given"] == 3
    assert metrics["sampling/hints_unavailable"] == 1
    assert metrics["sampling/hints_given_level_2"] == 1
    assert metrics["sampling/hint_generations"] == 0
    assert generator.metrics()["sampling/hint_requests"] == 0  # a window per call


def test_self_hints_come_from_one_generation_per_prompt_and_step() -> None:
    generator, engine = _generator({_mode_prompt(EXAMPLE): FakePrompt(1.0, GOOD)})
    first = generator.hints(_requests(EXAMPLE, levels=(1,)))
    assert [(h.text, h.source, h.error) for h in first] == [("[12+7]", "self", None)]
    # sage's escalation later in the same step reuses that generation
    later = generator.hints(_requests(EXAMPLE, levels=(2, 3)))
    assert [h.text for h in later] == ["[12+7=19]", "[12+7=19,19-3=]"]
    metrics = generator.metrics()
    assert metrics["sampling/hint_generations"] == 1
    assert metrics["sampling/hint_parse_failures"] == 0
    assert metrics["perf/hint_tokens"] == len(GOOD) + 1  # one token per character, and <eos>
    # the next step has new weights: write the hints again
    generator.hints(_requests(EXAMPLE, levels=(1,), step=1))
    assert generator.metrics()["sampling/hint_generations"] == 1
    assert engine.metrics()["perf/rollout_samples_total"] == 2


def test_a_leaked_level_is_rejected_retried_then_falls_back_to_the_template() -> None:
    leaky = "1[12+7]2[it is 16]3[12+7=19,19-3=]"
    generator, _ = _generator(
        {_mode_prompt(EXAMPLE): FakePrompt(1.0, leaky)}, retries=2, fallback="template"
    )
    hints = generator.hints(_requests(EXAMPLE))
    assert [h.source for h in hints] == ["self", "template", "self"]
    assert hints[1].text == "[12+7=19]"
    assert "stated the answer" in (hints[1].error or "")
    metrics = generator.metrics()
    assert metrics["sampling/hint_generations"] == 3  # the first try and 2 retries
    assert metrics["sampling/hint_leaks_rejected"] == 3
    assert metrics["sampling/hint_fallbacks"] == 1
    assert metrics["sampling/hints_given"] == 3


def test_unparseable_output_without_fallback_gives_no_hint() -> None:
    generator, _ = _generator({_mode_prompt(EXAMPLE): FakePrompt(1.0, "12+7=19")}, retries=1)
    hints = generator.hints(_requests(EXAMPLE, levels=(2,)))
    assert hints[0].text is None and hints[0].source == "none"
    assert "format" in (hints[0].error or "")
    metrics = generator.metrics()
    assert metrics["sampling/hint_generations"] == 2
    assert metrics["sampling/hint_parse_failures"] == 2
    assert metrics["sampling/hints_unavailable"] == 1


def test_a_missing_level_keeps_the_others() -> None:
    generator, _ = _generator(
        {_mode_prompt(EXAMPLE): FakePrompt(1.0, "1[12+7]2[]3[12+7=19,19-3=]")}, retries=0
    )
    hints = generator.hints(_requests(EXAMPLE))
    assert [h.text for h in hints] == ["[12+7]", None, "[12+7=19,19-3=]"]
    assert "lacks level(s) [2]" in (hints[1].error or "")
    assert generator.metrics()["sampling/hint_parse_failures"] == 1


def test_retries_recover_from_malformed_samples() -> None:
    # Each sample is the good answer with probability 0.7, else it + a stray digit (malformed:
    # nothing of it is used). With 5 retries a prompt ends without hints w.p. 0.3^6 = 7e-4.
    examples = [make_example([10 + a, 7, 3], list("+-"), difficulty=0.0) for a in range(12)]
    script = {}
    for example in examples:
        levels = HintGenerator(source="template").hints(_requests(example))
        good = "".join(f"{h.level}{h.text}" for h in levels)
        script[_mode_prompt(example)] = FakePrompt(0.7, good)
    generator, _ = _generator(script, retries=5)
    hints = generator.hints([r for e in examples for r in _requests(e)])
    template = HintGenerator(source="template").hints([r for e in examples for r in _requests(e)])
    assert [h.text for h in hints] == [h.text for h in template]
    assert {h.source for h in hints} == {"self"}
    metrics = generator.metrics()
    assert metrics["sampling/hint_generations"] > len(examples)  # some needed a retry
    assert metrics["sampling/hint_parse_failures"] == metrics["sampling/hint_generations"] - 12


def test_a_generation_cut_by_max_hint_tokens_is_malformed() -> None:
    generator, _ = _generator(
        {_mode_prompt(EXAMPLE): FakePrompt(1.0, GOOD)}, retries=0, max_hint_tokens=20
    )
    hints = generator.hints(_requests(EXAMPLE))
    assert [h.text for h in hints] == [None, None, None]
    assert generator.metrics()["sampling/hint_parse_failures"] == 1


def test_requests_and_builders_name_what_is_wrong() -> None:
    with pytest.raises(ValueError, match="level must be 1, 2 or 3"):
        HintRequest(EXAMPLE.prompt_id, EXAMPLE, 0)
    with pytest.raises(ValueError, match="differs"):
        HintRequest("other", EXAMPLE, 1)
    with pytest.raises(ValueError, match="pass generate="):
        build_hint_generator(HintsConfig(source="self"), generate=None, codec=CODEC)
    with pytest.raises(ValueError, match="pass rollout="):
        build_hint_generator(
            HintsConfig(source="model", model="/some/dir"), generate=None, codec=CODEC
        )
    with pytest.raises(ValueError, match="writes hints with a model"):
        HintGenerator(source="self")


def test_a_prompt_without_a_reference_solution_gets_no_hint_and_no_generation() -> None:
    bare = TaskExample(prompt_id="bare", prompt="12+7-3=", answer="16", task="arithmetic")
    generator, engine = _generator({})  # a hint-mode call would fail: no script at all
    template = HintGenerator(source="template")
    for source in (generator, template):
        (hint,) = source.hints([HintRequest("bare", bare, 1)])
        assert hint.text is None and hint.source == "none"
        assert "reference_solution" in (hint.error or "")
        assert source.metrics()["sampling/hints_unavailable"] == 1
    assert engine.metrics()["perf/rollout_samples_total"] == 0


def test_hints_written_ahead_answer_the_coming_step_without_a_generation() -> None:
    generator, engine = _generator({_mode_prompt(EXAMPLE): FakePrompt(1.0, GOOD)})
    cost = generator.write_ahead(5, [EXAMPLE])
    # Every attempt in one round (the first and 2 retries): the first is complete, the rest unread.
    assert cost == {
        "sampling/hints_ahead_prompts": 1.0,
        "sampling/hints_ahead_generations": 3.0,
        "sampling/hints_ahead_parse_failures": 0.0,
        "perf/hint_ahead_tokens": float(3 * (len(GOOD) + 1)),
    }
    # Writing ahead is reported by write_ahead alone, not in the window of `hints`.
    assert generator.metrics()["sampling/hint_generations"] == 0
    hints = generator.hints(_requests(EXAMPLE, step=5))
    assert [h.text for h in hints] == ["[12+7]", "[12+7=19]", "[12+7=19,19-3=]"]
    metrics = generator.metrics()
    assert metrics["sampling/hint_generations"] == 0  # every level was written ahead
    assert metrics["sampling/hint_requests_written_ahead"] == 3
    assert engine.metrics()["perf/rollout_samples_total"] == 3
    # Written for step 5 only: step 6 has new weights and writes again.
    generator.hints(_requests(EXAMPLE, levels=(1,), step=6))
    metrics = generator.metrics()
    assert metrics["sampling/hint_generations"] == 1
    assert metrics["sampling/hint_requests_written_ahead"] == 0


def test_writing_ahead_keeps_the_same_seeds_as_writing_when_asked() -> None:
    """Same weights, same hints: a level written ahead (every attempt in one round) is the
    level `hints` writes attempt by attempt (the attempt seeds depend on the prompt, the step
    and the attempt, not on when or beside what)."""
    script = {_mode_prompt(EXAMPLE): FakePrompt(0.5, GOOD)}  # half the samples are malformed
    for step in range(12):
        ahead, _ = _generator(script, fallback="none")
        asked, _ = _generator(script, fallback="none")
        ahead.write_ahead(step, [EXAMPLE])
        assert ahead.hints(_requests(EXAMPLE, step=step)) == asked.hints(
            _requests(EXAMPLE, step=step)
        )


def test_template_hints_are_not_written_ahead() -> None:
    generator = build_hint_generator(HintsConfig(source="template"), generate=None, codec=CODEC)
    with pytest.raises(ValueError, match="nothing to write"):
        generator.write_ahead(1, [EXAMPLE])
