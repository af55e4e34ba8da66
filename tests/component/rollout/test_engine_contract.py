"""The contract every real engine meets, run against vLLM (CPU build) and the HF engine.

One engine per backend for the whole module (vLLM takes ~10 s to start). Tests that change
weights restore them before returning. The log-prob convention (adarl/rollout/common.py): an
engine reports the log-prob of the distribution that drew the token (temperature, then top-k /
top-p, renormalised), and at T = 0.7 that equals the learner's own log π_T.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from transformers import AutoModelForCausalLM, PreTrainedModel, PreTrainedTokenizerBase

from adarl.learner import LearnerGroup
from adarl.models.loading import load_tokenizer
from adarl.rollout.base import RolloutEngine
from adarl.types import FinishReason, GenerationRequest, GenerationResult, SamplingParams

from ._requests import PROMPTS, make_requests, rollouts_batch

pytestmark = pytest.mark.slow

# Engine log-probs vs a teacher-forced HF forward pass of the same float32 weights. Measured
# max |difference|: 2.4e-6 (vLLM CPU kernels), 1.6e-6 (HF, batched + KV cache vs one pass).
LOGPROB_TOLERANCE = 1e-4


def _make_engine(kind: str, model_path: str) -> RolloutEngine:
    if kind == "vllm":
        from adarl.rollout.vllm_engine import VLLMEngine

        return VLLMEngine(
            model_path=model_path, seed=0, max_model_len=64, kv_cache_memory_bytes=64 << 20
        )
    from adarl.rollout.hf_engine import HFEngine

    return HFEngine(model_path=model_path, max_model_len=64)


@pytest.fixture(scope="module", params=["vllm", "hf"])
def engine(request: pytest.FixtureRequest, tiny_model_path: str) -> Iterator[RolloutEngine]:
    engine = _make_engine(request.param, tiny_model_path)
    yield engine
    del engine


@pytest.fixture(scope="module")
def tokenizer(tiny_model_path: str) -> PreTrainedTokenizerBase:
    return load_tokenizer(tiny_model_path)


@pytest.fixture(scope="module")
def reference(tiny_model_path: str) -> PreTrainedModel:
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32)
    return model.eval()


def sampling_logits(logits: torch.Tensor, temperature: float, top_k: int, top_p: float):
    """[N, V] logits of the distribution a sampler draws from: / T, then top-k, then top-p (the
    smallest set of most likely tokens holding mass ≥ top_p), the rest at -inf."""
    scaled = logits / temperature
    if top_k > 0:
        kth = scaled.topk(top_k, dim=-1).values[:, -1:]
        scaled = scaled.masked_fill(scaled < kth, -torch.inf)
    if top_p < 1.0:
        ascending, order = scaled.sort(dim=-1)
        cumulative = ascending.softmax(dim=-1).cumsum(dim=-1)
        drop = cumulative <= 1 - top_p  # the tail holding at most 1 - top_p of the mass
        drop[:, -1] = False
        scaled = scaled.masked_fill(torch.zeros_like(drop).scatter(1, order, drop), -torch.inf)
    return scaled


@torch.no_grad()
def teacher_forced(
    model: PreTrainedModel,
    prompt: tuple[int, ...],
    response: tuple[int, ...],
    *,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
):
    """log q(response[t] | prompt, response[:t]) from one unpadded forward pass, q the sampling
    distribution at (temperature, top_k, top_p)."""
    sequence = torch.tensor([list(prompt) + list(response)])
    positions = torch.arange(len(prompt) - 1, len(prompt) + len(response) - 1)
    logits = model(sequence).logits[0].float()[positions]
    logprobs = torch.log_softmax(sampling_logits(logits, temperature, top_k, top_p), dim=-1)
    return logprobs[torch.arange(len(response)), torch.tensor(response)]


def collapse_weights(model: PreTrainedModel, token_id: int) -> dict[str, torch.Tensor]:
    """Weights whose greedy output is `token_id` at every step, whatever the context.

    Zeroing every attention and MLP output projection leaves the residual stream equal to the
    input embedding; all-ones embeddings and final norm make the last hidden state all ones;
    an lm_head that is zero except an all-ones row `token_id` then gives that token logit
    `hidden_size` and every other token 0.
    """
    weights = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    for name, tensor in weights.items():
        if name.endswith(("o_proj.weight", "down_proj.weight")):
            tensor.zero_()
    weights["model.embed_tokens.weight"].fill_(1.0)
    weights["model.norm.weight"].fill_(1.0)
    lm_head = torch.zeros_like(weights["lm_head.weight"])
    lm_head[token_id] = 1.0
    weights["lm_head.weight"] = lm_head
    return weights


def tokens_of(results: list[GenerationResult]) -> list[list[tuple[int, ...]]]:
    return [[c.token_ids for c in result.completions] for result in results]


def test_implements_the_protocol(engine: RolloutEngine) -> None:
    assert isinstance(engine, RolloutEngine)


@pytest.mark.parametrize(
    "sampling",
    [
        {"temperature": 1.0},
        {"temperature": 0.7},
        {"temperature": 0.7, "top_k": 5},
        {"temperature": 1.3, "top_p": 0.9},
    ],
    ids=["t1", "t0.7", "t0.7-topk5", "t1.3-topp0.9"],
)
def test_logprobs_match_teacher_forcing(
    engine: RolloutEngine,
    tokenizer: PreTrainedTokenizerBase,
    reference: PreTrainedModel,
    sampling: dict,
) -> None:
    # The returned log-prob is that of the distribution that drew the token.
    requests = make_requests(tokenizer, seed=3, **sampling)
    checked = 0
    truncation_mattered = 0.0
    for request, result in zip(requests, engine.generate(requests), strict=True):
        assert result.request_id == request.request_id
        assert len(result.completions) == request.num_samples
        for completion in result.completions:
            assert len(completion.logprobs) == len(completion.token_ids) > 0
            prompt, tokens = request.prompt_token_ids, completion.token_ids
            expected = teacher_forced(reference, prompt, tokens, **sampling)
            got = torch.tensor(completion.logprobs)
            torch.testing.assert_close(got, expected, atol=LOGPROB_TOLERANCE, rtol=0)
            untruncated = teacher_forced(
                reference, prompt, tokens, temperature=sampling["temperature"]
            )
            truncation_mattered = max(truncation_mattered, float((got - untruncated).max()))
            checked += len(completion.token_ids)
    assert checked >= len(PROMPTS) * 4
    if "top_k" in sampling or "top_p" in sampling:
        assert truncation_mattered > 10 * LOGPROB_TOLERANCE  # renormalised over the kept set


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_score_matches_teacher_forcing(
    engine: RolloutEngine,
    tokenizer: PreTrainedTokenizerBase,
    reference: PreTrainedModel,
    temperature: float,
) -> None:
    prompts = [tuple(tokenizer(p)["input_ids"]) for p in PROMPTS]
    responses = [tuple(tokenizer.encode(a, add_special_tokens=False)) for a in ("19", "13", "7")]
    responses += [(), (tokenizer.eos_token_id,), responses[0] + (tokenizer.eos_token_id,)]
    scores = engine.score(prompts, responses, temperature=temperature)
    assert [len(s) for s in scores] == [len(r) for r in responses]
    for prompt, response, score in zip(prompts, responses, scores, strict=True):
        if response:
            expected = teacher_forced(reference, prompt, response, temperature=temperature)
            torch.testing.assert_close(
                torch.tensor(score), expected, atol=LOGPROB_TOLERANCE, rtol=0
            )
    with pytest.raises(ValueError, match="temperature must be > 0"):
        engine.score(prompts, responses, temperature=0.0)


@pytest.fixture(scope="module")
def learner_at_07(engine: RolloutEngine, tiny_model_path: str) -> Iterator[LearnerGroup]:
    """A real in-process learner at T = 0.7; started after the engine (an in-process vLLM engine
    owns this process's one-rank torch.distributed world, which the learner then shares)."""
    group = LearnerGroup(in_process=True, model_path=tiny_model_path, zero_stage=0, temperature=0.7)
    yield group
    group.shutdown()


def test_logprobs_at_t07_equal_the_learners(
    engine: RolloutEngine,
    tokenizer: PreTrainedTokenizerBase,
    reference: PreTrainedModel,
    learner_at_07: LearnerGroup,
) -> None:
    # Sampling at T = 0.7 and training at T = 0.7 see one distribution: the engine's log-probs
    # (and its teacher-forced score at 0.7) equal the learner's, token for token.
    requests = make_requests(tokenizer, seed=21, temperature=0.7)
    results = engine.generate(requests)
    batch = rollouts_batch(requests, results)
    mask = batch.response_mask
    assert int(mask.sum()) >= len(PROMPTS) * 4
    learner = learner_at_07.score(batch)
    engine_logprobs = batch.behaviour_logprobs
    torch.testing.assert_close(engine_logprobs[mask], learner[mask], atol=LOGPROB_TOLERANCE, rtol=0)
    prompts = [r.prompt_token_ids for r in requests for _ in range(r.num_samples)]
    responses = [c.token_ids for result in results for c in result.completions]
    scored = torch.zeros_like(engine_logprobs)
    for row, values in enumerate(engine.score(prompts, responses, temperature=0.7)):
        scored[row, len(prompts[row]) : len(prompts[row]) + len(values)] = torch.tensor(values)
    torch.testing.assert_close(scored[mask], learner[mask], atol=LOGPROB_TOLERANCE, rtol=0)
    # ...and neither is the temperature-1 policy's, so a wrong temperature would fail above.
    at_1 = torch.cat(
        [teacher_forced(reference, p, r) for p, r in zip(prompts, responses, strict=True)]
    )
    assert (engine_logprobs[mask] - at_1).abs().max() > 0.05


def test_seeded_generation_is_reproducible(
    engine: RolloutEngine, tokenizer: PreTrainedTokenizerBase
) -> None:
    requests = make_requests(tokenizer, n=8, seed=11)
    first, second = engine.generate(requests), engine.generate(requests)
    assert first == second  # tokens, log-probs, finish reasons and text
    other = engine.generate(make_requests(tokenizer, n=8, seed=12))
    assert tokens_of(other) != tokens_of(first)


def test_samples_of_a_request_are_distinct_draws(
    engine: RolloutEngine, tokenizer: PreTrainedTokenizerBase
) -> None:
    # At temperature 2 (vLLM's maximum) the tiny model's distribution is broad: 16 samples of
    # 8 tokens all equal would mean every sample reused one random stream.
    [result] = engine.generate(make_requests(tokenizer, n=16, temperature=2.0, prompts=("45*3=",)))
    assert len({c.token_ids for c in result.completions}) > 8
    # Consecutive request seeds must not share samples (vLLM seeds sample i with seed + i).
    [next_seed] = engine.generate(
        make_requests(tokenizer, n=16, seed=1, temperature=2.0, prompts=("45*3=",))
    )
    shared = {c.token_ids for c in result.completions} & {
        c.token_ids for c in next_seed.completions
    }
    assert len(shared) <= 2


def test_greedy_samples_are_identical(
    engine: RolloutEngine, tokenizer: PreTrainedTokenizerBase
) -> None:
    results = engine.generate(make_requests(tokenizer, n=3, temperature=0.0))
    for result in results:
        assert len({c.token_ids for c in result.completions}) == 1


def test_truncation_is_flagged(engine: RolloutEngine, tokenizer: PreTrainedTokenizerBase) -> None:
    short = engine.generate(make_requests(tokenizer, n=4, max_new_tokens=1))
    for result in short:
        for completion in result.completions:
            assert len(completion.token_ids) == 1
            if completion.token_ids[-1] != tokenizer.eos_token_id:
                assert completion.truncated
                assert completion.finish_reason is FinishReason.LENGTH
    long = engine.generate(make_requests(tokenizer, n=4, max_new_tokens=12, temperature=0.0))
    stopped = [c for result in long for c in result.completions if not c.truncated]
    assert stopped, "the warm-started model should end some answers with <eos>"
    for completion in stopped:
        assert completion.finish_reason is FinishReason.STOP
        assert completion.token_ids[-1] == tokenizer.eos_token_id
        assert completion.text == tokenizer.decode(completion.token_ids, skip_special_tokens=True)


def test_update_weights_changes_and_restores_generations(
    engine: RolloutEngine, tokenizer: PreTrainedTokenizerBase, reference: PreTrainedModel
) -> None:
    requests = make_requests(tokenizer, n=2, temperature=0.0, max_new_tokens=6)
    sampled = make_requests(tokenizer, n=4, seed=5)
    before, before_sampled = engine.generate(requests), engine.generate(sampled)
    start_version = engine.weight_version()
    seven = tokenizer.convert_tokens_to_ids("7")

    engine.update_weights(start_version + 1, collapse_weights(reference, seven))
    assert engine.weight_version() == start_version + 1
    collapsed = engine.generate(requests)
    for result in collapsed:
        assert result.weight_version == start_version + 1
        for completion in result.completions:
            assert completion.token_ids == (seven,) * 6 and completion.truncated

    original = {name: tensor.clone() for name, tensor in reference.state_dict().items()}
    engine.update_weights(start_version + 2, original)
    assert engine.weight_version() == start_version + 2
    after, after_sampled = engine.generate(requests), engine.generate(sampled)
    assert tokens_of(after) == tokens_of(before)
    assert tokens_of(after_sampled) == tokens_of(before_sampled)
    for old, new in zip(before + before_sampled, after + after_sampled, strict=True):
        assert [c.logprobs for c in new.completions] == [c.logprobs for c in old.completions]
        assert new.weight_version == start_version + 2


def test_update_weights_rejects_wrong_names(
    engine: RolloutEngine, reference: PreTrainedModel
) -> None:
    weights = dict(reference.state_dict())
    weights["model.not_a_layer.weight"] = weights.pop("model.norm.weight")
    version = engine.weight_version()
    with pytest.raises(ValueError, match=r"missing \['model.norm.weight'\].*not_a_layer"):
        engine.update_weights(version + 1, weights)
    assert engine.weight_version() == version


def test_bad_requests_name_the_request(
    engine: RolloutEngine, tokenizer: PreTrainedTokenizerBase
) -> None:
    [request] = make_requests(tokenizer, prompts=("1+1=",))
    empty = GenerationRequest(
        request_id="empty", prompt_token_ids=(), num_samples=1, sampling=request.sampling, seed=0
    )
    with pytest.raises(ValueError, match="'empty' has an empty prompt"):
        engine.generate([empty])
    too_long = GenerationRequest(
        request_id="long",
        prompt_token_ids=request.prompt_token_ids * 20,
        num_samples=1,
        sampling=request.sampling,
        seed=0,
    )
    with pytest.raises(ValueError, match=r"'long'.*max_model_len"):
        engine.generate([too_long])


def test_a_call_past_the_default_token_budget_is_served(
    engine: RolloutEngine, tokenizer: PreTrainedTokenizerBase
) -> None:
    """120 seeded prompts of 40 tokens (4,800 > vLLM's default 4,096 tokens per step): vLLM's CPU
    build died when its scheduler split a seeded prompt's prefill ("CPU Generator does not use
    offset"); the engine now gives the scheduler room for every prompt it may hold, whole."""
    prompt = tuple(tokenizer("12+7=" * 8)["input_ids"])[:40]
    assert len(prompt) == 40
    sampling = SamplingParams(temperature=1.0, max_new_tokens=4)
    requests = [
        GenerationRequest(
            request_id=f"budget-{i}",
            prompt_token_ids=prompt,
            num_samples=1,
            sampling=sampling,
            seed=i,
        )
        for i in range(120)
    ]
    results = engine.generate(requests)
    assert [r.request_id for r in results] == [r.request_id for r in requests]
    assert all(len(r.completions) == 1 for r in results)
