"""`RolloutPool.score`: the engines' teacher-forced scoring as a pool call, batched over engines
and returned in order; vLLM (CPU build) and HF agree on it."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pytest
from transformers import PreTrainedTokenizerBase

from adarl.models.loading import load_tokenizer
from adarl.models.tokenizer import build_char_tokenizer
from adarl.rollout.fake import FakeEngine, FakePrompt
from adarl.rollout.pool import RolloutPool

# vLLM's prompt log-probs vs the HF engine's forward pass on the same float32 weights, through
# the pool. Measured max |difference|: a few 1e-6 (the engines' own contract tolerance is 1e-4).
POOL_SCORE_TOLERANCE = 1e-4


class CountingFakeEngine(FakeEngine):
    """The scripted engine, recording the size of every scoring call it serves."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.calls: list[int] = []

    def score(self, prompt_token_ids, response_token_ids, *, temperature=1.0):
        self.calls.append(len(prompt_token_ids))
        return super().score(prompt_token_ids, response_token_ids, temperature=temperature)


def _pairs(tokenizer: PreTrainedTokenizerBase) -> tuple[list[list[int]], list[list[int]]]:
    """Prompts with responses of 0 to 5 tokens, R3-style restatements among them."""
    texts = [
        ("12+7=", "19"),
        ("45*3=", "135"),
        ("19+0=", "19"),
        ("3+4=", ""),
        ("99*99=", "9801"),
        ("250+250=", "500"),
        ("7-2+9=", "14"),
    ]
    eos = tokenizer.eos_token_id
    prompts = [
        [tokenizer.bos_token_id, *tokenizer.encode(p, add_special_tokens=False)] for p, _ in texts
    ]
    responses = [
        [*tokenizer.encode(r, add_special_tokens=False), eos] if r else [] for _, r in texts
    ]
    return prompts, responses


def test_pool_score_spreads_calls_and_keeps_order() -> None:
    tokenizer = build_char_tokenizer()
    prompts, responses = _pairs(tokenizer)
    script = {
        tokenizer.decode(p, skip_special_tokens=True): FakePrompt(pass_rate=0.6, answer="19")
        for p in prompts
    }
    engines = [CountingFakeEngine(tokenizer=tokenizer, script=script) for _ in range(2)]
    direct = engines[0].score(prompts, responses)
    engines[0].calls.clear()
    with RolloutPool.in_process(engines, max_samples_per_call=3) as pool:
        scored = pool.score(prompts, responses)
        assert pool.outstanding_samples() == 0  # every call's load was released
    assert scored == direct  # in input order, whatever engine served which call
    assert len(scored[3]) == 0  # an empty response scores to an empty list
    # 7 pairs in calls of at most 3 (3 + 3 + 1), each to the least-loaded engine at the time.
    assert sorted(n for e in engines for n in e.calls) == [1, 3, 3]


def test_pool_score_names_a_length_mismatch() -> None:
    tokenizer = build_char_tokenizer()
    engine = FakeEngine(tokenizer=tokenizer, script={})
    with RolloutPool.in_process([engine]) as pool:
        with pytest.raises(ValueError, match="2 prompts but 1 responses"):
            pool.score([[1], [2]], [[3]])
        assert pool.score([], []) == []


def _engine(kind: str, model_path: str):
    if kind == "vllm":
        from adarl.rollout.vllm_engine import VLLMEngine

        return VLLMEngine(
            model_path=model_path, seed=0, max_model_len=64, kv_cache_memory_bytes=64 << 20
        )
    from adarl.rollout.hf_engine import HFEngine

    return HFEngine(model_path=model_path, max_model_len=64)


@pytest.fixture(scope="module")
def pools(tiny_model_path: str) -> Iterator[dict[str, RolloutPool]]:
    # HF as two engines with small calls, so its answer is assembled from several engine calls.
    built = {
        "vllm": RolloutPool.in_process([_engine("vllm", tiny_model_path)]),
        "hf": RolloutPool.in_process(
            [_engine("hf", tiny_model_path), _engine("hf", tiny_model_path)],
            max_samples_per_call=2,
        ),
    }
    yield built
    for pool in built.values():
        pool.shutdown()


def _max_difference(a: Sequence[Sequence[float]], b: Sequence[Sequence[float]]) -> float:
    assert [len(x) for x in a] == [len(y) for y in b]
    return max(
        (abs(x - y) for xs, ys in zip(a, b, strict=True) for x, y in zip(xs, ys, strict=True)),
        default=0.0,
    )


@pytest.mark.slow
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_vllm_and_hf_pools_agree_on_scores(
    pools: dict[str, RolloutPool], tiny_model_path: str, temperature: float
) -> None:
    prompts, responses = _pairs(load_tokenizer(tiny_model_path))
    vllm = pools["vllm"].score(prompts, responses, temperature=temperature)
    hf = pools["hf"].score(prompts, responses, temperature=temperature)
    assert _max_difference(vllm, hf) < POOL_SCORE_TOLERANCE
    # Not vacuous: the scores differ from pair to pair and are proper log-probabilities.
    flat = [x for row in hf for x in row]
    assert max(flat) <= 0.0 and len({round(x, 3) for x in flat}) > 5
