"""Chunked log-probs and entropy (adarl/learner/logprobs.py) against the full-logits textbook.

The reference materialises the [B, T, V] logits of a small random Qwen2 and takes
log_softmax(logits / T) at every position; `TokenScorer` must give the same values and the same
parameter gradients (fp32, 1e-5) for any chunk size, while never saving a [·, V] tensor for
backward outside its per-chunk checkpoints.
"""

from __future__ import annotations

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from adarl.learner.logprobs import (
    TokenScorer,
    chunked_logprobs_and_entropy,
    enable_activation_checkpointing,
)

VOCAB = 257  # larger than every other dimension, so a [·, V] tensor is recognisable
TOLERANCE = 1e-5


def small_model(seed: int = 0) -> Qwen2ForCausalLM:
    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        tie_word_embeddings=False,
    )
    model = Qwen2ForCausalLM(config).float().eval()
    with torch.no_grad():  # sharper than the init's near-uniform outputs: entropies differ
        model.lm_head.weight.mul_(8.0)
    return model


def small_batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded rows of lengths 13, 9, 6; responses start at 4, 5, 2: 16 scored tokens."""
    generator = torch.Generator().manual_seed(1)
    input_ids = torch.randint(0, VOCAB, (3, 13), generator=generator)
    lengths, starts = (13, 9, 6), (4, 5, 2)
    positions = torch.arange(13)
    attention_mask = torch.stack([positions < n for n in lengths]).long()
    score_mask = torch.stack(
        [(positions >= s) & (positions < n) for s, n in zip(starts, lengths, strict=True)]
    )
    return input_ids, attention_mask, score_mask


def reference(
    model: Qwen2ForCausalLM,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    temperature: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The unchunked textbook: [B, T, V] logits, log_softmax(logits / T), shifted by one."""
    logits = model(input_ids=input_ids, attention_mask=attention_mask).logits.float()
    logp = torch.log_softmax(logits[:, :-1] / temperature, dim=-1)
    chosen = logp.gather(-1, input_ids[:, 1:, None]).squeeze(-1)
    entropy = -(logp.exp() * logp).sum(-1)
    pad = torch.nn.functional.pad
    return pad(chosen, (1, 0)), pad(entropy, (1, 0))


