"""One in-process learner (DeepSpeed, world size 1) against plain PyTorch and itself.

The reference for "what one step should do" is written out here with transformers + torch only:
the same model, `policy_loss` over the whole batch at once, `clip_grad_norm_`, `torch.optim.AdamW`.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from transformers import AutoModelForCausalLM

from adarl.algo.loss import LossInputs, TermRows, policy_loss
from adarl.algo.loss_terms import Rehearsal
from adarl.config.learner import PolicyLossConfig
from adarl.learner import LearnerGroup
from adarl.learner.batching import BatchCounts
from adarl.learner.engine import EngineSettings, load_scorer
from adarl.learner.synthetic import with_behaviour_logprobs
from adarl.types import (
    Completion,
    FinishReason,
    Rollout,
    ScoredRollout,
    StatisticsRequest,
    TrainBatch,
)

from .conftest import small_batch

LR = 1e-2
# A large ε makes AdamW's update lr·g/(√v + ε) close to linear in g for these gradients
# (|g| ≲ 1e-3): comparing weights then compares gradients, scale included, and is not thrown
# off by coordinates with |g| ≈ ε, where Adam turns round-off into O(lr) differences.
ADAM_EPS = 1e-3
MAX_GRAD_NORM = 0.02  # below the batches' gradient norms (≈0.04-0.1): clipping is active


def token_logprobs(
    logits: torch.Tensor, input_ids: torch.Tensor, temperature: float = 1.0
) -> torch.Tensor:
    """Textbook log softmax(logits / T)[token], from all [B, T, V] logits, shifted by one."""
    logp = torch.log_softmax(logits[:, :-1].float() / temperature, dim=-1)
    return torch.nn.functional.pad(logp.gather(-1, input_ids[:, 1:, None]).squeeze(-1), (1, 0))


def token_entropy(logits: torch.Tensor) -> torch.Tensor:
    logp = torch.log_softmax(logits[:, :-1].float(), dim=-1)
    return torch.nn.functional.pad(-(logp.exp() * logp).sum(-1), (1, 0))


def relative_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    """‖a - e‖/‖e‖ per tensor."""
    return float((actual.double() - expected.double()).norm() / expected.double().norm())


def comparable(weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """All weights except the attention key biases. Their exact gradient is zero (softmax is
    invariant to adding q·b_k to every score of a query), so they receive only round-off, which
    Adam normalises into steps of arbitrary sign: two runs differ there by O(lr·round-off/ε)."""
    return {k: v for k, v in weights.items() if not k.endswith("k_proj.bias")}


def _plain_reference_steps(
    model_dir: str, batches: list[TrainBatch], loss: PolicyLossConfig
) -> tuple[list[float], dict[str, torch.Tensor]]:
    """(pre-clip gradient norm per step, final weights) of the textbook implementation. Batches
    with rehearsal rows get their term against a frozen copy of the initial policy."""
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    reference = None
    if any(batch.term_rows for batch in batches):
        reference = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, eps=ADAM_EPS, weight_decay=0.0)
    norms = []
    for batch in batches:
        counts = BatchCounts.of(batch)
        logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
        ref_logprobs = None
        if reference is not None:
            with torch.no_grad():
                ref = reference(input_ids=batch.input_ids, attention_mask=batch.attention_mask)
            ref_logprobs = token_logprobs(ref.logits, batch.input_ids)
        rows = {
            name: TermRows(rows, *counts.term_rows[name]) for name, rows in batch.term_rows.items()
        }
        out = policy_loss(
            LossInputs(
                logprobs=token_logprobs(logits, batch.input_ids),
                behaviour_logprobs=batch.behaviour_logprobs,
                advantages=batch.advantages,
                response_mask=batch.response_mask,
                global_num_tokens=counts.num_tokens,
                global_num_sequences=counts.num_sequences,
                ref_logprobs=ref_logprobs,
                term_rows=rows,
            ),
            aggregation=loss.aggregation,  # type: ignore[arg-type]
            clip_low=loss.clip_low,
            clip_high=loss.clip_high,
            terms=(Rehearsal(coef=loss.rehearsal_coef),) if rows else (),
        )
        out.loss.backward()
        norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_GRAD_NORM)))
        optimizer.step()
        optimizer.zero_grad()
    return norms, {k: v.detach() for k, v in model.named_parameters()}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("zero_stage", "max_tokens", "aggregation", "chunk_tokens", "checkpointing"),
    [
        (0, 10_000, "token_mean", 1024, False),  # one micro-batch, one log-prob chunk
        (1, 40, "sequence_mean", 5, False),  # ~6 micro-batches per step, gradient accumulation
        (3, 40, "sequence_sum", 3, True),  # ZeRO-3 gathers the head per (recomputed) chunk
    ],
)
def test_steps_equal_plain_pytorch_on_one_big_batch(
    tiny_policy_dir: str,
    zero_stage: int,
    max_tokens: int,
    aggregation: str,
    chunk_tokens: int,
    checkpointing: bool,
) -> None:
    loss = PolicyLossConfig(aggregation=aggregation, clip_low=0.2, clip_high=0.28)
    batches = [small_batch(seed) for seed in range(3)]
    expected_norms, expected_weights = _plain_reference_steps(tiny_policy_dir, batches, loss)
    group = LearnerGroup(
        in_process=True,
        model_path=tiny_policy_dir,
        zero_stage=zero_stage,
        learning_rate=LR,
        adam_eps=ADAM_EPS,
        max_grad_norm=MAX_GRAD_NORM,
        max_tokens_per_micro_batch=max_tokens,
        loss=loss,
        logprob_chunk_tokens=chunk_tokens,
        activation_checkpointing=checkpointing,
    )
    try:
        results = [group.train_step(batch) for batch in batches]
        weights = group.get_weights()
    finally:
        group.shutdown()
    if max_tokens < 100:
        assert results[0].metrics["perf/micro_batches_per_rank"] >= 4
    # fp32 throughout; only summation order differs (micro-batches, ZeRO's flat buffers).
    for result, expected in zip(results, expected_norms, strict=True):
        assert result.grad_norm == pytest.approx(expected, rel=1e-5)
        assert result.grad_norm > MAX_GRAD_NORM  # the clip mattered
    assert weights.keys() == expected_weights.keys()
    for name, tensor in comparable(weights).items():
        assert relative_error(tensor, expected_weights[name]) < 1e-5, name
    # ...while the three steps moved the weights by far more than that.
    initial = AutoModelForCausalLM.from_pretrained(tiny_policy_dir, dtype=torch.float32)
    moved = relative_error(initial.lm_head.weight.detach(), weights["lm_head.weight"])
    assert moved > 1e-2
    assert [r.weight_version.version for r in results] == [1, 2, 3]


@pytest.mark.slow
def test_bf16_zero3_with_reference_model(tiny_policy_dir: str) -> None:
    # bf16 weights and activations (fp32 masters in the optimizer); the KL reference is a frozen,
    # partitioned engine under ZeRO-3.
    group = LearnerGroup(
        in_process=True,
        model_path=tiny_policy_dir,
        zero_stage=3,
        precision="bf16",
        learning_rate=1e-2,
        loss=PolicyLossConfig(kl_coef=0.1, entropy_coef=0.01),
    )
    try:
        initial = group.get_weights()
        steps = [group.train_step(small_batch(seed)) for seed in range(3)]
        weights = group.get_weights()
    finally:
        group.shutdown()
    assert steps[0].metrics["train/kl"] == 0.0  # same bf16 weights on both sides
    assert steps[2].metrics["train/kl"] > 1e-4
    assert all(torch.isfinite(torch.tensor(s.metrics["train/loss"])) for s in steps)
    assert {t.dtype for t in weights.values()} == {torch.bfloat16}
    assert relative_error(weights["lm_head.weight"], initial["lm_head.weight"]) > 1e-3


@pytest.mark.slow
def test_temperature_applies_to_policy_reference_and_entropy(tiny_policy_dir: str) -> None:
    # The learner's policy is softmax(logits / T) at the rollouts' temperature, everywhere.
    temperature = 0.7
    batch = small_batch(seed=5)
    mask = batch.response_mask
    model = AutoModelForCausalLM.from_pretrained(tiny_policy_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
    at_t = token_logprobs(logits, batch.input_ids, temperature)
    at_1 = token_logprobs(logits, batch.input_ids)
    logp = torch.log_softmax(logits[:, :-1] / temperature, dim=-1)
    entropy_at_t = torch.nn.functional.pad(-(logp.exp() * logp).sum(-1), (1, 0))[mask].mean()
    group = LearnerGroup(
        in_process=True,
        model_path=tiny_policy_dir,
        zero_stage=1,
        learning_rate=LR,
        temperature=temperature,
        loss=PolicyLossConfig(kl_coef=0.1, entropy_coef=0.01),
    )
    try:
        scores = group.score(batch)
        step = group.train_step(with_behaviour_logprobs(batch, at_t))
    finally:
        group.shutdown()
    torch.testing.assert_close(scores[mask], at_t[mask], atol=1e-5, rtol=0)
    assert (scores - at_1)[mask].abs().max() > 0.05  # T = 0.7 is not T = 1
    # On-policy at T: ratio 1; the reference scores at T too (KL 0); entropy of π_T.
    assert step.metrics["train/ratio_mean"] == pytest.approx(1.0, abs=1e-5)
    assert step.metrics["train/kl"] == pytest.approx(0.0, abs=1e-7)
    assert step.metrics["train/entropy"] == pytest.approx(float(entropy_at_t), rel=1e-5)


def test_model_loads_in_the_training_precision(tiny_policy_dir: str) -> None:
    for precision, dtype in (("bf16", torch.bfloat16), ("fp32", torch.float32)):
        scorer = load_scorer(tiny_policy_dir, EngineSettings(precision=precision))
        assert {p.dtype for p in scorer.parameters()} == {dtype}
        assert not scorer.training  # no dropout: the learner scores the engines' policy


def test_a_cpu_learner_takes_deepspeed_off_cuda(tiny_policy_dir: str) -> None:
    """DeepSpeed picks CUDA whenever torch sees a GPU and moves the model there; an in-process CPU
    learner on a GPU machine then got CPU inputs against CUDA weights (the embedded default on a
    lent H200, 2026-11-26). Here DeepSpeed is pointed at CUDA as it is there; the CPU learner
    must point it back and step."""
    from deepspeed.accelerator import get_accelerator, set_accelerator
    from deepspeed.accelerator.cuda_accelerator import CUDA_Accelerator

    before = get_accelerator()
    set_accelerator(CUDA_Accelerator())
    try:
        learners = LearnerGroup(in_process=True, model_path=tiny_policy_dir, zero_stage=2)
        try:
            step = learners.train_step(small_batch(0))
            weights = learners.get_weights()
        finally:
            learners.shutdown()
        assert get_accelerator().device_name() == "cpu"
    finally:
        set_accelerator(before)
    assert torch.isfinite(torch.tensor(step.metrics["train/loss"]))
    assert {t.device.type for t in weights.values()} == {"cpu"}


@pytest.fixture(scope="module")
def group(tiny_policy_dir: str) -> Iterator[LearnerGroup]:
    """ZeRO-2 learner with a reference model and an entropy bonus, shared by the tests below.

    Alive from its first use to the end of the module: tests that start their own learner come
    before the first test that uses it (one process group per process)."""
    learners = LearnerGroup(
        in_process=True,
        model_path=tiny_policy_dir,
        zero_stage=2,
        learning_rate=LR,
        lr_warmup_steps=3,
        max_tokens_per_micro_batch=48,
        loss=PolicyLossConfig(kl_coef=0.1, kl_estimator="k3", entropy_coef=0.01),
        logprob_chunk_tokens=4,  # many chunks per micro-batch, one that does not divide
        activation_checkpointing=True,
    )
    yield learners
    learners.shutdown()


def _plain_model(weights: dict[str, torch.Tensor], model_dir: str) -> torch.nn.Module:
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    model.load_state_dict(weights)
    return model


@pytest.mark.slow
def test_prompt_gradient_norms_equal_per_sample_backward(
    group: LearnerGroup, tiny_policy_dir: str
) -> None:
    batch = small_batch(seed=4)
    mask = torch.tensor([True, False, True, True] * 3)
    before = group.get_weights()
    stats = group.prompt_gradient_norms(batch, sample_mask=mask)
    assert group.get_weights().keys() == before.keys()
    for name, tensor in group.get_weights().items():
        assert torch.equal(tensor, before[name]), f"{name} changed"
    # Brute force, as the GVM code does: one backward per sample, norm of embed.weight.grad.
    model = _plain_model(before, tiny_policy_dir)
    expected = torch.full((batch.num_sequences,), float("nan"))
    for row in mask.nonzero().squeeze(1).tolist():
        sample = batch.select([row])
        logits = model(input_ids=sample.input_ids, attention_mask=sample.attention_mask).logits
        nll = -token_logprobs(logits, sample.input_ids)[sample.response_mask].sum()
        model.zero_grad()
        nll.backward()
        expected[row] = model.get_input_embeddings().weight.grad.norm()
    torch.testing.assert_close(stats.sample_norms, expected, rtol=1e-5, atol=0, equal_nan=True)
    for prompt in range(3):
        rows = (batch.prompt_index == prompt) & mask
        assert stats.count[prompt] == 3
        assert stats.mean[prompt] == pytest.approx(float(expected[rows].mean()), rel=1e-5)


@pytest.mark.slow
def test_statistics_request_is_answered_with_per_sample_norms(group: LearnerGroup) -> None:
    """The allocator's StatisticsRequest (GVM's pilot samples) gets, per rollout in order, the
    same norm `prompt_gradient_norms` computes for that sequence (checked against one backward
    per sample above), at the current weights, with the weights unchanged."""
    batch = small_batch(seed=5)
    rollouts = []
    for row in range(batch.num_sequences):
        real = batch.attention_mask[row]
        response = batch.response_mask[row] & real
        tokens = batch.input_ids[row][real].tolist()
        n_prompt = int((real & ~response).sum())
        completion = Completion(
            token_ids=tuple(tokens[n_prompt:]),
            logprobs=(0.0,) * (len(tokens) - n_prompt),
            finish_reason=FinishReason.STOP,
        )
        rollout = Rollout(
            request_id=f"7:p{row}:0",
            prompt_id=f"p{row}",
            prompt_token_ids=tuple(tokens[:n_prompt]),
            completion=completion,
            weight_version=0,
        )
        rollouts.append(ScoredRollout(rollout=rollout, reward=1.0))
    before = group.get_weights()
    reply = group.sample_statistics(
        StatisticsRequest(step=7, kind="gradient_norm", rollouts=tuple(rollouts)), pad_token_id=0
    )
    direct = group.prompt_gradient_norms(
        batch, sample_mask=torch.ones(batch.num_sequences, dtype=torch.bool)
    ).sample_norms
    assert reply.kind == "gradient_norm" and reply.weight_version == group.weight_version().version
    torch.testing.assert_close(torch.tensor(reply.values), direct, rtol=1e-5, atol=0)
    assert all(torch.equal(t, before[n]) for n, t in group.get_weights().items())
    with pytest.raises(ValueError, match="unknown statistics kind"):
        group.sample_statistics(
            StatisticsRequest(step=7, kind="fisher", rollouts=()), pad_token_id=0
        )


@pytest.mark.slow
def test_kl_entropy_warmup_and_checkpoint_resume(
    group: LearnerGroup, tiny_policy_dir: str, tmp_path: pytest.TempPathFactory
) -> None:
    first, second, third = (small_batch(seed) for seed in (10, 11, 12))
    assert group.weight_version().version == 0, "runs on the module's group before any step"
    initial = group.get_weights()
    # Entropy logged = token mean of H under the current weights (computed here by hand).
    model = _plain_model(initial, tiny_policy_dir)
    with torch.no_grad():
        logits = model(input_ids=first.input_ids, attention_mask=first.attention_mask).logits
    entropy = token_entropy(logits)[first.response_mask].mean()
    step1 = group.train_step(first)
    # Policy == reference before the first update: k3(δ = 0) = 0 on every token.
    assert step1.metrics["train/kl"] == pytest.approx(0.0, abs=1e-7)
    assert step1.metrics["train/learning_rate"] == pytest.approx(LR / 3)  # warm-up: 1/3 of LR
    assert step1.metrics["train/entropy"] == pytest.approx(float(entropy), rel=1e-5)
    tag = group.save_checkpoint(tmp_path)
    saved_version = group.weight_version()
    step2 = group.train_step(second)
    step3 = group.train_step(third)
    assert step2.metrics["train/kl"] > 1e-6  # the policy moved away from the reference
    after = group.get_weights()
    # Rewind: model, AdamW moments, LR schedule and version come back exactly.
    group.load_checkpoint(tmp_path, tag=tag)
    assert group.weight_version() == saved_version
    replay2 = group.train_step(second)
    replay3 = group.train_step(third)
    for original, replay in ((step2, replay2), (step3, replay3)):
        assert replay.metrics["train/learning_rate"] == original.metrics["train/learning_rate"]
        assert replay.grad_norm == pytest.approx(original.grad_norm, rel=1e-6)
        assert replay.metrics["train/loss"] == pytest.approx(
            original.metrics["train/loss"], rel=1e-6
        )
    for name, tensor in group.get_weights().items():
        torch.testing.assert_close(tensor, after[name], rtol=1e-6, atol=1e-7)
    # load_checkpoint without a tag takes DeepSpeed's "latest".
    group.load_checkpoint(tmp_path)
    assert group.weight_version() == saved_version


@pytest.mark.slow
def test_on_policy_ratio_is_one_and_staleness_is_reported(group: LearnerGroup) -> None:
    batch = small_batch(seed=20)
    on_policy = with_behaviour_logprobs(batch, group.score(batch))
    on_policy.weight_versions = torch.full(
        (batch.num_sequences,), group.weight_version().version - 1
    )
    result = group.train_step(on_policy)
    assert result.metrics["train/ratio_mean"] == pytest.approx(1.0, abs=1e-5)
    assert result.metrics["train/clip_fraction"] == 0.0
    assert result.metrics["train/mismatch_kl"] == pytest.approx(0.0, abs=1e-9)
    assert result.metrics["train/staleness_mean"] == 1.0


@pytest.mark.slow
def test_hf_export_loads_in_transformers_with_the_learners_weights(
    group: LearnerGroup, tiny_policy_dir: str, tmp_path: pytest.TempPathFactory
) -> None:
    from adarl.models.loading import load_tokenizer

    group.export_hf(tmp_path)
    exported = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32).eval()
    weights = group.get_weights()
    for name, tensor in exported.state_dict().items():
        assert torch.equal(tensor, weights[name]), name
    tokenizer = load_tokenizer(str(tmp_path))
    assert tokenizer.get_vocab() == load_tokenizer(tiny_policy_dir).get_vocab()
    batch = small_batch(seed=30)
    with torch.no_grad():
        logits = exported(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
    exported_logprobs = token_logprobs(logits, batch.input_ids)
    mask = batch.response_mask
    torch.testing.assert_close(exported_logprobs[mask], group.score(batch)[mask])
