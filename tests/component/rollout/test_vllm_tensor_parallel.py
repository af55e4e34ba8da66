"""`rollout.tensor_parallel_size` needs vLLM's CUDA build: the CPU build is refused when the
engine starts, naming the key and what to do instead (more engines)."""

from __future__ import annotations

import re

import pytest

from adarl.config import RolloutConfig
from adarl.rollout.builders import engine_class_and_kwargs


def test_tensor_parallel_size_reaches_the_vllm_engine() -> None:
    _, kwargs = engine_class_and_kwargs(
        RolloutConfig(engine="vllm", tensor_parallel_size=4), model_path="unused"
    )
    assert kwargs["tensor_parallel_size"] == 4


@pytest.mark.slow
def test_cpu_build_refuses_tensor_parallelism(tiny_model_path: str) -> None:
    from vllm.platforms import current_platform

    from adarl.rollout.vllm_engine import VLLMEngine

    if not current_platform.is_cpu():
        pytest.skip("this vLLM is the CUDA build: tensor parallelism is allowed")
    with pytest.raises(ValueError, match=re.escape("rollout.tensor_parallel_size=2 needs")) as info:
        VLLMEngine(model_path=tiny_model_path, tensor_parallel_size=2)
    assert "cluster.rollout_engines" in str(info.value)
