"""The RolloutPool's waits are bounded and say what they waited for; its fault settings are
checked (real pool, scripted in-process engines; engine deaths need Ray: tests/e2e/test_faults.py).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import Future
from pathlib import Path

import pytest
from transformers import PreTrainedTokenizerFast

from adarl.cluster import library_log_file, set_library_log_dir
from adarl.config.faults import FaultsConfig
from adarl.config.model import TINY_ARITHMETIC
from adarl.config.rollout import RolloutConfig
from adarl.models.tokenizer import build_char_tokenizer
from adarl.rollout.fake import FakeEngine, FakePrompt
from adarl.rollout.pool import RolloutPool, build_rollout_pool
from adarl.types import GenerationRequest, GenerationResult, SamplingParams

SCRIPT = {f"{a}+{a}=": FakePrompt(pass_rate=0.5, answer=str(2 * a)) for a in range(10)}


class StuckEngine(FakeEngine):
    """A scripted engine whose `generate` hangs until released (a stuck engine process)."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.release = threading.Event()

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        self.release.wait(timeout=60)
        return super().generate(requests)


@pytest.fixture(scope="module")
def tokenizer() -> PreTrainedTokenizerFast:
    return build_char_tokenizer()


def requests_for(tokenizer: PreTrainedTokenizerFast, count: int) -> list[GenerationRequest]:
    return [
        GenerationRequest(
            request_id=f"r{i}",
            prompt_token_ids=tuple(tokenizer(f"{i % 10}+{i % 10}=")["input_ids"]),
            num_samples=2,
            sampling=SamplingParams(max_new_tokens=4),
            seed=i,
        )
        for i in range(count)
    ]


def test_drain_waits_at_most_the_pools_limit_and_names_the_key(
    tokenizer: PreTrainedTokenizerFast,
) -> None:
    engine = StuckEngine(tokenizer=tokenizer, script=SCRIPT)
    pool = RolloutPool.in_process([engine], wait_timeout_s=0.2)
    try:
        pool.submit(requests_for(tokenizer, 3))
        # The driver calls drain_completed() with no argument: the pool's limit applies.
        with pytest.raises(TimeoutError) as raised:
            pool.drain_completed()
        message = str(raised.value)
        assert "faults.rollout_wait_timeout_s" in message
        assert "engine0:StuckEngine (6 samples)" in message  # what it was waiting on
        engine.release.set()
        assert len(pool.drain_completed()) + len(list(pool.results())) == 3  # nothing lost
    finally:
        engine.release.set()
        pool.shutdown()


def test_an_evaluation_barrier_is_bounded_too(tokenizer: PreTrainedTokenizerFast) -> None:
    engine = StuckEngine(tokenizer=tokenizer, script=SCRIPT)
    pool = RolloutPool.in_process([engine], wait_timeout_s=0.2)
    try:
        with pytest.raises(TimeoutError, match=r"faults\.rollout_wait_timeout_s"):
            pool.generate(requests_for(tokenizer, 2))
    finally:
        engine.release.set()
        pool.shutdown()


def test_the_builder_applies_the_configured_limit(tokenizer: PreTrainedTokenizerFast) -> None:
    pool = build_rollout_pool(
        RolloutConfig(engine="fake"),
        model_path=TINY_ARITHMETIC,
        in_process=True,
        fake_script=SCRIPT,
        faults=FaultsConfig(rollout_wait_timeout_s=7.5),
    )
    try:
        assert pool.wait_timeout_s == 7.5
        results = pool.generate(requests_for(tokenizer, 4))
        assert [r.request_id for r in results] == ["r0", "r1", "r2", "r3"]
    finally:
        pool.shutdown()


def test_fault_settings_are_checked(tokenizer: PreTrainedTokenizerFast) -> None:
    engines = [FakeEngine(tokenizer=tokenizer, script=SCRIPT)]
    handles = RolloutPool.in_process(engines)._engines
    with pytest.raises(ValueError, match="needs restart_engine"):
        RolloutPool(engines=handles, engine_failure="restart")
    with pytest.raises(ValueError, match="engine_failure='sometimes'"):
        RolloutPool(engines=handles, engine_failure="sometimes")
    with pytest.raises(ValueError, match="wait_timeout_s must be > 0"):
        RolloutPool(engines=handles, wait_timeout_s=0)


class KilledEngineHandle:
    """An engine whose process was killed: every call fails with Ray's `ActorDiedError`, whose
    text names the class, pid and node as Ray 2.60 writes them."""

    name = "engine0:VLLMEngine"

    def __init__(self, pid: int) -> None:
        from ray.core.generated.common_pb2 import ActorDiedErrorContext
        from ray.exceptions import ActorDiedError

        self.error = ActorDiedError(
            ActorDiedErrorContext(
                class_name="VLLMEngine",
                actor_id=bytes(16),
                pid=pid,
                node_ip_address="10.0.0.7",
                error_message="The actor died unexpectedly: killed by SIGKILL.",
            )
        )

    def generate(self, requests: Sequence[GenerationRequest]) -> Future:
        future: Future = Future()
        future.set_exception(self.error)
        return future

    def shutdown(self) -> None:
        pass


def test_an_engine_death_that_stops_the_run_names_the_engines_log_file(
    tokenizer: PreTrainedTokenizerFast, tmp_path: Path
) -> None:
    log = library_log_file(tmp_path, "VLLMEngine", 4242)
    log.write_text("Fatal Python error: Aborted\n")
    pool = RolloutPool(engines=[KilledEngineHandle(4242)], engine_failure="fail")  # type: ignore[list-item]
    set_library_log_dir(tmp_path)
    try:
        pool.submit(requests_for(tokenizer, 2))
        with pytest.raises(RuntimeError, match="died") as raised:
            pool.next_completed(timeout_s=10)
    finally:
        set_library_log_dir(None)
    message = str(raised.value)
    assert "faults.engine_failure=fail" in message
    assert (
        f"VLLMEngine pid 4242: its output (library warnings, what it printed before it "
        f"stopped) is in {log}" in message
    )
