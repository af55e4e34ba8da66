"""`RolloutPool`: several engines behind one streaming interface, in-process or as Ray actors.

    submit(requests) ─► chunks of ≤ max_samples_per_call samples ─► least-loaded engine
    engine call completes ─► its results join the completion queue ─► next_completed()/results()

Load is the number of samples an engine has been given and not yet returned; each chunk goes to
the engine with the least. A request is never split across calls (its samples share one seed
stream), so a request larger than `max_samples_per_call` is a chunk of its own.

Every engine runs its calls one at a time in submission order (an `InProcessWorker` thread or a
Ray actor with `max_concurrency=1`), so `update_weights` queued behind in-flight chunks never
changes weights mid-generation, and each result carries the version that produced it.

There is one code path: an engine handle returns `concurrent.futures.Future`s, from a private
thread in-process or from `ObjectRef.future()` on Ray. Errors raised by an engine propagate from
`next_completed`/`generate`/`update_weights` with the engine named.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from adarl.cluster import InProcessWorker, spawn_actor
from adarl.config.rollout import RolloutConfig
from adarl.rollout.base import RolloutEngine
from adarl.rollout.builders import engine_class_and_kwargs
from adarl.rollout.fake import FakePrompt
from adarl.types import GenerationRequest, GenerationResult


class EngineHandle(Protocol):
    """Asynchronous access to one engine; every method returns at once with a Future."""

    name: str

    def generate(self, requests: list[GenerationRequest]) -> Future: ...
    def score(self, pairs: list[tuple[list[int], list[int]]], temperature: float) -> Future: ...
    def update_weights(self, version: int, weights: Any) -> Future: ...
    def weight_version(self) -> Future: ...
    def share(self, payload: Any) -> Any:
        """`payload` in the form to pass to every engine (an object-store ref on Ray)."""
        ...

    @property
    def endpoint(self) -> Any:
        """What `adarl.weight_sync` talks to: the `InProcessWorker` or the Ray actor handle."""
        ...

    def shutdown(self) -> None: ...


class LocalEngineHandle:
    """An engine in this process, called on its own thread."""

    def __init__(self, engine: RolloutEngine, *, name: str) -> None:
        self.name = name
        self._worker = InProcessWorker(engine)
        self._engine = engine

    def generate(self, requests: list[GenerationRequest]) -> Future:
        return self._worker.submit(self._engine.generate, requests)

    def score(self, pairs: list[tuple[list[int], list[int]]], temperature: float) -> Future:
        prompts, responses = [p for p, _ in pairs], [r for _, r in pairs]
        return self._worker.submit(self._engine.score, prompts, responses, temperature=temperature)

    def update_weights(self, version: int, weights: Any) -> Future:
        return self._worker.submit(self._engine.update_weights, version, weights)

    def weight_version(self) -> Future:
        return self._worker.submit(self._engine.weight_version)

    def share(self, payload: Any) -> Any:
        return payload

    @property
    def endpoint(self) -> InProcessWorker:
        return self._worker

    def shutdown(self) -> None:
        self._worker.shutdown()


class RayEngineHandle:
    """An engine living in a Ray actor (see `adarl.cluster.spawn_actor`)."""

    def __init__(self, actor: Any, *, name: str) -> None:
        self.name = name
        self._actor = actor

    def generate(self, requests: list[GenerationRequest]) -> Future:
        return self._actor.generate.remote(requests).future()

    def score(self, pairs: list[tuple[list[int], list[int]]], temperature: float) -> Future:
        prompts, responses = [p for p, _ in pairs], [r for _, r in pairs]
        return self._actor.score.remote(prompts, responses, temperature=temperature).future()

    def update_weights(self, version: int, weights: Any) -> Future:
        return self._actor.update_weights.remote(version, weights).future()

    def weight_version(self) -> Future:
        return self._actor.weight_version.remote().future()

    def share(self, payload: Any) -> Any:
        import ray

        return ray.put(payload)  # one copy in the object store, read by every actor

    @property
    def endpoint(self) -> Any:
        return self._actor

    def shutdown(self) -> None:
        import ray

        ray.kill(self._actor)


@dataclass
class _EngineLoad:
    outstanding_samples: int = 0
    outstanding_calls: int = 0
    busy_since: float | None = None  # set while the engine has outstanding calls
    busy_s: float = 0.0  # closed busy intervals
    samples_done: int = 0
    tokens_done: int = 0

    def busy_until(self, now: float) -> float:
        return self.busy_s + (now - self.busy_since if self.busy_since is not None else 0.0)


@dataclass
class _Window:
    """Counters at the last `metrics()` call, for per-window rates."""

    time: float
    samples: int = 0
    tokens: int = 0
    busy_s: list[float] = field(default_factory=list)


class RolloutPool:
    """Streams `GenerationResult`s from several engines (see the module docstring)."""

    def __init__(self, *, engines: Sequence[EngineHandle], max_samples_per_call: int = 256) -> None:
        if not engines:
            raise ValueError("RolloutPool needs at least one engine")
        if max_samples_per_call < 1:
            raise ValueError(f"max_samples_per_call must be >= 1, got {max_samples_per_call}")
        self._engines = list(engines)
        self._max_samples_per_call = max_samples_per_call
        self._lock = threading.Lock()
        self._loads = [_EngineLoad() for _ in self._engines]
        self._completed: queue.Queue[tuple[int, Future, list[str]]] = queue.Queue()
        self._ready: deque[GenerationResult] = deque()
        self._streaming_calls = 0  # submitted streaming calls not yet taken off the queue
        self._pending_ids: set[str] = set()
        self._window = _Window(time=time.perf_counter(), busy_s=[0.0] * len(self._engines))

    # -- constructors ------------------------------------------------------------------------

    @classmethod
    def in_process(
        cls, engines: Sequence[RolloutEngine], *, max_samples_per_call: int = 256
    ) -> RolloutPool:
        handles = [
            LocalEngineHandle(engine, name=f"engine{i}:{type(engine).__name__}")
            for i, engine in enumerate(engines)
        ]
        return cls(engines=handles, max_samples_per_call=max_samples_per_call)

    @classmethod
    def ray_actors(
        cls,
        engine_class: type,
        *,
        num_engines: int,
        engine_kwargs: Mapping[str, Any],
        num_cpus_per_engine: float = 1.0,
        num_gpus_per_engine: float = 0.0,
        max_samples_per_call: int = 256,
    ) -> RolloutPool:
        """`num_engines` actors of `engine_class(**engine_kwargs)` (Ray must be initialised)."""
        handles = [
            RayEngineHandle(
                spawn_actor(
                    engine_class,
                    num_cpus=num_cpus_per_engine,
                    num_gpus=num_gpus_per_engine,
                    **engine_kwargs,
                ),
                name=f"engine{i}:{engine_class.__name__}",
            )
            for i in range(num_engines)
        ]
        return cls(engines=handles, max_samples_per_call=max_samples_per_call)

    @property
    def num_engines(self) -> int:
        return len(self._engines)

    # -- streaming ---------------------------------------------------------------------------

    def submit(self, requests: Sequence[GenerationRequest]) -> None:
        """Queue `requests`; their results come back through `next_completed`/`results`."""
        self._reserve_ids(requests)
        for chunk in self._chunks(requests):
            engine = self._least_loaded()
            with self._lock:
                self._streaming_calls += 1
            ids = [request.request_id for request in chunk]
            self._dispatch(
                engine, chunk, on_done=lambda f, e=engine, i=ids: self._completed.put((e, f, i))
            )

    def next_completed(self, timeout_s: float | None = None) -> GenerationResult:
        """The next result to complete (blocking up to `timeout_s`; `TimeoutError` after)."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while not self._ready:
            with self._lock:
                if self._streaming_calls == 0:
                    raise LookupError("next_completed: nothing submitted is outstanding")
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                engine, future, ids = self._completed.get(timeout=remaining)
            except queue.Empty:
                raise TimeoutError(f"no rollout completed within {timeout_s} s") from None
            with self._lock:
                self._streaming_calls -= 1
            self._ready.extend(self._unwrap(engine, future, ids))
        return self._ready.popleft()

    def drain_completed(self, timeout_s: float | None = None) -> list[GenerationResult]:
        """Block for the next result, then also take every other result already back."""
        drained = [self.next_completed(timeout_s)]
        while True:
            with self._lock:
                if not self._ready and self._completed.empty():
                    return drained
            drained.append(self.next_completed(timeout_s))

    def results(self, timeout_s: float | None = None) -> Iterator[GenerationResult]:
        """Every outstanding submitted result, in completion order."""
        while self.has_pending():
            yield self.next_completed(timeout_s)

    def has_pending(self) -> bool:
        with self._lock:
            return bool(self._ready) or self._streaming_calls > 0

    def outstanding_samples(self) -> int:
        with self._lock:
            return sum(load.outstanding_samples for load in self._loads)

    # -- synchronous helpers -----------------------------------------------------------------

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        """Results of `requests` in request order (a barrier: for evaluation, not training)."""
        self._reserve_ids(requests)
        calls = []
        for chunk in self._chunks(requests):
            engine = self._least_loaded()
            ids = [request.request_id for request in chunk]
            calls.append((engine, self._dispatch(engine, chunk, on_done=None), ids))
        by_id = {
            result.request_id: result
            for engine, future, ids in calls
            for result in self._unwrap(engine, future, ids)
        }
        return [by_id[request.request_id] for request in requests]

    def score(
        self,
        prompt_token_ids: Sequence[Sequence[int]],
        response_token_ids: Sequence[Sequence[int]],
        *,
        temperature: float = 1.0,
    ) -> list[list[float]]:
        """Teacher-forced log π_T(response_i[t] | prompt_i, response_i[:t]) for every pair, in
        order (`RolloutEngine.score`; π_T = softmax(logits / T), never truncated).

        Batched like generation: the pairs are cut into calls of at most `max_samples_per_call`
        pairs, each sent to the least-loaded engine (a pair counts as one sample of load while
        its call runs, and its time as engine busy time), and the calls run concurrently. A
        barrier, like `generate`: it returns when every call has.
        """
        if len(prompt_token_ids) != len(response_token_ids):
            raise ValueError(
                f"RolloutPool.score: {len(prompt_token_ids)} prompts but "
                f"{len(response_token_ids)} responses; pass one response per prompt"
            )
        pairs = [
            (list(prompt), list(response))
            for prompt, response in zip(prompt_token_ids, response_token_ids, strict=True)
        ]
        size = self._max_samples_per_call
        calls = []
        for start in range(0, len(pairs), size):
            chunk = pairs[start : start + size]
            engine = self._least_loaded()
            with self._lock:
                load = self._loads[engine]
                if load.outstanding_calls == 0:
                    load.busy_since = time.perf_counter()
                load.outstanding_calls += 1
                load.outstanding_samples += len(chunk)
            future = self._engines[engine].score(chunk, temperature)
            size_of_call = len(chunk)
            future.add_done_callback(
                lambda _, e=engine, n=size_of_call: self._release_score_call(e, n)
            )
            calls.append((engine, future, len(chunk)))
        scores: list[list[float]] = []
        for engine, future, expected in calls:
            chunk_scores = self._result_of(self._engines[engine], future)
            if len(chunk_scores) != expected:
                raise RuntimeError(
                    f"rollout engine {self._engines[engine].name} returned {len(chunk_scores)} "
                    f"scores for {expected} pairs"
                )
            scores.extend([float(x) for x in row] for row in chunk_scores)
        return scores

    def _release_score_call(self, engine: int, pairs: int) -> None:
        now = time.perf_counter()
        with self._lock:
            load = self._loads[engine]
            load.outstanding_calls -= 1
            load.outstanding_samples -= pairs
            if load.outstanding_calls == 0 and load.busy_since is not None:
                load.busy_s += now - load.busy_since
                load.busy_since = None

    def update_weights(self, version: int, weights: Mapping[str, torch.Tensor]) -> None:
        """Load `weights` on every engine (after their already-queued work) and wait."""
        payload = self._engines[0].share(dict(weights))
        futures = [engine.update_weights(version, payload) for engine in self._engines]
        for engine, future in zip(self._engines, futures, strict=True):
            self._result_of(engine, future)

    def engine_endpoints(self) -> list[Any]:
        """Per engine, the worker or actor handle a `WeightSync` pushes to. Calls through it
        run in the engine's call order, after the generations already queued there."""
        return [engine.endpoint for engine in self._engines]

    def weight_versions(self) -> list[int]:
        futures = [engine.weight_version() for engine in self._engines]
        return [
            int(self._result_of(engine, future))
            for engine, future in zip(self._engines, futures, strict=True)
        ]

    def metrics(self) -> dict[str, float]:
        """Rates and engine utilisation since the previous call (the window the caller opens,
        e.g. one rollout phase, so evaluation traffic between phases is not counted) and the
        samples still outstanding."""
        now = time.perf_counter()
        with self._lock:
            samples = sum(load.samples_done for load in self._loads)
            tokens = sum(load.tokens_done for load in self._loads)
            busy = [load.busy_until(now) for load in self._loads]
            outstanding = sum(load.outstanding_samples for load in self._loads)
        window = self._window
        elapsed = max(now - window.time, 1e-9)
        utilisation = [(b - b0) / elapsed for b, b0 in zip(busy, window.busy_s, strict=True)]
        self._window = _Window(time=now, samples=samples, tokens=tokens, busy_s=busy)
        metrics = {
            "perf/rollout_samples_per_s": (samples - window.samples) / elapsed,
            "perf/rollout_tokens_per_s": (tokens - window.tokens) / elapsed,
            "perf/rollout_engine_utilisation": sum(utilisation) / len(utilisation),
            "perf/rollout_engine_utilisation_min": min(utilisation),
            "sampling/engine_samples": float(samples - window.samples),
            "sampling/engine_tokens": float(tokens - window.tokens),
            "sampling/rollout_outstanding_samples": float(outstanding),
        }
        return metrics

    def shutdown(self) -> None:
        for engine in self._engines:
            engine.shutdown()

    def __enter__(self) -> RolloutPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    # -- internals ---------------------------------------------------------------------------

    def _reserve_ids(self, requests: Sequence[GenerationRequest]) -> None:
        ids = [request.request_id for request in requests]
        with self._lock:
            clash = next((i for i in ids if i in self._pending_ids), None)
            if clash is None and len(set(ids)) != len(ids):
                clash = next(i for i in ids if ids.count(i) > 1)
            if clash is not None:
                raise ValueError(
                    f"request id {clash!r} is already outstanding in this pool; request ids "
                    "must be unique among requests in flight"
                )
            self._pending_ids.update(ids)

    def _chunks(self, requests: Sequence[GenerationRequest]) -> Iterator[list[GenerationRequest]]:
        chunk: list[GenerationRequest] = []
        samples = 0
        for request in requests:
            if chunk and samples + request.num_samples > self._max_samples_per_call:
                yield chunk
                chunk, samples = [], 0
            chunk.append(request)
            samples += request.num_samples
        if chunk:
            yield chunk

    def _least_loaded(self) -> int:
        with self._lock:
            return min(range(len(self._loads)), key=lambda i: self._loads[i].outstanding_samples)

    def _dispatch(
        self,
        engine: int,
        chunk: list[GenerationRequest],
        *,
        on_done: Callable[[Future], None] | None,
    ) -> Future:
        samples = sum(request.num_samples for request in chunk)
        with self._lock:
            load = self._loads[engine]
            if load.outstanding_calls == 0:
                load.busy_since = time.perf_counter()
            load.outstanding_calls += 1
            load.outstanding_samples += samples
        future = self._engines[engine].generate(chunk)

        def account(done: Future) -> None:
            now = time.perf_counter()
            results = done.result() if done.exception() is None else []
            with self._lock:
                load = self._loads[engine]
                load.outstanding_calls -= 1
                load.outstanding_samples -= samples
                load.samples_done += sum(len(r.completions) for r in results)
                load.tokens_done += sum(len(c.token_ids) for r in results for c in r.completions)
                if load.outstanding_calls == 0 and load.busy_since is not None:
                    load.busy_s += now - load.busy_since
                    load.busy_since = None

        # Accounting first, so a consumer woken by `on_done` sees the load already released.
        future.add_done_callback(account)
        if on_done is not None:
            future.add_done_callback(on_done)
        return future

    def _unwrap(self, engine: int, future: Future, ids: list[str]) -> list[GenerationResult]:
        try:
            results: list[GenerationResult] = self._result_of(self._engines[engine], future)
        finally:
            with self._lock:
                self._pending_ids.difference_update(ids)
        returned = [result.request_id for result in results]
        if returned != ids:
            raise RuntimeError(
                f"rollout engine {self._engines[engine].name} returned results for {returned} "
                f"but was asked for {ids}"
            )
        return results

    @staticmethod
    def _result_of(engine: EngineHandle, future: Future) -> Any:
        try:
            return future.result()
        except Exception as error:
            raise RuntimeError(f"rollout engine {engine.name} failed: {error}") from error


