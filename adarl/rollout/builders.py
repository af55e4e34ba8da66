"""`build_engine`: translate a `RolloutConfig` into an engine (`build_rollout_pool`: pool.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from adarl.config.rollout import RolloutConfig
from adarl.config.seeds import seed_or_default
from adarl.rollout.base import RolloutEngine
from adarl.rollout.fake import FakeEngine, FakePrompt


def engine_class_and_kwargs(
    config: RolloutConfig,
    *,
    model_path: str,
    fake_script: Mapping[str, FakePrompt] | None = None,
) -> tuple[type, dict[str, Any]]:
    """The engine class and its keyword arguments (what a Ray actor is started with)."""
    config.validate()
    if config.engine == "vllm":
        from adarl.rollout.vllm_engine import VLLMEngine

        return VLLMEngine, {
            "model_path": model_path,
            "seed": seed_or_default(config.seed),
            "dtype": config.dtype,
            "max_model_len": config.max_model_len,
            "max_num_seqs": config.max_num_seqs,
            "kv_cache_memory_bytes": config.kv_cache_memory_bytes,
            "gpu_memory_utilization": config.gpu_memory_utilization,
            "enforce_eager": config.enforce_eager,
            "tensor_parallel_size": config.tensor_parallel_size,
        }
    if config.engine == "hf":
        from adarl.rollout.hf_engine import HFEngine

        return HFEngine, {
            "model_path": model_path,
            "dtype": config.dtype,
            "device": config.device,
            "max_model_len": config.max_model_len,
            "max_batch_sequences": config.max_num_seqs,
        }
    if fake_script is None:
        raise ValueError(
            "rollout.engine=fake needs a script of pass rates: pass fake_script= (prompt text -> "
            "FakePrompt) to the builder; the fake engine is for tests"
        )
    from adarl.models.loading import load_tokenizer

    return FakeEngine, {
        "tokenizer": load_tokenizer(model_path),
        "script": dict(fake_script),
        "seed": seed_or_default(config.seed),
    }


def build_engine(
    config: RolloutConfig,
    *,
    model_path: str,
    fake_script: Mapping[str, FakePrompt] | None = None,
) -> RolloutEngine:
    """One engine in this process. `model_path` comes from `adarl.models.resolve_model_config`."""
    engine_class, kwargs = engine_class_and_kwargs(
        config, model_path=model_path, fake_script=fake_script
    )
    return engine_class(**kwargs)
