"""Round trip on a local Ray cluster: 2 ZeRO-3 learner actors step, weights sync to an HF engine
actor and a vLLM (CPU build) engine actor, and both engines' log-probs of fixed sequences equal
the learners' and report the learners' weight version.

Both sync paths run here on CPU: the object-store path, and the broadcast path's code with the
gloo backend (the same group/bucket/flatten code the GPU path runs with NCCL; tests/gpu covers
CUDA tensors).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import torch

from adarl.cluster import ensure_ray, spawn_actor
from adarl.config.model import TinyModelConfig
from adarl.learner import LearnerGroup
from adarl.learner.synthetic import synthetic_train_batch
from adarl.models.tiny import build_tiny_qwen2
from adarl.models.tokenizer import build_char_tokenizer
from adarl.rollout.hf_engine import HFEngine
from adarl.rollout.vllm_engine import VLLMEngine
from adarl.types import GenerationRequest, SamplingParams, TrainBatch
from adarl.weight_sync import BroadcastWeightSync, ObjectStoreWeightSync, WeightSync

# Absolute tolerance on per-token log-probs, fp32 everywhere. HF engine: the learner's own
# transformers forward, only padding/batch shapes differ (measured: 0.0). vLLM: its own CPU
# kernels on the same weights (measured max 4.8e-7 over 9 sequences).
LOGPROB_TOLERANCE = {"HFEngine": 1e-6, "VLLMEngine": 1e-5}


def _batch(seed: int) -> TrainBatch:
    return synthetic_train_batch(
        num_prompts=3,
        samples_per_prompt=3,
        prompt_length=(3, 7),
        response_length=(2, 12),
        vocab_size=len(build_char_tokenizer()),
        seed=seed,
    )


def _pairs(batch: TrainBatch) -> tuple[list[list[int]], list[list[int]]]:
    prompts, responses = [], []
    for row in range(batch.num_sequences):
        tokens = batch.input_ids[row][batch.attention_mask[row]].tolist()
        start = int(batch.response_mask[row].nonzero()[0])
        prompts.append(tokens[:start])
        responses.append(tokens[start:])
    return prompts, responses


def _as_rows(batch: TrainBatch, scores: Sequence[Sequence[float]]) -> torch.Tensor:
    out = torch.zeros(batch.input_ids.shape)
    for row, values in enumerate(scores):
        start = int(batch.response_mask[row].nonzero()[0])
        out[row, start : start + len(values)] = torch.tensor(values)
    return out


@pytest.fixture(scope="module")
def policy_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    tokenizer = build_char_tokenizer()
    # The built-in tiny architecture: vLLM's CPU attention needs head_dim >= 32 (128 / 4 heads).
    config = TinyModelConfig(max_position_embeddings=64)
    path = Path(tmp_path_factory.mktemp("sync_policy"))
    build_tiny_qwen2(config, tokenizer).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


@pytest.fixture(scope="module")
def learners(policy_dir: str) -> Iterator[LearnerGroup]:
    ensure_ray(num_cpus=2)
    group = LearnerGroup(
        num_learners=2,
        cpus_per_learner=0.5,
        model_path=policy_dir,
        zero_stage=3,
        learning_rate=1e-2,
    )
    yield group
    group.shutdown()


@pytest.fixture(scope="module")
def engines(policy_dir: str, learners: LearnerGroup) -> Iterator[list[tuple[str, Any]]]:
    """(kind, actor) of one HF engine and one vLLM engine."""
    import ray

    actors = [
        ("HFEngine", spawn_actor(HFEngine, num_cpus=0.5, model_path=policy_dir)),
        (
            "VLLMEngine",
            spawn_actor(
                VLLMEngine,
                num_cpus=0.5,
                model_path=policy_dir,
                max_model_len=64,
                max_num_seqs=16,
                kv_cache_memory_bytes=128 * 1024 * 1024,
            ),
        ),
    ]
    yield actors
    for _, actor in actors:
        ray.kill(actor)


def _check_round_trip(
    learners: LearnerGroup, engines: list[tuple[str, Any]], sync: WeightSync
) -> None:
    """One learner step, a push, then every engine scores the probe like the learners."""
    import ray

    actors = [actor for _, actor in engines]
    probe = _batch(seed=100)
    mask = probe.response_mask
    prompts, responses = _pairs(probe)
    stale = ray.get([a.score.remote(prompts, responses) for a in actors])
    learners.train_step(_batch(seed=learners.weight_version().version))
    expected = learners.score(probe)
    for values in stale:
        assert (_as_rows(probe, values) - expected)[mask].abs().max() > 1e-3  # old weights

    report = sync.push(learners)

    version = learners.weight_version().version
    assert report.version == version
    assert ray.get([a.weight_version.remote() for a in actors]) == [version] * len(actors)
    request = GenerationRequest(
        request_id="after-sync",
        prompt_token_ids=tuple(prompts[0]),
        num_samples=2,
        sampling=SamplingParams(max_new_tokens=4),
        seed=0,
    )
    for results in ray.get([a.generate.remote([request]) for a in actors]):
        assert results[0].weight_version == version  # every rollout carries the new version
    fresh = ray.get([a.score.remote(prompts, responses) for a in actors])
    for (kind, _), values in zip(engines, fresh, strict=True):
        scores = _as_rows(probe, values)
        torch.testing.assert_close(
            scores[mask], expected[mask], rtol=0, atol=LOGPROB_TOLERANCE[kind]
        )


@pytest.mark.slow
def test_object_store_sync_round_trip(
    learners: LearnerGroup, engines: list[tuple[str, Any]]
) -> None:
    sync = ObjectStoreWeightSync(engines=[a for _, a in engines], bucket_size_bytes=64 * 1024)
    _check_round_trip(learners, engines, sync)
    assert sync.metrics()["perf/weight_sync_buckets"] > 3


@pytest.mark.slow
def test_broadcast_sync_round_trip_over_gloo(
    learners: LearnerGroup, engines: list[tuple[str, Any]]
) -> None:
    sync = BroadcastWeightSync(
        engines=[a for _, a in engines],
        bucket_size_bytes=64 * 1024,
        backend="gloo",
        engine_device="cpu",
    )
    _check_round_trip(learners, engines, sync)  # the first push also creates the group
    _check_round_trip(learners, engines, sync)  # later pushes reuse it