def build_rollout_pool(
    config: RolloutConfig,
    *,
    model_path: str,
    num_engines: int = 1,
    in_process: bool = False,
    num_cpus_per_engine: float = 1.0,
    num_gpus_per_engine: float = 0.0,
    fake_script: Mapping[str, FakePrompt] | None = None,
) -> RolloutPool:
    """`num_engines` engines built from `config`: in this process, or as Ray actors (connecting
    to or starting Ray with `adarl.cluster.ensure_ray` defaults if not connected). `model_path`
    comes from `adarl.models.resolve_model_config`; `fake_script` only for `engine=fake`."""
    if num_engines < 1:
        raise ValueError(f"build_rollout_pool: num_engines must be >= 1, got {num_engines}")
    engine_class, kwargs = engine_class_and_kwargs(
        config, model_path=model_path, fake_script=fake_script
    )
    if in_process:
        return RolloutPool.in_process(
            [engine_class(**kwargs) for _ in range(num_engines)],
            max_samples_per_call=config.max_samples_per_call,
        )
    from adarl.cluster import ensure_ray

    ensure_ray()
    return RolloutPool.ray_actors(
        engine_class,
        num_engines=num_engines,
        engine_kwargs=kwargs,
        num_cpus_per_engine=num_cpus_per_engine,
        num_gpus_per_engine=num_gpus_per_engine,
        max_samples_per_call=config.max_samples_per_call,
    )
