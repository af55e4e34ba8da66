"""The RolloutPool in-process, over scripted engines (real pool, fake engines)."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator, Sequence

import pytest
from transformers import PreTrainedTokenizerFast, Qwen2Config

from adarl.config.rollout import RolloutConfig
from adarl.models.tokenizer import build_char_tokenizer
from adarl.rollout.fake import FakeEngine, FakePrompt
from adarl.rollout.pool import RolloutPool, build_rollout_pool
from adarl.types import GenerationRequest, GenerationResult, SamplingParams

SCRIPT = {f"{a}+{a}=": FakePrompt(pass_rate=0.5, answer=str(2 * a)) for a in range(10)}


class GatedEngine(FakeEngine):
    """A scripted engine whose `generate` waits until the test opens its gate."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.gate = threading.Event()
        self.calls = 0

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        self.calls += 1
        if not self.gate.wait(timeout=30):
            raise TimeoutError("test gate never opened")
        return super().generate(requests)


class FailingEngine(FakeEngine):
    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        raise RuntimeError("engine exploded")


@pytest.fixture(scope="module")
def tokenizer() -> PreTrainedTokenizerFast:
    return build_char_tokenizer()


def requests_for(
    tokenizer: PreTrainedTokenizerFast, count: int, *, n: int = 4, start: int = 0
) -> list[GenerationRequest]:
    return [
        GenerationRequest(
            request_id=f"r{start + i}",
            prompt_token_ids=tuple(tokenizer(f"{i % 10}+{i % 10}=")["input_ids"]),
            num_samples=n,
            sampling=SamplingParams(max_new_tokens=4),
            seed=start + i,
        )
        for i in range(count)
    ]


@pytest.fixture
def gated_pool(tokenizer: PreTrainedTokenizerFast) -> Iterator[tuple[RolloutPool, list]]:
    engines = [GatedEngine(tokenizer=tokenizer, script=SCRIPT) for _ in range(2)]
    pool = RolloutPool.in_process(engines, max_samples_per_call=8)
    yield pool, engines
    for engine in engines:
        engine.gate.set()
    pool.shutdown()


def test_streams_every_request_exactly_once(tokenizer: PreTrainedTokenizerFast) -> None:
    engines = [FakeEngine(tokenizer=tokenizer, script=SCRIPT, seed=s) for s in range(3)]
    with RolloutPool.in_process(engines, max_samples_per_call=8) as pool:
        submitted = requests_for(tokenizer, 50)
        pool.submit(submitted[:20])
        received: list[GenerationResult] = []
        # Keep the pool fed while consuming, as the driver does.
        for batch in (submitted[20:35], submitted[35:]):
            for _ in range(10):
                received.append(pool.next_completed(timeout_s=30))
            pool.submit(batch)
        received += list(pool.results(timeout_s=30))
        assert not pool.has_pending()
        assert Counter(r.request_id for r in received) == Counter(r.request_id for r in submitted)
        assert all(len(r.completions) == 4 for r in received)
        # Every engine got work: the pool spreads chunks by outstanding samples.
        assert all(engine.metrics()["perf/rollout_samples_total"] > 0 for engine in engines)
        assert sum(e.metrics()["perf/rollout_samples_total"] for e in engines) == 50 * 4
        metrics = pool.metrics()
        assert metrics["sampling/engine_samples"] == 200
        assert metrics["sampling/rollout_outstanding_samples"] == 0
        assert metrics["perf/rollout_samples_per_s"] > 0
        assert 0 < metrics["perf/rollout_engine_utilisation"] <= 1


def test_results_come_in_completion_order_not_submission_order(gated_pool) -> None:
    pool, (slow, fast) = gated_pool
    tokenizer = build_char_tokenizer()
    # Two chunks of 8 samples: the first goes to engine 0, the second to the less loaded engine 1.
    pool.submit(requests_for(tokenizer, 4, n=4))
    assert pool.outstanding_samples() == 16
    fast.gate.set()
    first = [pool.next_completed(timeout_s=30), pool.next_completed(timeout_s=30)]
    # Results of the second chunk arrive while the first chunk is still being generated.
    assert [r.request_id for r in first] == ["r2", "r3"]
    assert pool.outstanding_samples() == 8
    with pytest.raises(TimeoutError):
        pool.next_completed(timeout_s=0.05)
    slow.gate.set()
    assert [r.request_id for r in pool.results(timeout_s=30)] == ["r0", "r1"]


