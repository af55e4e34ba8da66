"""`build_engine`: translate a `RolloutConfig` into an engine (`build_rollout_pool`: pool.py).

`build_hint_generator` (and the helpers `build_hints` places a run's generator with:
adarl/rollout/hint_service.py) is here too, not in adarl/hints: its `model` source builds an
engine, and the engines load the tiny model whose warm start teaches the hint formats (rollout →
hints only).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from adarl.config.hints import HintsConfig
from adarl.config.rollout import RolloutConfig
from adarl.config.seeds import seed_or_default
from adarl.hints.generator import GenerateFn, HintCodec, HintGenerator
from adarl.rollout.base import RolloutEngine
from adarl.rollout.fake import FakeEngine, FakePrompt
from adarl.types import SamplingParams


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
    from adarl.models.tokenizer_loading import load_tokenizer

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


def build_hint_generator(
    config: HintsConfig,
    *,
    generate: GenerateFn | None,
    codec: HintCodec,
    rollout: RolloutConfig | None = None,
) -> HintGenerator:
    """The generator `config` describes, in this process with its generations run on
    `generate` (a run places it with `adarl.rollout.hint_service.build_hints` instead).

    `generate`: the rollout pool's synchronous `generate` (used by `source=self`); `codec`: the
    policy's prompt codec (its tokenizer and stop tokens). `source=model` builds the hint
    model's own engine from `rollout` (the run's rollout settings) with `build_engine`, and its
    own codec from the hint model's tokenizer."""
    config.validate()
    if config.source == "template":
        return HintGenerator(**hint_generator_kwargs(config, None))
    if config.source == "self":
        if generate is None:
            raise ValueError(
                "hints.source=self writes hints with the policy: pass generate= (the rollout "
                "pool's synchronous generate)"
            )
        return HintGenerator(**hint_generator_kwargs(config, codec), generate=generate)
    if rollout is None:
        raise ValueError(
            "hints.source=model builds the hint model's engine from the rollout settings: "
            "pass rollout= (the run's RolloutConfig)"
        )
    from adarl.models.loading import resolve_model_path

    assert config.model is not None  # validated
    model_path = resolve_model_path(config.model)
    engine = build_engine(rollout, model_path=model_path)
    return HintGenerator(
        **hint_generator_kwargs(config, hint_model_codec(model_path)), generate=engine.generate
    )


def hint_generator_kwargs(config: HintsConfig, codec: HintCodec | None) -> dict[str, Any]:
    """`HintGenerator`'s keyword arguments but `generate`: `codec` tokenises hint-mode prompts
    for the engine that writes them (None for template hints)."""
    kwargs: dict[str, Any] = {
        "source": config.source,
        "fallback": config.fallback,
        "retries": config.retries,
        "prompt_template": config.prompt_template,
        "show_template": config.show_template,
        "seed": seed_or_default(config.seed),
    }
    if config.source != "template":
        assert codec is not None, f"hints.source={config.source} needs the engine's codec"
        kwargs.update(codec=codec, sampling=_sampling(config, codec))
    return kwargs


def hint_model_codec(model_path: str) -> HintCodec:
    """The hint model's own codec: its tokenizer, stopping at its end-of-sequence token."""
    from adarl.models.tokenizer_loading import load_tokenizer
    from adarl.rollout.codec import PromptCodec

    tokenizer = load_tokenizer(model_path)
    eos = tokenizer.eos_token_id
    return PromptCodec(
        tokenizer=tokenizer,
        sampling=SamplingParams(stop_token_ids=() if eos is None else (int(eos),)),
    )


def _sampling(config: HintsConfig, codec: HintCodec) -> SamplingParams:
    return SamplingParams(
        temperature=config.temperature,
        max_new_tokens=config.max_hint_tokens,
        stop_token_ids=codec.sampling.stop_token_ids,
    )
