"""The mid-size built-in (`adarl/mid-math`, 26M parameters, byte-level BPE, ChatML template) on
the real path at real lengths: vLLM's CPU engine samples 1,024-token responses to chat-templated
math prompts, the math verifier scores them, the DeepSpeed learner trains on them, and weights
sync back, for 3 steps. Kept small (2 prompts × 2 samples per step, in-process): it is here so
that the long-sequence code paths run on every CI run, not to learn (the model is random)."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from adarl.driver.step_loop import StepOutcome
from adarl.launch import CONFIG_DIR, load_config
from adarl.logging import read_metrics_jsonl
from adarl.models.bpe import build_bpe_tokenizer
from adarl.session import TrainingSession
from adarl.types import FinishReason

SYSTEM = "Please reason step by step, and put your final answer within \\boxed{}."
SUFFIX = " Let's think step by step and output the final answer within \\boxed{}."
PROBLEMS = [
    ("What is 12 + 30?", "42"),
    ("Find x if 3x = 21.", "7"),
    ("What is the area of a 4 by 5 rectangle?", "20"),
    ("Simplify $\\frac{6}{8}$.", "\\frac{3}{4}"),
]
RESPONSE_TOKENS = 1024


# Heavy: the suite's longest test (a 3-minute build and three 1,024-token steps), outside make
# test's 10 minutes; `pytest -m heavy tests/e2e/test_mid_model.py`.
@pytest.mark.heavy
@pytest.mark.timeout(900)
def test_mid_model_trains_three_steps_with_long_chat_responses(tmp_path: Path) -> None:
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps({"prompt": p, "answer": a}) + "\n" for p, a in PROBLEMS))
    cache = os.environ.get("ADARL_CACHE_DIR") or str(tmp_path / "cache")
    overrides = [
        "+experiment=grpo",
        "model.name_or_path=adarl/mid-math",
        f"model.cache_dir={cache}",
        "task=math_jsonl",
        f"task.path={data}",
        "rollout=vllm",
        f"rollout.max_new_tokens={RESPONSE_TOKENS}",
        "rollout.max_model_len=1536",
        "rollout.max_num_seqs=8",
        "allocator.prompts_per_step=2",
        "allocator.uniform_samples_per_prompt=2",
        "learner.learning_rate=1e-5",
        "learner.lr_warmup_steps=0",
        "cluster=in_process",
        "trainer.total_steps=3",
        "logger.mode=disabled",
    ]
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        config = load_config(compose(config_name="config", overrides=overrides))
    # The task group's recipe instructions, unchanged by the overrides.
    assert (config.task.system_prompt, config.task.instruction_suffix) == (SYSTEM, SUFFIX)

    outcomes: list[StepOutcome] = []
    with TrainingSession(config, run_dir=tmp_path / "run", on_step_end=outcomes.append) as session:
        summary = session.train()
        codec = session.codec
        served = set(session.rollout.weight_versions())

    tokenizer = build_bpe_tokenizer()
    assert [o.step for o in outcomes] == [1, 2, 3] and summary.steps == 3
    assert served == {3}  # the engines serve the last trained weights
    rollouts = [s.rollout for o in outcomes for g in o.result.groups for s in g.rollouts]
    assert len(rollouts) == 3 * 2 * 2
    texts = {p for p, _ in PROBLEMS}
    for rollout in rollouts:
        # The tokenized prompt is the chat template around the system prompt, the problem and
        # the instruction, ending in the assistant header; the learner trained on these ids.
        rendered = tokenizer.decode(list(rollout.prompt_token_ids))
        problem = next(t for t in texts if f"<|im_start|>user\n{t}{SUFFIX}<|im_end|>" in rendered)
        assert rendered == (
            f"<|im_start|>system\n{SYSTEM}<|im_end|>\n"
            f"<|im_start|>user\n{problem}{SUFFIX}<|im_end|>\n<|im_start|>assistant\n"
        )
        assert rollout.prompt_token_ids == codec.prompt_token_ids(problem)
        completion = rollout.completion
        assert 1 <= len(completion.token_ids) <= RESPONSE_TOKENS
        assert len(completion.logprobs) == len(completion.token_ids)
        if completion.finish_reason == FinishReason.STOP:  # at <|endoftext|> or <|im_end|>
            assert completion.token_ids[-1] in codec.sampling.stop_token_ids
    # Long responses were generated and trained on: some ran to the 1,024-token limit.
    full_length = [r for r in rollouts if len(r.completion.token_ids) == RESPONSE_TOKENS]
    assert full_length and all(
        r.completion.finish_reason == FinishReason.LENGTH for r in full_length
    )

    rows = {row["step"]: row for row in read_metrics_jsonl(tmp_path / "run" / "metrics.jsonl")}
    for step in (1, 2, 3):
        row = rows[step]
        assert math.isfinite(row["train/loss"]) and math.isfinite(row["train/grad_norm"])
        assert row["train/weight_version"] == step
        assert row["sampling/rollouts"] == 4