def test_load_balancing_uses_outstanding_samples(gated_pool) -> None:
    pool, (first, second) = gated_pool
    tokenizer = build_char_tokenizer()
    pool.submit(requests_for(tokenizer, 2, n=8))  # two chunks of 8: one per engine
    pool.submit(requests_for(tokenizer, 1, n=2, start=10))  # both engines hold 8: engine 0
    pool.submit(requests_for(tokenizer, 1, n=2, start=20))  # engine 1 now holds less: engine 1
    for engine in (first, second):
        engine.gate.set()
    list(pool.results(timeout_s=30))
    assert first.calls == 2 and second.calls == 2
    assert first.metrics()["perf/rollout_samples_total"] == 10
    assert second.metrics()["perf/rollout_samples_total"] == 10


def test_update_weights_applies_after_queued_work(gated_pool) -> None:
    pool, engines = gated_pool
    tokenizer = build_char_tokenizer()
    pool.submit(requests_for(tokenizer, 4, n=4))
    updater = threading.Thread(target=pool.update_weights, args=(3, {}))
    updater.start()
    for engine in engines:
        engine.gate.set()
    updater.join(timeout=30)
    assert not updater.is_alive()
    # Work queued before the update was generated by the old weights and says so.
    assert {r.weight_version for r in pool.results(timeout_s=30)} == {0}
    assert pool.weight_versions() == [3, 3]
    after = pool.generate(requests_for(tokenizer, 4, n=2, start=100))
    assert {r.weight_version for r in after} == {3}


def test_generate_returns_request_order(tokenizer: PreTrainedTokenizerFast) -> None:
    engines = [FakeEngine(tokenizer=tokenizer, script=SCRIPT) for _ in range(2)]
    with RolloutPool.in_process(engines, max_samples_per_call=4) as pool:
        requests = requests_for(tokenizer, 9, n=3)
        results = pool.generate(requests)
        assert [r.request_id for r in results] == [r.request_id for r in requests]
        # The same requests give the same samples whichever engine serves them.
        assert results == FakeEngine(tokenizer=tokenizer, script=SCRIPT).generate(requests)


def test_duplicate_outstanding_request_ids_are_rejected(gated_pool) -> None:
    pool, engines = gated_pool
    tokenizer = build_char_tokenizer()
    pool.submit(requests_for(tokenizer, 1))
    with pytest.raises(ValueError, match="'r0' is already outstanding"):
        pool.submit(requests_for(tokenizer, 1))
    with pytest.raises(ValueError, match="'r5' is already outstanding"):
        pool.submit(requests_for(tokenizer, 1, start=5) * 2)
    for engine in engines:
        engine.gate.set()
    assert [r.request_id for r in pool.results(timeout_s=30)] == ["r0"]
    pool.submit(requests_for(tokenizer, 1))  # returned ids may be reused
    assert pool.next_completed(timeout_s=30).request_id == "r0"


def test_engine_errors_propagate_with_the_engine_named(tokenizer: PreTrainedTokenizerFast) -> None:
    with RolloutPool.in_process([FailingEngine(tokenizer=tokenizer, script=SCRIPT)]) as pool:
        pool.submit(requests_for(tokenizer, 1))
        with pytest.raises(RuntimeError, match="engine0:FailingEngine failed: engine exploded"):
            pool.next_completed(timeout_s=30)
        assert not pool.has_pending()
        with pytest.raises(LookupError, match="nothing submitted"):
            pool.next_completed(timeout_s=1)


def test_build_rollout_pool_in_process(tokenizer: PreTrainedTokenizerFast, tmp_path) -> None:
    tokenizer.save_pretrained(tmp_path)
    Qwen2Config(vocab_size=len(tokenizer)).save_pretrained(tmp_path)  # a model directory's config
    config = RolloutConfig(engine="fake", max_samples_per_call=4)
    with build_rollout_pool(
        config, model_path=str(tmp_path), num_engines=2, in_process=True, fake_script=SCRIPT
    ) as pool:
        assert pool.num_engines == 2
        results = pool.generate(requests_for(tokenizer, 6, n=2))
        assert len(results) == 6
    with pytest.raises(ValueError, match="fake_script"):
        build_rollout_pool(config, model_path=str(tmp_path), in_process=True)


def test_engine_endpoints_reach_the_engines_in_call_order(gated_pool) -> None:
    pool, engines = gated_pool
    tokenizer = build_char_tokenizer()
    pool.submit(requests_for(tokenizer, 4, n=4))
    endpoints = pool.engine_endpoints()
    assert [endpoint.obj for endpoint in endpoints] == engines
    # What a WeightSync does: call the engine through its worker; it runs after queued work.
    updates = [endpoint.submit(endpoint.obj.update_weights, 9, {}) for endpoint in endpoints]
    for engine in engines:
        engine.gate.set()
    for update in updates:
        update.result(timeout=30)
    assert {r.weight_version for r in pool.results(timeout_s=30)} == {0}
    assert pool.weight_versions() == [9, 9]
