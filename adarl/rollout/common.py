"""Conventions every engine shares: request validation, per-sample seeds, weight checks.

Log-probability convention (all engines): `Completion.logprobs[i]` is log q(token_ids[i]), q the
distribution the token was actually drawn from: softmax(logits / T) at the request's temperature
T, restricted to the top-k / top-p set when those are on and renormalised (vLLM calls this
`logprobs_mode="processed_logprobs"`). Greedy requests (T = 0) report the temperature-1 log-prob.
Training rollouts never truncate (`RolloutConfig.validate` refuses top_p < 1 and top_k > 0, which
the learner cannot reproduce) and sample at T > 0, so for them q = π_T = softmax(logits / T): the
distribution the learner recomputes at the same T (`Learner(temperature=...)`), and the PPO ratio
and the KL compare like with like, as in verl. `score(..., temperature=T)` is the teacher-forced
log π_T(response_t | prompt, response_<t) (never truncated).

Seeds: sample `i` of a request with seed `s` is drawn from a generator seeded with
`sample_seed(s, i)`. The request seed is scrambled first, because vLLM seeds sample `i` with
`seed + i`: passing raw seeds, requests seeded 7 and 8 would share all but one sample.
Results depend only on the request (not on which engine of a pool serves it).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from adarl.types import GenerationRequest

_MASK_63 = (1 << 63) - 1


def scrambled_seed(seed: int) -> int:
    """SplitMix64 finaliser of `seed`, truncated to 62 bits (room for `+ sample_index`)."""
    z = (seed + 0x9E3779B97F4A7C15) & ((1 << 64) - 1)
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & ((1 << 64) - 1)
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & ((1 << 64) - 1)
    return (z ^ (z >> 31)) >> 2


def sample_seed(seed: int, sample_index: int) -> int:
    return (scrambled_seed(seed) + sample_index) & _MASK_63


def validate_requests(requests: Sequence[GenerationRequest], *, max_model_len: int) -> None:
    """Raise ValueError naming the request and the fix for anything an engine cannot serve."""
    seen: set[str] = set()
    for request in requests:
        name = f"generation request {request.request_id!r}"
        if request.request_id in seen:
            raise ValueError(f"{name} appears twice in one batch; request ids must be unique")
        seen.add(request.request_id)
        if not request.prompt_token_ids:
            raise ValueError(f"{name} has an empty prompt; tokenise the prompt first")
        if request.num_samples < 1:
            raise ValueError(f"{name} asks for {request.num_samples} samples; ask for >= 1")
        sampling = request.sampling
        if sampling.max_new_tokens < 1:
            raise ValueError(f"{name}: sampling.max_new_tokens must be >= 1")
        if sampling.temperature < 0:
            raise ValueError(f"{name}: sampling.temperature must be >= 0 (0 = greedy)")
        if not 0 < sampling.top_p <= 1:
            raise ValueError(f"{name}: sampling.top_p must be in (0, 1]")
        if sampling.top_k < 0:
            raise ValueError(f"{name}: sampling.top_k must be >= 0 (0 = disabled)")
        if len(request.prompt_token_ids) >= max_model_len:
            raise ValueError(
                f"{name}: prompt has {len(request.prompt_token_ids)} tokens but the engine's "
                f"max_model_len is {max_model_len}; shorten the prompt or raise max_model_len"
            )


def validate_score_inputs(
    prompt_token_ids: Sequence[Sequence[int]],
    response_token_ids: Sequence[Sequence[int]],
    *,
    max_model_len: int,
    temperature: float = 1.0,
) -> None:
    if not temperature > 0:
        raise ValueError(
            f"score: temperature must be > 0 (the policy is softmax(logits / T)), got {temperature}"
        )
    if len(prompt_token_ids) != len(response_token_ids):
        raise ValueError(
            f"score: {len(prompt_token_ids)} prompts but {len(response_token_ids)} responses"
        )
    for index, (prompt, response) in enumerate(
        zip(prompt_token_ids, response_token_ids, strict=True)
    ):
        if not prompt:
            raise ValueError(f"score: prompt {index} is empty; every response needs a prefix")
        if len(prompt) + len(response) > max_model_len:
            raise ValueError(
                f"score: pair {index} has {len(prompt) + len(response)} tokens, more than "
                f"max_model_len={max_model_len}"
            )


def check_weight_names(
    expected: Iterable[str], given: Iterable[str], *, optional: Iterable[str] = ()
) -> None:
    """A full update must name exactly the model's tensors; `optional` names (tied copies such
    as `lm_head.weight` of a tied-embedding model) may be present or absent."""
    optional_set = set(optional)
    expected_set, given_set = set(expected), set(given)
    unexpected = sorted(given_set - expected_set - optional_set)
    missing = sorted(expected_set - given_set - optional_set)
    if unexpected or missing:
        raise ValueError(
            "update_weights needs the model's full HF-named state dict: "
            f"missing {missing[:5]}{'...' if len(missing) > 5 else ''}, "
            f"unexpected {unexpected[:5]}{'...' if len(unexpected) > 5 else ''}"
        )


def engine_metrics(*, samples: int, tokens: int, busy_s: float) -> dict[str, float]:
    """An engine's lifetime counters, named alike for every engine."""
    return {
        "perf/rollout_samples_total": float(samples),
        "perf/rollout_tokens_total": float(tokens),
        "timing/rollout_busy_s": busy_s,
    }
