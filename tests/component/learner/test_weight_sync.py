"""CPU weight sync in-process: a learner step, a push, and the HF engine scores as the learner."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from adarl.cluster import InProcessWorker
from adarl.learner import LearnerGroup
from adarl.rollout.hf_engine import HFEngine
from adarl.types import TrainBatch
from adarl.weight_sync import ObjectStoreWeightSync

from .conftest import small_batch

# Same HF forward, same fp32 weights: only padding/batch shapes differ between the two sides.
LOGPROB_TOLERANCE = 1e-5


def engine_logprobs(engine: HFEngine, batch: TrainBatch) -> torch.Tensor:
    """The engine's `score` of every response in `batch`, laid out like the batch ([B, T])."""
    prompts, responses = [], []
    for row in range(batch.num_sequences):
        tokens = batch.input_ids[row][batch.attention_mask[row]].tolist()
        start = int(batch.response_mask[row].nonzero()[0])
        prompts.append(tokens[:start])
        responses.append(tokens[start:])
    out = torch.zeros(batch.input_ids.shape)
    for row, scores in enumerate(engine.score(prompts, responses)):
        start = len(prompts[row])
        out[row, start : start + len(scores)] = torch.tensor(scores)
    return out


@pytest.fixture(scope="module")
def group(tiny_policy_dir: str) -> Iterator[LearnerGroup]:
    learners = LearnerGroup(
        in_process=True, model_path=tiny_policy_dir, zero_stage=3, learning_rate=1e-2
    )
    yield learners
    learners.shutdown()


@pytest.mark.slow
def test_push_makes_the_engine_score_like_the_learner(
    group: LearnerGroup, tiny_policy_dir: str
) -> None:
    engine = HFEngine(model_path=tiny_policy_dir)
    worker = InProcessWorker(HFEngine(model_path=tiny_policy_dir))
    sync = ObjectStoreWeightSync(engines=[engine, worker], bucket_size_bytes=16 * 1024)
    probe = small_batch(seed=7)
    mask = probe.response_mask
    before = group.score(probe)
    torch.testing.assert_close(engine_logprobs(engine, probe)[mask], before[mask])

    group.train_step(small_batch(seed=8))
    after = group.score(probe)
    assert (after - before)[mask].abs().max() > 1e-3  # the step changed the policy
    report = sync.push(group)

    assert report.version == group.weight_version().version == 1
    assert engine.weight_version() == 1
    assert worker.submit(worker.obj.weight_version).result() == 1
    assert report.num_buckets > 3  # 16 KiB buckets split the ≈0.3 MB model
    for scores in (
        engine_logprobs(engine, probe),
        worker.submit(engine_logprobs, worker.obj, probe).result(),
    ):
        torch.testing.assert_close(scores[mask], after[mask], rtol=0, atol=LOGPROB_TOLERANCE)
    worker.shutdown()
