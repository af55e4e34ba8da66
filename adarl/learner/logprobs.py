"""Per-token log-probabilities and entropy of π_T without a [B, T, V] tensor.

The learner's policy is π_T(· | x_<t) = softmax(z_t / T): the model's logits z_t divided by the
temperature T the rollout engines sampled at (adarl/rollout/common.py), so that the PPO ratio,
the KL to the reference and the entropy are all taken against the distribution that sampled.

A causal LM's forward would materialise logits for every position: [B, T, V], then in float32 a
log-softmax of the same size, and its gradient in backward. At 8,192 tokens and a 152k vocabulary
that is about 5 GB per tensor. Here the backbone runs alone (hidden states [B, T, H]); the output
head is applied only at the positions that are scored (training: the response tokens), `c` rows
at a time, and each chunk runs under activation checkpointing: forward keeps only the chunk's
[c] log-probs and entropies, and backward recomputes one chunk's [c, V] logits at a time. Peak
memory of the head is then O(c · V) instead of O(B · T · V) (docs/benchmarks.md, "Learner
memory").

`TokenScorer` wraps an HF causal LM for DeepSpeed: its submodules are the model's own backbone and
head registered under the model's own attribute names, so parameter names, state dicts and
checkpoints are exactly the HF model's, and ZeRO-3's per-module parameter gathering runs on every
chunk (and again on its recomputation) as it does on any submodule call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.utils.checkpoint import checkpoint

# Config attributes of HF models whose logits are not head(hidden) (soft-capping, scaling): the
# generic backbone + head path would silently score a different distribution.
_LOGIT_TRANSFORMS = ("final_logit_softcapping", "logit_scale", "logits_scaling")


def chunked_logprobs_and_entropy(
    hidden: torch.Tensor,  # [N, H] hidden state that predicts each scored token
    targets: torch.Tensor,  # [N] long: the scored tokens
    head: Callable[[torch.Tensor], torch.Tensor],  # [c, H] -> [c, V] logits
    *,
    temperature: float = 1.0,
    chunk_tokens: int = 1024,
    entropy_grad: bool = False,
    top_k: int = 0,
) -> tuple[torch.Tensor, ...]:
    """log softmax(head(h) / T)[target] and the entropy of softmax(head(h) / T), per row: [N]
    float32 each. With `top_k` > 0 also the K largest log-probs of each row ([N, K] float32,
    with gradient: SimKO's top-K candidates) and whether the target is the most likely token
    ([N] bool).

    Rows are processed `chunk_tokens` at a time, each under non-reentrant activation
    checkpointing when gradients are being recorded. The entropy carries a gradient only with
    `entropy_grad` (it is otherwise logged, and must not keep a graph alive).
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if chunk_tokens < 1:
        raise ValueError(f"chunk_tokens must be >= 1, got {chunk_tokens}")
    if hidden.shape[0] != targets.shape[0]:
        raise ValueError(f"hidden has {hidden.shape[0]} rows but targets {targets.shape[0]}")

    if top_k < 0:
        raise ValueError(f"top_k must be >= 0, got {top_k}")

    def score_chunk(h: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        logits = head(h).float()
        if temperature != 1.0:
            logits = logits / temperature
        logp = torch.log_softmax(logits, dim=-1)
        chosen = logp.gather(-1, y.unsqueeze(-1)).squeeze(-1)
        with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
            entropy = -(logp.exp() * logp).sum(dim=-1)
        if not top_k:
            return chosen, entropy
        top = logp.topk(min(top_k, logp.shape[-1]), dim=-1).values
        return chosen, entropy, top, logp.argmax(dim=-1) == y

    recording = torch.is_grad_enabled() and hidden.requires_grad
    parts: list[tuple[torch.Tensor, ...]] = []
    for start in range(0, hidden.shape[0], chunk_tokens):
        h = hidden[start : start + chunk_tokens]
        y = targets[start : start + chunk_tokens]
        if recording:
            parts.append(checkpoint(score_chunk, h, y, use_reentrant=False))
        else:
            parts.append(score_chunk(h, y))
    if not parts:
        empty = hidden.new_zeros(0, dtype=torch.float32)
        if not top_k:
            return empty, empty
        return empty, empty, hidden.new_zeros(0, top_k), torch.zeros(0, dtype=torch.bool)
    return tuple(torch.cat(columns) for columns in zip(*parts, strict=True))


def _scatter_to_positions(values: torch.Tensor, scored: torch.Tensor) -> torch.Tensor:
    """[N, ...] values of the True entries of `scored` [B, T-1] -> [B, T, ...], 0 elsewhere
    (shifted by one: the value predicted from position t-1 belongs to the token at t, as in
    adarl.types)."""
    out = values.new_zeros((*scored.shape, *values.shape[1:]))
    out[scored] = values
    pad = [0, 0] * (values.dim() - 1) + [1, 0]
    return torch.nn.functional.pad(out, pad)


class TokenScorer(torch.nn.Module):
    """An HF causal LM whose forward returns per-token log π_T and entropy at chosen positions.

    Built from a model that is exactly a backbone (`model.<base_model_prefix>`) plus an output
    head (`get_output_embeddings()`), as Qwen2/Qwen3/Llama/Mistral `...ForCausalLM` are. The two
    are registered here under the model's own names (parameter names unchanged); the model
    itself stays reachable as `hf_model` (config, save_pretrained, embeddings).
    """

    def __init__(
        self, model: torch.nn.Module, *, temperature: float = 1.0, chunk_tokens: int = 1024
    ) -> None:
        super().__init__()
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0 (the rollouts'), got {temperature}")
        if chunk_tokens < 1:
            raise ValueError(f"chunk_tokens must be >= 1, got {chunk_tokens}")
        name = type(model).__name__
        prefix = getattr(model, "base_model_prefix", "")
        backbone = getattr(model, prefix, None) if prefix else None
        head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
        children = dict(model.named_children())
        head_names = [n for n, child in children.items() if child is head]
        if backbone is None or head is None or not head_names:
            raise ValueError(
                f"{name} is not a backbone + output head causal LM (no `{prefix or '?'}` base "
                "model or no get_output_embeddings()); adarl's learner supports HF "
                "...ForCausalLM models such as Qwen2ForCausalLM"
            )
        if set(children) != {prefix, head_names[0]}:
            raise ValueError(
                f"{name} has modules {sorted(children)} besides its backbone `{prefix}` and head "
                f"`{head_names[0]}`; adarl's learner computes logits as head(backbone(x)) and "
                "would skip them"
            )
        config = getattr(model, "config", None)
        for key in _LOGIT_TRANSFORMS:
            value = getattr(config, key, None)
            if value not in (None, 0, 0.0, 1, 1.0):
                raise ValueError(
                    f"{name} transforms its logits ({key}={value}); adarl's learner computes "
                    "logits as head(backbone(x)) and does not support it"
                )
        self.add_module(prefix, backbone)
        self.add_module(head_names[0], head)
        self._backbone_name = prefix
        self._head_name = head_names[0]
        self.temperature = float(temperature)
        self.chunk_tokens = int(chunk_tokens)
        object.__setattr__(self, "hf_model", model)  # not a submodule: no duplicate names
        self.training = model.training  # the wrapper starts in the model's mode

    @property
    def backbone(self) -> torch.nn.Module:
        return self.get_submodule(self._backbone_name)

    @property
    def head(self) -> torch.nn.Module:
        return self.get_submodule(self._head_name)

    def forward(
        self,
        input_ids: torch.Tensor,  # [B, T] long
        attention_mask: torch.Tensor,  # [B, T] (1 on real tokens, right-padded)
        score_mask: torch.Tensor,  # [B, T] bool: positions whose token is scored
        *,
        entropy_grad: bool = False,
        top_k: int = 0,
    ) -> tuple[torch.Tensor, ...]:
        """log π_T(x_t | x_<t) and H(π_T(· | x_<t)) at position t where `score_mask` is True, 0
        elsewhere ([B, T] float32 each). Position 0 has no prefix and is never scored. With
        `top_k` > 0 also the K largest log-probs at each scored position ([B, T, K], 0
        elsewhere) and whether x_t is the most likely token there ([B, T] bool)."""
        if score_mask.shape != input_ids.shape:
            raise ValueError(
                f"score_mask has shape {tuple(score_mask.shape)}, input_ids "
                f"{tuple(input_ids.shape)}"
            )
        outputs: Any = self.backbone(
            input_ids=input_ids, attention_mask=attention_mask, use_cache=False
        )
        hidden = outputs.last_hidden_state if hasattr(outputs, "last_hidden_state") else outputs[0]
        scored = score_mask[:, 1:].bool()
        scores = chunked_logprobs_and_entropy(
            hidden[:, :-1][scored],
            input_ids[:, 1:][scored],
            self.head,
            temperature=self.temperature,
            chunk_tokens=self.chunk_tokens,
            entropy_grad=entropy_grad,
            top_k=top_k,
        )
        return tuple(_scatter_to_positions(values, scored) for values in scores)


def enable_activation_checkpointing(model: torch.nn.Module) -> int:
    """Gradient checkpointing of `model`'s transformer layers (HF's mechanism, non-reentrant).

    HF checkpoints a layer only while that layer is in training mode. The learner keeps the model
    in evaluation mode (no dropout: its log-probs must be the engines' policy), so only the layer
    objects themselves are flagged as training; their submodules (attention, dropout) stay in
    evaluation mode. Returns the number of checkpointed layers; call again after any `.eval()`.
    """
    from transformers.modeling_layers import GradientCheckpointingLayer

    if not getattr(model, "supports_gradient_checkpointing", False):
        raise ValueError(
            f"{type(model).__name__} does not support gradient checkpointing; set "
            "learner.activation_checkpointing=false"
        )
    if not getattr(model, "is_gradient_checkpointing", False):
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    layers = [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer)]
    if not layers:
        raise ValueError(
            f"{type(model).__name__} has no checkpointable layers; set "
            "learner.activation_checkpointing=false"
        )
    for layer in layers:
        layer.training = True  # this module only, not its children (see the docstring)
    return len(layers)
