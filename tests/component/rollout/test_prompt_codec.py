"""The prompt codec with the chat template: one layout for training, evaluation and hinted
prompts, stop tokens of the template, a cache that stays correct, and the data checks made on
the prompt as the model sees it (length in the context, the \\boxed{} instruction)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from adarl.config import RolloutConfig, TaskConfig
from adarl.models.bpe import IM_END, build_bpe_tokenizer
from adarl.models.tokenizer import build_char_tokenizer
from adarl.rollout.codec import (
    PromptCodec,
    build_prompt_check,
    build_prompt_codec,
    end_of_turn_token_id,
)
from adarl.tasks.build import build_prompt_source, build_test_examples
from adarl.tasks.files import BadRowError
from adarl.types import PromptRequest, SamplingParams, TaskExample

SYSTEM = "Please reason step by step, and put your final answer within \\boxed{}."
SUFFIX = " Let's think step by step and output the final answer within \\boxed{}."


@pytest.fixture(scope="module")
def bpe():  # PreTrainedTokenizerFast
    return build_bpe_tokenizer()


def _chat_task(**overrides: object) -> TaskConfig:
    settings: dict[str, object] = {
        "source": "jsonl",
        "path": "unused.jsonl",
        "verifier": "math",
        "chat_template": True,
        "system_prompt": SYSTEM,
        "instruction_suffix": SUFFIX,
        "test_fraction": 0.0,  # every row trains: these tests read the rows, not the split
        **overrides,
    }
    return TaskConfig(**settings)  # type: ignore[arg-type]


def _request(prompt: str, hint: str | None = None) -> PromptRequest:
    example = TaskExample(prompt_id="p0", prompt=prompt, answer="5", task="math")
    return PromptRequest(request_id="r0", example=example, num_samples=2, step=1, seed=0, hint=hint)


def test_raw_text_stays_the_builtin_layout() -> None:
    tokenizer = build_char_tokenizer()
    codec = build_prompt_codec(TaskConfig(), RolloutConfig(), tokenizer)
    ids = codec.prompt_token_ids("12+3=")
    assert ids == (tokenizer.bos_token_id, *tokenizer.encode("12+3=", add_special_tokens=False))
    assert codec.sampling.stop_token_ids == (tokenizer.eos_token_id,)
    assert codec.render("12+3=") == "12+3="


def test_chat_template_renders_system_user_and_assistant_header(bpe) -> None:
    codec = build_prompt_codec(_chat_task(), RolloutConfig(max_new_tokens=1024), bpe)
    ids = codec.prompt_token_ids("What is 2+3?")
    expected = (
        f"<|im_start|>system\n{SYSTEM}<|im_end|>\n"
        f"<|im_start|>user\nWhat is 2+3?{SUFFIX}<|im_end|>\n<|im_start|>assistant\n"
    )
    assert bpe.decode(list(ids)) == expected
    assert ids == tuple(bpe.encode(expected, add_special_tokens=False))  # no <bos> added
    # The template closes turns with <|im_end|>, which is not the eos: generation stops at both.
    im_end = bpe.convert_tokens_to_ids(IM_END)
    assert end_of_turn_token_id(bpe) == im_end != bpe.eos_token_id
    assert codec.sampling.stop_token_ids == (bpe.eos_token_id, im_end)
    assert codec.sampling.max_new_tokens == 1024


def test_training_evaluation_and_hints_share_one_layout(bpe) -> None:
    codec = build_prompt_codec(_chat_task(), RolloutConfig(), bpe)
    train = codec.generation_request(_request("What is 2+3?"))
    evaluation = codec.generation_request(
        _request("What is 2+3?"), sampling=SamplingParams(temperature=0.0, max_new_tokens=8)
    )
    assert train.prompt_token_ids == evaluation.prompt_token_ids
    assert evaluation.sampling.max_new_tokens == 8
    hinted = codec.generation_request(_request("What is 2+3?", hint=" Hint: add."))
    text = bpe.decode(list(hinted.prompt_token_ids))
    # The hint joins the user turn between the problem and the instruction, inside the template.
    assert f"<|im_start|>user\nWhat is 2+3? Hint: add.{SUFFIX}<|im_end|>" in text
    assert text.startswith("<|im_start|>system\n") and text.endswith("<|im_start|>assistant\n")


def test_cache_is_per_text_and_per_codec(bpe) -> None:
    chat = build_prompt_codec(_chat_task(), RolloutConfig(), bpe)
    raw = PromptCodec(tokenizer=bpe, sampling=SamplingParams(), instruction_suffix=SUFFIX)
    first = chat.prompt_token_ids("What is 2+3?")
    assert chat.prompt_token_ids("What is 2+3?") is first  # served from the cache
    assert chat.prompt_token_ids("What is 2+3? Hint: add.") != first
    assert raw.prompt_token_ids("What is 2+3?") != first  # another layout, another cache
    fresh = build_prompt_codec(_chat_task(), RolloutConfig(), bpe)
    assert fresh.prompt_token_ids("What is 2+3?") == first
    chat._cache_limit = 1  # a full cache is emptied, never served stale
    chat.prompt_token_ids("another prompt")
    assert chat.prompt_token_ids("What is 2+3?") == first


def test_chat_template_needs_a_tokenizer_template() -> None:
    with pytest.raises(ValueError, match=re.escape("set task.chat_template=false")):
        build_prompt_codec(_chat_task(), RolloutConfig(), build_char_tokenizer())


def _write_rows(path: Path, prompts: list[str]) -> Path:
    path.write_text("".join(json.dumps({"prompt": p, "answer": "5"}) + "\n" for p in prompts))
    return path


def test_prompt_longer_than_the_context_is_a_bad_row(tmp_path: Path, bpe) -> None:
    rollout = RolloutConfig(max_model_len=160, max_new_tokens=100)
    long_prompt = "What is " + " + ".join(str(i) for i in range(40)) + "?"
    path = _write_rows(tmp_path / "train.jsonl", ["What is 2+3?", long_prompt, "What is 1+4?"])
    task = _chat_task(path=str(path))
    codec = build_prompt_codec(task, rollout, bpe)
    check = build_prompt_check(task, rollout, codec, model_max_positions=None)
    assert (
        len(codec.prompt_token_ids(long_prompt)) > 60 >= len(codec.prompt_token_ids("What is 2+3?"))
    )
    with pytest.raises(BadRowError, match="prompt_too_many_tokens") as info:
        build_prompt_source(task, check_prompt=check)
    message = str(info.value)
    assert "line 2" in message and "rollout.max_model_len" in message
    assert "rollout.max_new_tokens=100" in message
    skipping = _chat_task(path=str(path), on_bad_row="skip")
    source = build_prompt_source(skipping, check_prompt=check)
    assert [e.prompt for e in source.examples] == ["What is 2+3?", "What is 1+4?"]
    assert source.metrics()["sampling/data_rows_skipped_prompt_too_many_tokens"] == 1


def test_context_defaults_to_the_models_positions(bpe) -> None:
    rollout = RolloutConfig(max_model_len=None, max_new_tokens=100)
    task = _chat_task()
    codec = build_prompt_codec(task, rollout, bpe)
    check = build_prompt_check(task, rollout, codec, model_max_positions=200)
    example = TaskExample(prompt_id="x", prompt="What is 2+3?", answer="5", task="math")
    assert check(example) is None
    tight = build_prompt_check(task, rollout, codec, model_max_positions=150)
    problem = tight(example)
    assert problem is not None and problem[0] == "prompt_too_many_tokens"
    assert "the model's max positions" in problem[1]


def test_math_task_must_ask_for_boxed(tmp_path: Path, bpe) -> None:
    path = _write_rows(tmp_path / "train.jsonl", ["What is 2+3?", "What is 1+4?"])
    rollout = RolloutConfig(max_model_len=512, max_new_tokens=128)
    silent = _chat_task(path=str(path), system_prompt=None, instruction_suffix="")
    codec = build_prompt_codec(silent, rollout, bpe)
    check = build_prompt_check(silent, rollout, codec, model_max_positions=None)
    with pytest.raises(BadRowError, match="no_answer_instruction") as info:
        build_prompt_source(silent, check_prompt=check)
    assert "task.instruction_suffix" in str(info.value)
    # Asked for by the data itself, by the suffix, or by the system prompt: accepted.
    _write_rows(tmp_path / "asks.jsonl", ["What is 2+3? Answer in \\boxed{}."])
    asks = _chat_task(path=str(tmp_path / "asks.jsonl"), system_prompt=None, instruction_suffix="")
    assert len(build_prompt_source(asks, check_prompt=check).examples) == 1
    for task in (
        _chat_task(path=str(path), system_prompt=None),
        _chat_task(path=str(path), instruction_suffix=""),
    ):
        codec = build_prompt_codec(task, rollout, bpe)
        ok = build_prompt_check(task, rollout, codec, model_max_positions=None)
        assert len(build_prompt_source(task, check_prompt=ok).examples) == 2


def test_generated_task_prompts_are_checked_too() -> None:
    tokenizer = build_char_tokenizer()
    task = TaskConfig()
    rollout = RolloutConfig(max_model_len=16, max_new_tokens=12)
    codec = build_prompt_codec(task, rollout, tokenizer)
    check = build_prompt_check(task, rollout, codec, model_max_positions=None)
    with pytest.raises(ValueError, match=r"prompt_too_many_tokens.*raise rollout\.max_model_len"):
        build_test_examples(task, check_prompt=check)
    fits = build_prompt_check(
        task,
        RolloutConfig(),
        build_prompt_codec(task, RolloutConfig(), tokenizer),
        model_max_positions=None,
    )
    assert len(build_test_examples(task, check_prompt=fits)) == 256
