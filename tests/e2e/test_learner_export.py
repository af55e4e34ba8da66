"""HF export of a trained tiny policy (`adarl.export.write_model`, what every run does with its
final policy): transformers and vLLM load it, score fixed sequences as the learner does (the
same log-probs within fp32 round-off) and decode greedily exactly as the learner's weights do.

The policy is trained by the learner itself (ZeRO-2) to continue each prompt with a fixed
response (advantage +1 on those tokens: reinforcement on positive samples only, i.e. RAFT/SFT),
so greedy decoding has clear margins and a numerical near-tie cannot flip a token; the test
checks that margin. vLLM runs as adarl's `VLLMEngine` in a Ray actor (its in-process engine sets
up its own torch.distributed world; keeping it out of the test process keeps the learners' tests
independent of test order).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from adarl.cluster import ensure_ray, spawn_actor
from adarl.config import AdarlConfig
from adarl.config.learner import PolicyLossConfig
from adarl.config.model import TinyModelConfig
from adarl.export import write_model
from adarl.learner import LearnerGroup
from adarl.models.loading import load_tokenizer
from adarl.models.tiny import build_tiny_qwen2
from adarl.models.tokenizer import build_char_tokenizer
from adarl.rollout.codec import build_prompt_codec
from adarl.rollout.vllm_engine import VLLMEngine
from adarl.types import GenerationRequest, SamplingParams, TrainBatch

PROMPTS = ["12+7=", "3*4=", "50-8=", "9+9="]
RESPONSES = ["19", "12", "42", "18"]
NEW_TOKENS = 3  # the two answer characters and <eos>
MIN_MARGIN = 1e-2  # top-1 minus top-2 logit at every greedy step, far above fp32 round-off
# Log-probs of the same fp32 weights computed by different kernels (DeepSpeed's module, plain
# transformers, vLLM's CPU attention): they differ by round-off only.
LOGPROB_ATOL = 1e-4


def _trained_batch() -> TrainBatch:
    tokenizer = build_char_tokenizer()
    rows = []
    for prompt, response in zip(PROMPTS, RESPONSES, strict=True):
        prompt_ids = tokenizer(prompt)["input_ids"]
        response_ids = [
            *tokenizer.encode(response, add_special_tokens=False),
            tokenizer.eos_token_id,
        ]
        rows.append((prompt_ids, response_ids))
    length = max(len(p) + len(r) for p, r in rows)
    b = len(rows)
    input_ids = torch.full((b, length), tokenizer.pad_token_id, dtype=torch.long)
    attention = torch.zeros((b, length), dtype=torch.bool)
    response = torch.zeros((b, length), dtype=torch.bool)
    for i, (p, r) in enumerate(rows):
        input_ids[i, : len(p) + len(r)] = torch.tensor(p + r)
        attention[i, : len(p) + len(r)] = True
        response[i, len(p) : len(p) + len(r)] = True
    return TrainBatch(
        input_ids=input_ids,
        attention_mask=attention,
        response_mask=response,
        behaviour_logprobs=torch.zeros((b, length)),  # unused: the ratio is taken vs the learner
        advantages=response.float(),
        prompt_index=torch.arange(b),
    )


def _greedy(model: torch.nn.Module, prompt_ids: Sequence[int]) -> tuple[list[int], float]:
    """Greedy continuation and the smallest top-1/top-2 logit margin along it."""
    ids = list(prompt_ids)
    margin = float("inf")
    with torch.no_grad():
        for _ in range(NEW_TOKENS):
            logits = model(input_ids=torch.tensor([ids])).logits[0, -1]
            top = logits.topk(2).values
            margin = min(margin, float(top[0] - top[1]))
            ids.append(int(logits.argmax()))
    return ids[len(prompt_ids) :], margin


@pytest.mark.slow
def test_export_loads_in_transformers_and_vllm_with_the_learners_greedy_outputs(
    tmp_path: Path,
) -> None:
    import ray

    tokenizer = build_char_tokenizer()
    # The built-in tiny architecture: vLLM's CPU attention needs head_dim >= 32 (128 / 4 heads).
    config = TinyModelConfig(max_position_embeddings=64)
    build_tiny_qwen2(config, tokenizer).save_pretrained(tmp_path / "initial")
    tokenizer.save_pretrained(tmp_path / "initial")
    group = LearnerGroup(
        in_process=True,
        model_path=str(tmp_path / "initial"),
        zero_stage=2,
        learning_rate=1e-2,
        loss=PolicyLossConfig(ratio_reference="learner"),
    )
    try:
        batch = _trained_batch()
        for _ in range(40):
            group.train_step(batch)
        learner_weights = group.get_weights()
        learner_scores = group.score(batch)  # [B, T] log π at every real position
        config = AdarlConfig()
        write_model(
            group,
            tmp_path / "export",
            config=config,
            codec=build_prompt_codec(config.task, config.rollout, tokenizer),
            source={"step": 40},
        )
    finally:
        group.shutdown()

    learner_model = AutoModelForCausalLM.from_pretrained(tmp_path / "initial").eval()
    learner_model.load_state_dict(learner_weights)
    exported = AutoModelForCausalLM.from_pretrained(tmp_path / "export").eval()
    exported_tokenizer = load_tokenizer(str(tmp_path / "export"))
    # Teacher-forced log-probs of the fixed sequences: the exported model's are the learner's.
    with torch.no_grad():
        logits = exported(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
    scored = torch.log_softmax(logits[:, :-1].float(), dim=-1)
    exported_scores = scored.gather(2, batch.input_ids[:, 1:, None])[..., 0]
    real = batch.attention_mask[:, 1:]
    torch.testing.assert_close(
        exported_scores[real], learner_scores[:, 1:][real], rtol=0, atol=LOGPROB_ATOL
    )
    prompt_ids = [exported_tokenizer(p)["input_ids"] for p in PROMPTS]
    expected = []
    for ids, answer in zip(prompt_ids, RESPONSES, strict=True):
        learner_tokens, margin = _greedy(learner_model, ids)
        assert margin > MIN_MARGIN
        assert _greedy(exported, ids)[0] == learner_tokens
        # Trained to answer: the greedy output is the reinforced response.
        assert exported_tokenizer.decode(learner_tokens, skip_special_tokens=True) == answer
        expected.append(learner_tokens)

    ensure_ray(num_cpus=2)
    engine = spawn_actor(
        VLLMEngine,
        num_cpus=1,
        model_path=str(tmp_path / "export"),
        max_model_len=64,
        max_num_seqs=8,
        kv_cache_memory_bytes=128 * 1024 * 1024,
    )
    requests = [
        GenerationRequest(
            request_id=str(i),
            prompt_token_ids=tuple(ids),
            num_samples=1,
            sampling=SamplingParams(temperature=0.0, max_new_tokens=NEW_TOKENS),
            seed=0,
        )
        for i, ids in enumerate(prompt_ids)
    ]
    responses = [batch.input_ids[i][batch.response_mask[i]].tolist() for i in range(len(PROMPTS))]
    try:
        results = ray.get(engine.generate.remote(requests))
        vllm_scores = ray.get(engine.score.remote([list(ids) for ids in prompt_ids], responses))
    finally:
        ray.kill(engine)
    assert [list(r.completions[0].token_ids) for r in results] == expected
    for i, scores in enumerate(vllm_scores):
        torch.testing.assert_close(
            torch.tensor(scores),
            learner_scores[i][batch.response_mask[i]],
            rtol=0,
            atol=LOGPROB_ATOL,
        )
