"""`build_hints`: the run's hint generator, placed, and the `model` source's engine.

    driver                                   actors (cluster.in_process=false)
    HintRunner ── begin_hints / resume ───►  HintGenerator (prompts, parsing, leak checks)
        │  the turn's generations
        ├─ source=self:  RolloutPool.generate ─► the policy's rollout engines (current weights)
        └─ source=model: hint engine pool ─────► the hint model's engine actor
                                                 (cluster.*_for_hint_engine resources)

The generator is an actor of its own, reached through a blocking proxy like the allocator's, and
answers in turns (`HintTurn`): the driver runs each turn's generations on the engines, so
`self` hints go through the rollout pool (restarts, timeouts, current weights) and no actor
calls back into the driver. The hint model's engine is a one-engine `RolloutPool` of its own,
placed by the resource plan like the rollout engines, with its own resources: on a GPU cluster
it gets its GPU and never loads in the driver, which usually has none. With
`cluster.in_process=true` both stay in this process.

Lives in rollout, not hints: the `model` source builds an engine pool (rollout → hints only).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from adarl.cluster import blocking_proxy, spawn_actor
from adarl.config.faults import FaultsConfig
from adarl.config.hints import HintsConfig
from adarl.config.rollout import RolloutConfig
from adarl.hints.generator import GenerateFn, HintCodec, HintGenerator, HintRunner
from adarl.rollout.builders import hint_generator_kwargs, hint_model_codec
from adarl.rollout.pool import RolloutPool, build_rollout_pool

TIMEOUT_KEY = "faults.allocator_call_timeout_s"  # the light actors' limit (allocator, hints)


def build_hints(
    config: HintsConfig,
    *,
    generate: GenerateFn,
    codec: HintCodec,
    rollout: RolloutConfig,
    in_process: bool,
    cpus_for_generator: float = 0.0,
    cpus_for_engine: float = 1.0,
    gpus_for_engine: float = 0.0,
    generator_scheduling: Any = None,
    engine_scheduling: Sequence[Any] | None = None,
    faults: FaultsConfig | None = None,
) -> HintRunner:
    """The `HintRunner` the driver asks for hints (module docstring).

    `generate`: the rollout pool's synchronous generate (`source=self`); `codec`: the policy's
    prompt codec. `cpus_for_*`, `gpus_for_engine`, `*_scheduling`: the resource plan's
    resources and placement of the generator actor and the hint engine actor (ignored
    in-process). `faults`: the hint engine pool's engine-death policy and waits."""
    config.validate()
    faults = faults or FaultsConfig()
    engines: RolloutPool | None = None
    run_on: GenerateFn | None = None
    turn_codec: HintCodec | None = None
    if config.source == "self":
        run_on, turn_codec = generate, codec
    elif config.source == "model":
        from adarl.models.loading import resolve_model_path

        assert config.model is not None  # validated
        model_path = resolve_model_path(config.model)
        engines = build_rollout_pool(
            rollout,
            model_path=model_path,
            num_engines=1,
            in_process=in_process,
            num_cpus_per_engine=cpus_for_engine,
            num_gpus_per_engine=gpus_for_engine,
            faults=faults,
            scheduling=engine_scheduling,
        )
        run_on, turn_codec = engines.generate, hint_model_codec(model_path)
    kwargs = hint_generator_kwargs(config, turn_codec)
    try:
        if in_process:
            generator = HintGenerator(**kwargs)
        else:
            handle = spawn_actor(
                HintGenerator,
                num_cpus=cpus_for_generator,
                scheduling_strategy=generator_scheduling,
                **kwargs,
            )
            generator = blocking_proxy(
                handle,
                HintGenerator,
                timeout_s=faults.allocator_call_timeout_s,
                timeout_key=TIMEOUT_KEY,
            )
    except BaseException:
        if engines is not None:
            engines.shutdown()
        raise
    return HintRunner(generator=generator, generate=run_on, source=config.source, engines=engines)
