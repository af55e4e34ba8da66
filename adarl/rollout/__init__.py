"""Rollout engines behind one protocol (`base.RolloutEngine`) and the `RolloutPool`.

Engines: `vllm_engine.VLLMEngine` (real vLLM, CPU or GPU build), `hf_engine.HFEngine`
(transformers), `fake.FakeEngine` (scripted pass rates, for tests). vLLM is imported only when a
vLLM engine is built.
"""

from adarl.rollout.base import RolloutEngine
from adarl.rollout.builders import build_engine, engine_class_and_kwargs
from adarl.rollout.fake import FakeEngine, FakePrompt
from adarl.rollout.pool import RolloutPool, build_rollout_pool

__all__ = [
    "FakeEngine",
    "FakePrompt",
    "RolloutEngine",
    "RolloutPool",
    "build_engine",
    "build_rollout_pool",
    "engine_class_and_kwargs",
]
