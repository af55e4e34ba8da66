"""On a local Ray cluster the hint generator is an actor of its own, and the `model` source's
engine an actor placed by the resource plan with the resources configured for it
(adarl/rollout/hint_service.py). The cluster declares one GPU (Ray hands it out by count, no
CUDA needed), so the engine's GPU share is checked as well as its CPUs. The actor answers as
the in-process generator does: the same hints and counts for the same requests."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import torch

from adarl.cluster import cluster_nodes, ensure_ray, plan_resources, proxy_handle
from adarl.config.faults import FaultsConfig
from adarl.config.hints import HintsConfig
from adarl.config.model import TinyModelConfig
from adarl.config.rollout import RolloutConfig
from adarl.hints.types import HintRequest
from adarl.models.tiny import build_tiny_qwen2
from adarl.models.tokenizer import build_char_tokenizer
from adarl.rollout.builders import build_hint_generator
from adarl.rollout.codec import PromptCodec
from adarl.rollout.hint_service import build_hints
from adarl.rollout.pool import RolloutPool
from adarl.tasks.arithmetic import make_example
from adarl.types import GenerationRequest, GenerationResult, SamplingParams

pytestmark = pytest.mark.slow

CPUS_FOR_ENGINE, GPUS_FOR_ENGINE, CPUS_FOR_GENERATOR = 0.5, 0.5, 0.25
EXAMPLES = [
    make_example([12, 7, 3], list("+-"), difficulty=0.0),
    make_example([5, 8, 2], list("*+"), difficulty=0.0),
]


@pytest.fixture(scope="module")
def ray_with_a_gpu() -> Iterator[None]:
    import ray

    if ray.is_initialized() and ray.cluster_resources().get("GPU", 0.0) < 1:
        ray.shutdown()  # a cluster an earlier module started without the GPU this one declares
    ensure_ray(num_cpus=3, num_gpus=1)
    # The probes below run in the actors (`__ray_call__`), where this test module is not importable.
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    yield
    ray.shutdown()  # later modules start their own, as they expect


@pytest.fixture(scope="module")
def hint_model(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A random tiny model: its hint-mode output is unparseable, so hints fall back to the
    template, the same way in both places."""
    torch.manual_seed(0)
    directory = tmp_path_factory.mktemp("hint-model")
    tokenizer = build_char_tokenizer()
    build_tiny_qwen2(TinyModelConfig(sft_steps=0), tokenizer).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return str(directory)


def _pid(_obj: Any) -> int:
    return os.getpid()


def _placement(_obj: Any) -> tuple[int, dict[str, float], str]:
    import ray

    context = ray.get_runtime_context()
    return os.getpid(), dict(context.get_assigned_resources()), context.get_node_id()


def _unused_policy_generate(requests: list[GenerationRequest]) -> list[GenerationResult]:
    raise AssertionError("source=model must not generate on the policy's engines")


def test_the_generator_and_the_hint_engine_are_actors_placed_with_their_resources(
    ray_with_a_gpu: None, hint_model: str
) -> None:
    import ray

    config = HintsConfig(schedule="sage", source="model", model=hint_model, retries=1, seed=5)
    rollout = RolloutConfig(engine="hf", max_model_len=96, max_new_tokens=8)
    plan = plan_resources(
        rollout_engines=1,
        cpus_per_engine=1.0,
        gpus_per_engine=0.0,
        learners=1,
        cpus_per_learner=1.0,
        gpus_per_learner=0.0,
        cpus_for_allocator=0.0,
        nodes=cluster_nodes(),
        hint_generator=True,
        cpus_for_hint_generator=CPUS_FOR_GENERATOR,
        hint_engines=1,
        cpus_for_hint_engine=CPUS_FOR_ENGINE,
        gpus_for_hint_engine=GPUS_FOR_ENGINE,
    )
    codec = PromptCodec(tokenizer=build_char_tokenizer(), sampling=SamplingParams())
    runner = build_hints(
        config,
        generate=_unused_policy_generate,
        codec=codec,
        rollout=rollout,
        in_process=False,
        cpus_for_generator=CPUS_FOR_GENERATOR,
        cpus_for_engine=CPUS_FOR_ENGINE,
        gpus_for_engine=GPUS_FOR_ENGINE,
        generator_scheduling=plan.scheduling("hint_generator")[0],
        engine_scheduling=plan.scheduling("hint_engine"),
        faults=FaultsConfig(engine_failure="fail"),
    )
    try:
        requests = [HintRequest(e.prompt_id, e, 2, step=1) for e in EXAMPLES]
        hints = runner.hints(requests)
        metrics = runner.metrics()

        generator_pid = ray.get(proxy_handle(runner.generator).__ray_call__.remote(_pid))
        assert generator_pid != os.getpid()  # its own process, not the driver's
        assert isinstance(runner.engines, RolloutPool)
        (endpoint,) = runner.engines.engine_endpoints()
        engine_pid, resources, node = ray.get(endpoint.__ray_call__.remote(_placement))
        assert engine_pid not in (os.getpid(), generator_pid)
        assert resources == {"CPU": CPUS_FOR_ENGINE, "GPU": GPUS_FOR_ENGINE}
        (planned,) = plan.of("hint_engine")
        assert node == planned.node_id

        # The actor answers as the generator does in-process, on the same model and seeds.
        local = build_hint_generator(config, generate=None, codec=codec, rollout=rollout)
        assert hints == local.hints(requests)
        expected = local.metrics()
        assert metrics["sampling/hint_generations"] == expected["sampling/hint_generations"] > 0
        assert metrics["sampling/hints_given"] == expected["sampling/hints_given"]
    finally:
        runner.close()
