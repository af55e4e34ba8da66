"""The transformers engine: batched sampling with a KV cache and per-token log-probabilities.

A hand-written decode loop instead of `model.generate`, for three reasons: every sample gets its
own seeded `torch.Generator` (so a sample does not depend on its batch neighbours' random draws),
the log-probability of each sampled token is read from the very distribution that drew it (see
`adarl.rollout.common`), and finish reasons are exact.

Sampling per step: logits → /temperature → top-k → top-p (both as -inf logits) → log-softmax:
the sampling distribution q, whose log q(token) is returned → the exponential-race draw
`argmax(q / e)`, e ~ Exp(1) from the sample's generator (an exact draw from q, also what vLLM's
sampler does). Temperature 0 is greedy: argmax of the raw logits, log-prob at temperature 1.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

import torch
from transformers import AutoModelForCausalLM, PreTrainedTokenizerBase

from adarl.models.tokenizer_loading import load_tokenizer
from adarl.rollout.common import (
    check_weight_names,
    engine_metrics,
    sample_seed,
    validate_requests,
    validate_score_inputs,
)
from adarl.types import (
    Completion,
    FinishReason,
    GenerationRequest,
    GenerationResult,
    SamplingParams,
)


@dataclass
class _Row:
    """One sequence being sampled: sample `sample_index` of request `request_index`."""

    request_index: int
    sample_index: int
    prompt: tuple[int, ...]
    sampling: SamplingParams
    budget: int  # new tokens allowed (max_new_tokens capped by the model length)
    generator: torch.Generator
    tokens: list[int]
    logprobs: list[float]
    finish: FinishReason | None = None


class HFEngine:
    """`RolloutEngine` over a transformers causal LM (CPU or one GPU)."""

    def __init__(
        self,
        *,
        model_path: str,
        dtype: str = "float32",
        device: str = "cpu",
        max_model_len: int | None = None,
        max_batch_sequences: int = 256,
        num_threads: int | None = 1,
    ) -> None:
        """`model_path`: a directory or hub name (resolve built-ins with `resolve_model_path`).
        `max_model_len`: longest prompt + response; default the model's max positions.
        `max_batch_sequences`: sequences decoded together (bounds memory).
        `num_threads`: torch CPU threads for this process (None leaves the setting alone)."""
        if num_threads is not None:
            torch.set_num_threads(num_threads)
        if max_batch_sequences < 1:
            raise ValueError(f"max_batch_sequences must be >= 1, got {max_batch_sequences}")
        self._device = torch.device(device)
        self._model = AutoModelForCausalLM.from_pretrained(model_path, dtype=getattr(torch, dtype))
        self._model.to(self._device).eval()
        self._tokenizer: PreTrainedTokenizerBase = load_tokenizer(model_path)
        positions = int(getattr(self._model.config, "max_position_embeddings", 1 << 30))
        self._max_model_len = min(max_model_len or positions, positions)
        self._max_batch_sequences = max_batch_sequences
        eos = self._model.generation_config.eos_token_id
        if eos is None:
            eos = self._tokenizer.eos_token_id
        self._eos_token_ids: frozenset[int] = frozenset(
            eos if isinstance(eos, list) else [] if eos is None else [eos]
        )
        self._pad_token_id = int(
            self._tokenizer.pad_token_id
            if self._tokenizer.pad_token_id is not None
            else next(iter(self._eos_token_ids), 0)
        )
        self._version = 0
        self._samples = 0
        self._tokens = 0
        self._busy_s = 0.0

    @property
    def tokenizer(self) -> PreTrainedTokenizerBase:
        return self._tokenizer

    @property
    def model(self) -> torch.nn.Module:
        return self._model

    # -- RolloutEngine -----------------------------------------------------------------------

    @torch.inference_mode()
    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        validate_requests(requests, max_model_len=self._max_model_len)
        start = time.perf_counter()
        rows = [
            _Row(
                request_index=r,
                sample_index=i,
                prompt=request.prompt_token_ids,
                sampling=request.sampling,
                budget=min(
                    request.sampling.max_new_tokens,
                    self._max_model_len - len(request.prompt_token_ids),
                ),
                generator=torch.Generator(device=self._device).manual_seed(
                    sample_seed(request.seed, i)
                ),
                tokens=[],
                logprobs=[],
            )
            for r, request in enumerate(requests)
            for i in range(request.num_samples)
        ]
        for chunk_start in range(0, len(rows), self._max_batch_sequences):
            self._decode(rows[chunk_start : chunk_start + self._max_batch_sequences])
        completions: list[list[Completion]] = [[] for _ in requests]
        for row in rows:
            assert row.finish is not None
            completions[row.request_index].append(
                Completion(
                    token_ids=tuple(row.tokens),
                    logprobs=tuple(row.logprobs),
                    finish_reason=row.finish,
                    text=self._tokenizer.decode(row.tokens, skip_special_tokens=True),
                )
            )
            self._tokens += len(row.tokens)
        self._samples += len(rows)
        self._busy_s += time.perf_counter() - start
        return [
            GenerationResult(
                request_id=request.request_id,
                completions=tuple(completions[r]),
                weight_version=self._version,
            )
            for r, request in enumerate(requests)
        ]

    @torch.inference_mode()
    def score(
        self,
        prompt_token_ids: Sequence[Sequence[int]],
        response_token_ids: Sequence[Sequence[int]],
        *,
        temperature: float = 1.0,
    ) -> list[list[float]]:
        validate_score_inputs(
            prompt_token_ids,
            response_token_ids,
            max_model_len=self._max_model_len,
            temperature=temperature,
        )
        scores: list[list[float]] = []
        pairs = list(zip(prompt_token_ids, response_token_ids, strict=True))
        for chunk_start in range(0, len(pairs), self._max_batch_sequences):
            chunk = pairs[chunk_start : chunk_start + self._max_batch_sequences]
            length = max(len(p) + len(r) for p, r in chunk)
            input_ids = torch.full((len(chunk), length), self._pad_token_id, dtype=torch.long)
            attention_mask = torch.zeros((len(chunk), length), dtype=torch.long)
            for row, (prompt, response) in enumerate(chunk):
                sequence = list(prompt) + list(response)
                input_ids[row, : len(sequence)] = torch.tensor(sequence)
                attention_mask[row, : len(sequence)] = 1
            logits = self._model(
                input_ids=input_ids.to(self._device),
                attention_mask=attention_mask.to(self._device),
            ).logits.float()
            logprobs = torch.log_softmax(logits / temperature, dim=-1).cpu()
            for row, (prompt, response) in enumerate(chunk):
                # Token at position t is scored by the logits at t - 1.
                positions = torch.arange(len(prompt) - 1, len(prompt) + len(response) - 1)
                targets = torch.tensor(list(response), dtype=torch.long)
                scores.append(logprobs[row, positions, targets].tolist())
        return scores

    def update_weights(self, version: int, weights: Mapping[str, torch.Tensor]) -> None:
        self.load_weight_stream(version, list(weights), iter(weights.items()))

    def load_weight_stream(
        self,
        version: int,
        names: Collection[str],
        weights: Iterable[tuple[str, torch.Tensor]],
    ) -> None:
        """Load a full update given as a stream of (name, tensor): `names` are every name the
        stream will yield (checked first); each tensor is copied in as it arrives, so a stream
        received bucket by bucket never holds more than a bucket besides the model."""
        state = self._model.state_dict()
        tied = ["lm_head.weight"] if self._model.config.tie_word_embeddings else []
        check_weight_names(state.keys(), names, optional=tied)
        seen = 0
        with torch.no_grad():
            for name, tensor in weights:
                seen += 1
                if name in state:
                    state[name].copy_(tensor.detach())
                del tensor  # let go of this bucket before the stream receives the next one
        if seen != len(names):
            raise RuntimeError(
                f"the weight stream yielded {seen} tensors but announced {len(names)}; the "
                "engine may hold a mix of versions: push the weights again"
            )
        self._version = int(version)

    def weight_version(self) -> int:
        return self._version

    def metrics(self) -> dict[str, float]:
        return engine_metrics(samples=self._samples, tokens=self._tokens, busy_s=self._busy_s)

    # -- decoding ----------------------------------------------------------------------------

    def _decode(self, rows: list[_Row]) -> None:
        """Sample `rows` to completion in one KV-cached batch (prompts left-padded)."""
        batch = len(rows)
        prompt_len = max(len(row.prompt) for row in rows)
        input_ids = torch.full((batch, prompt_len), self._pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros((batch, prompt_len), dtype=torch.long)
        for i, row in enumerate(rows):
            input_ids[i, prompt_len - len(row.prompt) :] = torch.tensor(row.prompt)
            attention_mask[i, prompt_len - len(row.prompt) :] = 1
        input_ids, attention_mask = input_ids.to(self._device), attention_mask.to(self._device)
        position_ids = (attention_mask.cumsum(dim=1) - 1).clamp(min=0)
        temperature = torch.tensor([row.sampling.temperature for row in rows], device=self._device)
        past = None
        for _ in range(max(row.budget for row in rows)):
            output = self._model(
                input_ids=input_ids,
                attention_mask=attention_mask,
                position_ids=position_ids,
                past_key_values=past,
                use_cache=True,
            )
            past = output.past_key_values
            logits = output.logits[:, -1, :].float()
            next_tokens, chosen_logprobs = self._sample(logits, rows, temperature)
            chosen = chosen_logprobs.tolist()
            for i, row in enumerate(rows):
                if row.finish is not None:
                    continue
                token = int(next_tokens[i])
                row.tokens.append(token)
                row.logprobs.append(chosen[i])
                if token in self._eos_token_ids or token in row.sampling.stop_token_ids:
                    row.finish = FinishReason.STOP
                elif len(row.tokens) >= row.budget:
                    row.finish = FinishReason.LENGTH
            if all(row.finish is not None for row in rows):
                break
            input_ids = next_tokens[:, None]
            position_ids = position_ids[:, -1:] + 1
            attention_mask = torch.cat([attention_mask, attention_mask.new_ones((batch, 1))], 1)

    def _sample(
        self, logits: torch.Tensor, rows: list[_Row], temperature: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(next token [B], its log-probability under the distribution that drew it [B])."""
        greedy = temperature == 0
        scaled = logits / torch.where(greedy, 1.0, temperature)[:, None]
        vocab = scaled.shape[-1]
        # Greedy rows are not truncated (vLLM resets their top-k/top-p too): their log-prob is the
        # temperature-1 policy's.
        top_k = torch.tensor(
            [
                row.sampling.top_k
                if 0 < row.sampling.top_k < vocab and row.sampling.temperature > 0
                else vocab
                for row in rows
            ],
            device=scaled.device,
        )
        if bool((top_k < vocab).any()):
            kth = scaled.sort(dim=-1, descending=True).values.gather(1, (top_k - 1)[:, None])
            scaled = scaled.masked_fill(scaled < kth, -torch.inf)
        top_p = torch.tensor(
            [row.sampling.top_p if row.sampling.temperature > 0 else 1.0 for row in rows],
            device=scaled.device,
        )
        if bool((top_p < 1).any()):
            sorted_probs, order = torch.softmax(scaled, dim=-1).sort(dim=-1, descending=True)
            # Drop a token once the mass strictly before it already reaches top_p.
            drop_sorted = (sorted_probs.cumsum(dim=-1) - sorted_probs) >= top_p[:, None]
            drop = torch.zeros_like(drop_sorted).scatter(1, order, drop_sorted)
            scaled = scaled.masked_fill(drop, -torch.inf)
        logprobs = torch.log_softmax(scaled, dim=-1)  # the sampling distribution, renormalised
        noise = torch.stack(
            [
                torch.empty(vocab, device=scaled.device).exponential_(generator=row.generator)
                for row in rows
            ]
        )
        sampled = (logprobs.exp() / noise).argmax(dim=-1)
        tokens = torch.where(greedy, logits.argmax(dim=-1), sampled)
        return tokens, logprobs.gather(1, tokens[:, None])[:, 0]
