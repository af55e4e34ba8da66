"""A RolloutPool of 2 vLLM (CPU build) engine actors on a local Ray cluster serves a stream.

The consumer keeps the pool fed the way the driver does (submit more as results arrive), pushes
new weights mid-stream, and checks that every request comes back exactly once, as soon as its
engine call completes (not after a batch barrier), tagged with the version that generated it.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from adarl.cluster import ensure_ray
from adarl.config.model import TINY_ARITHMETIC, TinyModelConfig
from adarl.config.rollout import RolloutConfig
from adarl.models.loading import load_tokenizer, resolve_model_path
from adarl.rollout.pool import RolloutPool, build_rollout_pool
from adarl.types import GenerationRequest, GenerationResult, SamplingParams

pytestmark = pytest.mark.slow

# Same recipe as tests/component/rollout/conftest.py, so one session builds it once.
TEST_TINY_MODEL = TinyModelConfig(sft_steps=120)
PROMPTS = ("12+7=", "45*3=", "100-1=", "3+4=", "99*9=", "250+250=", "7*8=", "61-17=")


@pytest.fixture(scope="module")
def model_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    torch.set_num_threads(1)
    configured = os.environ.get("ADARL_CACHE_DIR")
    cache = Path(configured) if configured else tmp_path_factory.getbasetemp() / "adarl-cache"
    return resolve_model_path(TINY_ARITHMETIC, cache_dir=cache, tiny=TEST_TINY_MODEL)


@pytest.fixture(scope="module")
def pool(model_path: str) -> Iterator[RolloutPool]:
    ensure_ray(num_cpus=2)
    config = RolloutConfig(
        engine="vllm",
        max_model_len=64,
        max_num_seqs=64,
        kv_cache_memory_bytes=64 << 20,
        max_samples_per_call=8,
    )
    pool = build_rollout_pool(config, model_path=model_path, num_engines=2, num_cpus_per_engine=1.0)
    yield pool
    pool.shutdown()


def make_requests(model_path: str, start: int, count: int) -> list[GenerationRequest]:
    tokenizer = load_tokenizer(model_path)
    return [
        GenerationRequest(
            request_id=f"req-{i}",
            prompt_token_ids=tuple(tokenizer(PROMPTS[i % len(PROMPTS)])["input_ids"]),
            num_samples=4,
            sampling=SamplingParams(temperature=1.0, max_new_tokens=8),
            seed=i,
        )
        for i in range(start, start + count)
    ]


def test_stream_returns_every_request_once_in_completion_order(
    pool: RolloutPool, model_path: str
) -> None:
    assert pool.weight_versions() == [0, 0]  # also waits until both actors are up
    total, window = 48, 12
    submitted = make_requests(model_path, 0, window)
    pool.submit(submitted)
    received: list[GenerationResult] = []
    outstanding_at_yield: list[int] = []
    while len(received) < total:
        result = pool.next_completed(timeout_s=120)
        outstanding_at_yield.append(pool.outstanding_samples())
        received.append(result)
        if len(submitted) < total:  # keep the window full: one new request per result
            more = make_requests(model_path, len(submitted), 1)
            submitted += more
            pool.submit(more)
    assert not pool.has_pending()
    assert Counter(r.request_id for r in received) == Counter(r.request_id for r in submitted)
    assert all(len(r.completions) == 4 for r in received)
    # Streaming, not a barrier: results were handed out while other work was in flight.
    assert sum(1 for n in outstanding_at_yield if n > 0) >= total // 2
    metrics = pool.metrics()
    assert metrics["sampling/engine_samples"] == total * 4
    assert metrics["perf/rollout_engine_utilisation_min"] > 0  # both actors served requests


def test_weights_pushed_mid_stream_tag_later_results(pool: RolloutPool, model_path: str) -> None:
    weights = load_file(str(Path(model_path) / "model.safetensors"))
    before = make_requests(model_path, 1000, 8)
    pool.submit(before)
    pool.update_weights(1, weights)  # queued behind the submitted chunks on each actor
    after = make_requests(model_path, 2000, 8)
    pool.submit(after)
    results = {r.request_id: r for r in pool.results(timeout_s=120)}
    assert set(results) == {r.request_id for r in before + after}
    assert {results[r.request_id].weight_version for r in before} == {0}
    assert {results[r.request_id].weight_version for r in after} == {1}
    assert pool.weight_versions() == [1, 1]
    # Same weights reloaded: seeded samples are unchanged (whichever actor served them).
    again = pool.generate(make_requests(model_path, 1000, 8))
    assert [r.completions for r in again] == [results[r.request_id].completions for r in before]
