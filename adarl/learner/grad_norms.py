"""Per-sample gradient norms for GVM allocation, from one backward pass per micro-batch.

GVM (RLHFlow/GVM; MATH.md) allocates samples with G_i, the mean over prompt i's correct samples
of ‖∇ NLL(sample)‖ restricted to the input-embedding matrix E, NLL being the summed token
negative log-likelihood of the response. The reference code runs one backward per sample.

Here the same quantity comes from ONE backward over a whole micro-batch. With h_{b,t} = E[x_{b,t}]
the embedding lookup output, and sequences independent in the batch (causal attention inside a
row, nothing across rows):

    ∂(Σ_b' NLL_b') / ∂h_{b,t} = ∂NLL_b / ∂h_{b,t}
    ∇_E NLL_b = Σ_t onehot(x_{b,t}) ⊗ ∂NLL_b/∂h_{b,t}      (a [V, H] matrix)

so each sample's embedding gradient is a scatter-add of its own rows of ∂/∂h by token id, and its
Frobenius norm needs only [unique tokens of the row, H] memory, never [B, V, H]. The backward is
taken w.r.t. h only (`torch.autograd.grad`), so no weight gradient is formed or reduced.

Measured cost (docs/benchmarks.md, tiny model, 256 sequences, CPU): 0.4 s for the single pass
vs 1.9-2.0 s for one backward per sample, same norms to 2e-7 relative; inside the learner the pass
costs 0.7-1.1× a training step (a forward and an activation-only backward, no optimizer).
The factor over per-sample backward grows with batch size and on GPUs, where batch-1 passes
leave the device idle.

This is the input path of E. With tied embeddings (lm_head = E) the reference code's
`embed.weight.grad` would also contain the output-layer path; adarl's tiny model is untied, and
for tied models this estimator is the input-path part only (documented deviation).
"""

from __future__ import annotations

import torch


def per_sequence_embedding_grad_norms(
    embedding_grads: torch.Tensor,  # [B, T, H] ∂(Σ_b NLL_b)/∂h at the embedding output
    input_ids: torch.Tensor,  # [B, T] long
    attention_mask: torch.Tensor,  # [B, T] bool, True on real tokens
    *,
    vocab_size: int,
) -> torch.Tensor:  # [B] float32, ‖∇_E NLL_b‖_F
    """‖Σ_t onehot(x_{b,t}) ⊗ g_{b,t}‖_F per row b (see the module docstring)."""
    b, t, h = embedding_grads.shape
    if input_ids.shape != (b, t) or attention_mask.shape != (b, t):
        raise ValueError(
            f"input_ids {tuple(input_ids.shape)} and attention_mask "
            f"{tuple(attention_mask.shape)} must be [B, T] = ({b}, {t})"
        )
    real = attention_mask.bool()
    rows = torch.arange(b, device=input_ids.device).unsqueeze(1).expand(b, t)[real]  # [N]
    keys = rows * vocab_size + input_ids[real]  # [N]: one key per (row, token id)
    unique_keys, inverse = torch.unique(keys, return_inverse=True)  # [U], [N]
    summed = torch.zeros(len(unique_keys), h, dtype=torch.float32, device=embedding_grads.device)
    summed.index_add_(0, inverse, embedding_grads[real].float())  # [U, H] rows of ∇_E NLL_b
    squared = torch.zeros(b, dtype=torch.float32, device=embedding_grads.device)
    squared.index_add_(0, unique_keys // vocab_size, summed.square().sum(dim=1))
    return squared.sqrt()


def response_nll(
    token_logprobs: torch.Tensor,  # [B, T] log π(x_t | x_<t) at response positions
    response_mask: torch.Tensor,  # [B, T] bool
) -> torch.Tensor:  # [B]
    """Summed negative log-likelihood of each row's response tokens."""
    return -torch.where(response_mask, token_logprobs, torch.zeros_like(token_logprobs)).sum(1)
