"""The worked-solution warm start (`model.tiny.sft_response=worked`, preset `model=tiny_worked`):
its data, its cache key and the validation that keeps policy, verifier and lengths consistent."""

from __future__ import annotations

import dataclasses

import pytest
from hydra import compose, initialize_config_dir

from adarl.config import AdarlConfig
from adarl.config.model import WORKED_RESPONSE_TOKENS, TinyModelConfig
from adarl.hints.arithmetic import worked_steps
from adarl.launch import CONFIG_DIR, load_config
from adarl.models.hint_warm_start import task_pairs_with_hints
from adarl.models.tiny import tiny_model_fingerprint
from adarl.models.tokenizer import build_char_tokenizer
from adarl.tasks.arithmetic import DEFAULT_LEVELS, make_example, sample_examples


def test_worked_pairs_end_in_the_answer_and_hints_are_their_prefixes() -> None:
    examples = sample_examples("train", 400, seed=3)
    pairs = task_pairs_with_hints(examples, share=0.5, seed=0, worked=True)
    hinted = 0
    for example, (prompt, response) in zip(examples, pairs, strict=True):
        steps = worked_steps(example)
        assert response == ",".join(str(step) for step in steps)
        assert response.rsplit("=", 1)[1] == example.answer
        if prompt != example.prompt:
            hinted += 1
            hint = prompt.removeprefix(example.prompt).removeprefix("[").removesuffix("]")
            assert response.startswith(hint)  # every level is the start of the solution
    assert 0.35 * len(examples) < hinted < 0.6 * len(examples)  # half of the usable ones
    answers = task_pairs_with_hints(examples, share=0.5, seed=0)
    assert [p for p, _ in answers] == [p for p, _ in pairs]  # same prompts, same hints
    assert [r for _, r in answers] == [e.answer for e in examples]


def test_the_longest_worked_solution_of_the_default_mix() -> None:
    # The longest solutions are 2d*2d products (three steps of up to 4 digits); enumerate them.
    longest = 0
    for level in DEFAULT_LEVELS:
        (lo_a, hi_a), *_ = level.operand_ranges
        if len(level.operand_ranges) == 2 and level.operators == "*":
            lo_b, hi_b = level.operand_ranges[1]
            for a in range(lo_a, hi_a + 1):
                for b in range(lo_b, hi_b + 1):
                    example = make_example([a, b], ["*"], difficulty=0.0)
                    longest = max(longest, len(",".join(map(str, worked_steps(example)))))
    sampled = max(
        len(",".join(map(str, worked_steps(e)))) for e in sample_examples("train", 20_000, seed=1)
    )
    assert sampled <= longest
    assert longest + 1 == WORKED_RESPONSE_TOKENS  # + <eos>


def test_the_response_format_and_share_are_part_of_the_cache_key() -> None:
    tokenizer = build_char_tokenizer()
    base = tiny_model_fingerprint(TinyModelConfig(), tokenizer, "data")
    for change in ({"sft_response": "worked"}, {"sft_hinted_share": 0.5}):
        other = dataclasses.replace(TinyModelConfig(), **change)
        assert tiny_model_fingerprint(other, tokenizer, "data") != base


def _config(*overrides: str) -> AdarlConfig:
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        return load_config(compose(config_name="config", overrides=list(overrides)))


def test_the_preset_is_consistent_and_composes_with_the_experiments() -> None:
    for experiment in ("sage", "sage_light", "grpo", "ada_seq_balance_sage"):
        config = _config("model=tiny_worked", f"+experiment={experiment}")
        assert config.model.tiny.sft_response == "worked"
        assert config.reward.exact_match.answer_marker == "="
        assert config.rollout.max_new_tokens >= WORKED_RESPONSE_TOKENS
        assert config.eval.max_new_tokens >= WORKED_RESPONSE_TOKENS
        # The preset's learning rate wins over the learner group's (the defaults list's order).
        assert config.learner.learning_rate == 3e-5
    assert _config("+experiment=sage").learner.learning_rate == 3e-4


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (("model.tiny.sft_response=worked",), "answer_marker='='"),
        (("model=tiny_worked", "rollout.max_new_tokens=16"), "rollout.max_new_tokens=16 cuts"),
        (("model=tiny_worked", "eval.max_new_tokens=8"), "eval.max_new_tokens=8 cuts"),
        (("model.tiny.sft_response=reasoned",), "sft_response"),
        (("model.tiny.sft_hinted_share=1.5",), "sft_hinted_share"),
        (("model=tiny_worked", "+experiment=dro"), "R3 on worked solutions is not built"),
    ],
)
def test_inconsistent_settings_are_refused(overrides: tuple[str, ...], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _config(*overrides)


def test_hint_levels_of_a_one_step_problem_are_place_value_steps() -> None:
    # The worked format and the hints agree on one-step problems too (place value).
    example = make_example([47, 38], ["*"], difficulty=0.0)
    (_, response), *_ = task_pairs_with_hints([example], share=0.0, seed=0, worked=True)
    assert response == "47*30=1410,47*8=376,1410+376=1786"
    ((hinted, _),) = task_pairs_with_hints([example], share=1.0, seed=0, worked=True)
    assert hinted.startswith("47*38=[47*30")


def test_a_policy_that_writes_its_steps_trains_no_hint_mode_rows() -> None:
    """The bare task's hint-mode rows (the hint reader's format) are not the steps policy's: its
    warm start leaves them out, and the built-in policy keeps them."""
    from adarl.config.model import TinyModelConfig
    from adarl.models.loading import _arithmetic_hint_mode

    assert _arithmetic_hint_mode(TinyModelConfig(sft_steps=4, sft_response="steps")) == []
    (rows,) = _arithmetic_hint_mode(TinyModelConfig(sft_steps=4))
    assert rows.name == "hint_mode" and rows.pairs
