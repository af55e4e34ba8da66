"""SimKO in the learner: the chunked output head's top-K log-probs and top-1 flags feed the loss,
and one step equals the textbook step on full logits (test_learner.py's reference)."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from adarl.algo.loss import LossInputs, policy_loss
from adarl.algo.loss_terms import SimKO
from adarl.config.learner import PolicyLossConfig
from adarl.learner import LearnerGroup
from adarl.learner.batching import BatchCounts

from .conftest import small_batch
from .test_learner import ADAM_EPS, LR, MAX_GRAD_NORM, comparable, relative_error

pytestmark = pytest.mark.slow

LOSS = PolicyLossConfig(clip_low=0.2, clip_high=0.28, simko_alpha=0.3, simko_top_k=3)


def _shifted(values: torch.Tensor) -> torch.Tensor:
    """[B, T-1, ...] predictions -> [B, T, ...] at the predicted token's position."""
    pad = [0, 0] * (values.dim() - 2) + [1, 0]
    return torch.nn.functional.pad(values, pad)


def test_a_simko_step_equals_the_textbook_step(tiny_policy_dir: str) -> None:
    batch = small_batch(seed=7)
    model = AutoModelForCausalLM.from_pretrained(tiny_policy_dir, dtype=torch.float32).eval()
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, eps=ADAM_EPS, weight_decay=0.0)
    logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
    logp_all = torch.log_softmax(logits[:, :-1].float(), dim=-1)
    targets = batch.input_ids[:, 1:]
    counts = BatchCounts.of(batch)
    out = policy_loss(
        LossInputs(
            logprobs=_shifted(logp_all.gather(-1, targets[..., None])[..., 0]),
            behaviour_logprobs=batch.behaviour_logprobs,
            advantages=batch.advantages,
            response_mask=batch.response_mask,
            global_num_tokens=counts.num_tokens,
            global_num_sequences=counts.num_sequences,
            entropy=_shifted(-(logp_all.exp() * logp_all).sum(-1)),
            top_logprobs=_shifted(logp_all.topk(3, dim=-1).values),
            is_top1=_shifted(logp_all.argmax(-1) == targets),
        ),
        clip_low=LOSS.clip_low,
        clip_high=LOSS.clip_high,
        terms=(SimKO(alpha=LOSS.simko_alpha),),
    )
    out.loss.backward()
    expected_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_GRAD_NORM))
    optimizer.step()
    expected = {k: v.detach() for k, v in model.named_parameters()}

    group = LearnerGroup(
        in_process=True,
        model_path=tiny_policy_dir,
        zero_stage=1,
        learning_rate=LR,
        adam_eps=ADAM_EPS,
        max_grad_norm=MAX_GRAD_NORM,
        max_tokens_per_micro_batch=40,  # micro-batches
        logprob_chunk_tokens=5,  # the top-K across chunks of the head
        loss=LOSS,
    )
    try:
        result = group.train_step(batch)
        weights = group.get_weights()
    finally:
        group.shutdown()
    assert result.metrics["train/simko_token_fraction"] > 0
    assert result.grad_norm == pytest.approx(expected_norm, rel=1e-5)
    for name, tensor in comparable(weights).items():
        assert relative_error(tensor, expected[name]) < 1e-5, name