def gradients(model: torch.nn.Module, loss: torch.Tensor) -> dict[str, torch.Tensor]:
    model.zero_grad()
    loss.backward()
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def weighted_loss(
    logprobs: torch.Tensor, entropy: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    # Arbitrary fixed per-token weights, so every token's gradient counts differently.
    weights = torch.linspace(-1.0, 1.5, mask.numel()).reshape(mask.shape)
    return (weights * logprobs)[mask].sum() + 0.3 * (weights.flip(1) * entropy)[mask].sum()


@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("chunk_tokens", [1, 5, 16, 1000])  # 5 does not divide 16 tokens
def test_chunked_values_and_gradients_equal_the_full_logits(
    chunk_tokens: int, temperature: float
) -> None:
    model = small_model()
    input_ids, attention_mask, mask = small_batch()
    expected_logp, expected_entropy = reference(model, input_ids, attention_mask, temperature)
    expected_grads = gradients(model, weighted_loss(expected_logp, expected_entropy, mask))

    scorer = TokenScorer(model, temperature=temperature, chunk_tokens=chunk_tokens)
    logp, entropy = scorer(input_ids, attention_mask, mask, entropy_grad=True)
    torch.testing.assert_close(logp[mask], expected_logp[mask], atol=TOLERANCE, rtol=0)
    torch.testing.assert_close(entropy[mask], expected_entropy[mask], atol=TOLERANCE, rtol=0)
    assert not logp[~mask].any() and not entropy[~mask].any()  # unscored positions are 0
    grads = gradients(model, weighted_loss(logp, entropy, mask))
    assert grads.keys() == expected_grads.keys()
    for name, grad in grads.items():
        torch.testing.assert_close(grad, expected_grads[name], atol=TOLERANCE, rtol=TOLERANCE)
    assert max(g.abs().max() for g in grads.values()) > 1e-2  # not vacuously small


def test_temperature_changes_the_logprobs() -> None:
    model = small_model()
    input_ids, attention_mask, mask = small_batch()
    with torch.no_grad():
        at_1 = TokenScorer(model, temperature=1.0)(input_ids, attention_mask, mask)[0]
        at_07 = TokenScorer(model, temperature=0.7)(input_ids, attention_mask, mask)[0]
    assert (at_07 - at_1)[mask].abs().max() > 0.1
    expected = reference(model, input_ids, attention_mask, 0.7)[0]
    torch.testing.assert_close(at_07[mask], expected[mask], atol=TOLERANCE, rtol=0)


def test_entropy_has_no_gradient_unless_asked() -> None:
    model = small_model()
    input_ids, attention_mask, mask = small_batch()
    logp, entropy = TokenScorer(model)(input_ids, attention_mask, mask)
    assert logp.requires_grad and not entropy.requires_grad


def _saved_vocab_sized(run: object) -> int:
    """Elements of every tensor autograd saves for backward whose last dimension is V (outside
    checkpointed regions, whose own hooks take precedence)."""
    saved = 0

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        nonlocal saved
        if tensor.dim() >= 2 and tensor.shape[-1] == VOCAB:
            saved += tensor.numel()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        run()  # type: ignore[operator]
    return saved


def test_backward_keeps_no_vocabulary_sized_tensor() -> None:
    model = small_model()
    input_ids, attention_mask, mask = small_batch()
    scorer = TokenScorer(model, chunk_tokens=4)
    assert _saved_vocab_sized(lambda: scorer(input_ids, attention_mask, mask)) == 0
    # The full-logits reference keeps [B, T, V]-sized tensors: the probe can see them.
    full = _saved_vocab_sized(lambda: reference(model, input_ids, attention_mask, 1.0))
    assert full >= input_ids.numel() * VOCAB // 2


def test_chunk_function_checks_its_inputs() -> None:
    head = torch.nn.Linear(4, VOCAB)
    with pytest.raises(ValueError, match="temperature must be > 0"):
        chunked_logprobs_and_entropy(torch.zeros(2, 4), torch.zeros(2).long(), head, temperature=0)
    with pytest.raises(ValueError, match="chunk_tokens must be >= 1"):
        chunked_logprobs_and_entropy(torch.zeros(2, 4), torch.zeros(2).long(), head, chunk_tokens=0)
    logp, entropy = chunked_logprobs_and_entropy(torch.zeros(0, 4), torch.zeros(0).long(), head)
    assert logp.shape == entropy.shape == (0,)


def test_models_with_transformed_logits_are_refused() -> None:
    model = small_model()
    model.config.final_logit_softcapping = 30.0
    with pytest.raises(ValueError, match="final_logit_softcapping"):
        TokenScorer(model)


def test_parameter_names_are_the_hf_models() -> None:
    model = small_model()
    scorer = TokenScorer(model)
    assert [n for n, _ in scorer.named_parameters()] == [n for n, _ in model.named_parameters()]
    assert scorer.state_dict().keys() == model.state_dict().keys()
    assert scorer.hf_model is model


def test_activation_checkpointing_recomputes_layers_with_equal_gradients() -> None:
    model = small_model()
    input_ids, attention_mask, mask = small_batch()
    scorer = TokenScorer(model, chunk_tokens=5)
    calls = 0

    def count(*_: object) -> None:
        nonlocal calls
        calls += 1

    # A pre-hook: non-reentrant recomputation stops once the saved tensors are rebuilt, before
    # the module returns, so a forward (post) hook would not see the second run.
    model.model.layers[0].mlp.register_forward_pre_hook(count)
    plain = gradients(model, weighted_loss(*scorer(input_ids, attention_mask, mask), mask))
    assert calls == 1
    assert enable_activation_checkpointing(model) == 2
    calls = 0
    checkpointed = gradients(model, weighted_loss(*scorer(input_ids, attention_mask, mask), mask))
    assert calls == 2  # the layer ran again in backward: its activations were not kept
    assert not model.model.layers[0].self_attn.training  # submodules stay in eval mode
    for name, grad in checkpointed.items():
        torch.testing.assert_close(grad, plain[name], atol=TOLERANCE, rtol=TOLERANCE)
