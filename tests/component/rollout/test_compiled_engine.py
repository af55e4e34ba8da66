"""The compiled vLLM engine (`enforce_eager=False`, what the GPU presets run): it starts, samples,
takes new weights, and decodes with them.

On vLLM's CPU build the model is compiled by torch.compile (inductor) as on a GPU, without CUDA
graphs. A process that inherited `TORCHDYNAMO_DISABLE=1` (every Ray actor did, and the CPU
machine's Makefile) used to crash at start-up in vLLM's AOT compile of the first forward. After a
push the engine must decode with the new weights: a compiled graph or cache holding the old ones
would keep sampling the old policy, and only log-probs scored against the learner show it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from adarl.learner import LearnerGroup
from adarl.learner.synthetic import synthetic_train_batch
from adarl.models.loading import load_tokenizer
from adarl.rollout.vllm_engine import VLLMEngine
from adarl.weight_sync import ObjectStoreWeightSync

from ._requests import PROMPTS, make_requests, rollouts_batch

pytestmark = pytest.mark.slow

# Engine log-probs (inductor's fused CPU kernels) against the learner's eager forward of the same
# float32 weights; measured max |difference| 2.4e-6 before the push, 1.4e-6 after it (24 samples
# each) and 2.9e-6 for the engine's teacher-forced scores.
LOGPROB_TOLERANCE = 1e-4


@pytest.fixture(scope="module")
def engine(tiny_model_path: str) -> Iterator[VLLMEngine]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TORCHDYNAMO_DISABLE", "1")  # what Ray actors used to inherit
        engine = VLLMEngine(
            model_path=tiny_model_path,
            seed=0,
            max_model_len=64,
            kv_cache_memory_bytes=64 << 20,
            enforce_eager=False,
        )
        yield engine
    del engine


@pytest.fixture(scope="module")
def learners(engine: VLLMEngine, tiny_model_path: str) -> Iterator[LearnerGroup]:
    """Started after the engine: an in-process vLLM engine owns this process's one-rank
    torch.distributed world, which the learner then shares."""
    group = LearnerGroup(
        in_process=True, model_path=tiny_model_path, zero_stage=0, learning_rate=1e-2
    )
    yield group
    group.shutdown()


def test_a_compiled_engine_decodes_with_the_weights_it_was_pushed(
    engine: VLLMEngine, learners: LearnerGroup, tiny_model_path: str
) -> None:
    tokenizer = load_tokenizer(tiny_model_path)
    requests = make_requests(tokenizer, n=4, seed=3)
    before = rollouts_batch(requests, engine.generate(requests))
    mask = before.response_mask
    assert int(mask.sum()) >= len(PROMPTS) * 4
    torch.testing.assert_close(
        before.behaviour_logprobs[mask],
        learners.score(before)[mask],
        atol=LOGPROB_TOLERANCE,
        rtol=0,
    )

    # One large step moves the policy far from the one the engine was compiled with.
    learners.train_step(
        synthetic_train_batch(
            num_prompts=4,
            samples_per_prompt=4,
            prompt_length=(3, 6),
            response_length=(2, 8),
            vocab_size=len(tokenizer),
            seed=0,
        )
    )
    new_scores_of_old_samples = learners.score(before)
    moved = (new_scores_of_old_samples - before.behaviour_logprobs)[mask].abs().max()
    assert moved > 0.05, "the training step hardly changed the policy: the check below is void"

    report = ObjectStoreWeightSync(engines=[engine]).push(learners)
    assert engine.weight_version() == report.version == learners.weight_version().version

    # Decode again: every sampled token's log-prob is the new policy's, as the learner scores it.
    after = rollouts_batch(requests, engine.generate(requests))
    mask_after = after.response_mask
    torch.testing.assert_close(
        after.behaviour_logprobs[mask_after],
        learners.score(after)[mask_after],
        atol=LOGPROB_TOLERANCE,
        rtol=0,
    )
    # ...and the engine's teacher-forced scores of the samples drawn before the push too.
    prompts = [r.prompt_token_ids for r in requests for _ in range(r.num_samples)]
    responses = [row[mask[i]].tolist() for i, row in enumerate(before.input_ids)]
    rescored = torch.zeros_like(before.behaviour_logprobs)
    for row, values in enumerate(engine.score(prompts, responses)):
        rescored[row, len(prompts[row]) : len(prompts[row]) + len(values)] = torch.tensor(values)
    torch.testing.assert_close(
        rescored[mask], new_scores_of_old_samples[mask], atol=LOGPROB_TOLERANCE, rtol=0
    )
