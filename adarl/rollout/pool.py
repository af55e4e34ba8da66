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

An engine whose process dies (a Ray actor killed, its node lost: `adarl.cluster.is_actor_death`)
is handled per `engine_failure` (adarl/config/faults.py):

    "restart":  a new engine takes its slot; it is handed the current weights (the weight
                restorer, `set_weight_restorer`) before it serves anything
    "continue": the slot is dropped; the pool runs on with the others
    "fail":     the error propagates, naming the engine

Under the first two, every chunk that was in flight on the dead engine is re-issued, unchanged
(the same request ids and seeds, so the same samples on the same weights), to the engines
alive. A chunk's results are handed out only from a call that completed, so each request's
results come out of the pool exactly once, whether or not the dead engine had generated them.
`max_engine_restarts` bounds the deaths survived. Every wait has a limit (`wait_timeout_s`):
`TimeoutError` names what was awaited and the config key.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from adarl.cluster import (
    InProcessWorker,
    is_actor_death,
    library_log_note,
    result_within,
    spawn_actor,
)
from adarl.config.faults import FaultsConfig
from adarl.config.rollout import RolloutConfig
from adarl.rollout.base import RolloutEngine
from adarl.rollout.builders import engine_class_and_kwargs
from adarl.rollout.fake import FakePrompt
from adarl.types import GenerationRequest, GenerationResult

log = logging.getLogger(__name__)

ENGINE_FAILURE_MODES = ("restart", "continue", "fail")
WAIT_TIMEOUT_KEY = "faults.rollout_wait_timeout_s"


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

        ray.kill(self._actor)  # also fine on an actor that already died


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

    def __init__(
        self,
        *,
        engines: Sequence[EngineHandle],
        max_samples_per_call: int = 256,
        engine_failure: str = "fail",
        max_engine_restarts: int = 0,
        restart_engine: Callable[[int, int], EngineHandle] | None = None,
        wait_timeout_s: float | None = None,
    ) -> None:
        """`engine_failure`, `max_engine_restarts`: see the module docstring. `restart_engine
        (slot, restart_number)` starts a replacement engine (needed for "restart").
        `wait_timeout_s`: the longest any call waits for engines (None = no limit)."""
        if not engines:
            raise ValueError("RolloutPool needs at least one engine")
        if max_samples_per_call < 1:
            raise ValueError(f"max_samples_per_call must be >= 1, got {max_samples_per_call}")
        if engine_failure not in ENGINE_FAILURE_MODES:
            raise ValueError(
                f"engine_failure={engine_failure!r}; use one of {list(ENGINE_FAILURE_MODES)}"
            )
        if engine_failure == "restart" and restart_engine is None:
            raise ValueError(
                "engine_failure='restart' needs restart_engine (how to start a replacement); "
                "build the pool with RolloutPool.ray_actors / build_rollout_pool"
            )
        if wait_timeout_s is not None and not wait_timeout_s > 0:
            raise ValueError(f"wait_timeout_s must be > 0 or None, got {wait_timeout_s}")
        self._engines = list(engines)
        self._alive = [True] * len(self._engines)
        self._max_samples_per_call = max_samples_per_call
        self._engine_failure = engine_failure
        self._max_engine_restarts = max_engine_restarts
        self._restart_engine = restart_engine
        self._wait_timeout_s = wait_timeout_s
        self._weight_restorer: Callable[[Any], None] | None = None
        self._deaths = 0  # engine deaths survived so far (restarted or dropped)
        self._lock = threading.Lock()
        self._loads = [_EngineLoad() for _ in self._engines]
        self._completed: queue.Queue[_Call] = queue.Queue()
        self._ready: deque[GenerationResult] = deque()
        self._streaming_calls = 0  # submitted streaming calls not yet taken off the queue
        self._pending_ids: set[str] = set()
        self._window = _Window(time=time.perf_counter(), busy_s=[0.0] * len(self._engines))
        self._window_deaths = 0
        self._window_reissued = 0

    # -- constructors ------------------------------------------------------------------------

    @classmethod
    def in_process(
        cls,
        engines: Sequence[RolloutEngine],
        *,
        max_samples_per_call: int = 256,
        wait_timeout_s: float | None = None,
    ) -> RolloutPool:
        """Engines in this process (they share its fate: no engine death to recover from)."""
        handles = [
            LocalEngineHandle(engine, name=f"engine{i}:{type(engine).__name__}")
            for i, engine in enumerate(engines)
        ]
        return cls(
            engines=handles,
            max_samples_per_call=max_samples_per_call,
            wait_timeout_s=wait_timeout_s,
        )

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
        scheduling: Sequence[Any] | None = None,
        engine_failure: str = "fail",
        max_engine_restarts: int = 0,
        wait_timeout_s: float | None = None,
    ) -> RolloutPool:
        """`num_engines` actors of `engine_class(**engine_kwargs)` (Ray must be initialised).

        `scheduling`: per engine, the Ray scheduling strategy that places it (the resource
        plan's, `adarl.cluster.ResourcePlan.scheduling`); a restarted engine prefers its slot's
        node and goes elsewhere if that node is gone."""
        strategies = list(scheduling) if scheduling is not None else [None] * num_engines
        if len(strategies) != num_engines:
            raise ValueError(
                f"scheduling has {len(strategies)} strategies for {num_engines} engines"
            )

        def start(slot: int, restart: int) -> RayEngineHandle:
            strategy = strategies[slot]
            if restart and strategy is not None and hasattr(strategy, "soft"):
                from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

                strategy = NodeAffinitySchedulingStrategy(node_id=strategy.node_id, soft=True)
            actor = spawn_actor(
                engine_class,
                num_cpus=num_cpus_per_engine,
                num_gpus=num_gpus_per_engine,
                scheduling_strategy=strategy,
                **engine_kwargs,
            )
            suffix = f".{restart}" if restart else ""
            return RayEngineHandle(actor, name=f"engine{slot}{suffix}:{engine_class.__name__}")

        return cls(
            engines=[start(i, 0) for i in range(num_engines)],
            max_samples_per_call=max_samples_per_call,
            engine_failure=engine_failure,
            max_engine_restarts=max_engine_restarts,
            restart_engine=start,
            wait_timeout_s=wait_timeout_s,
        )

    @property
    def num_engines(self) -> int:
        """Engines serving now (fewer than started after deaths under engine_failure=continue)."""
        return sum(self._alive)

    @property
    def wait_timeout_s(self) -> float | None:
        """The longest any call waits for engines (faults.rollout_wait_timeout_s)."""
        return self._wait_timeout_s

    def set_weight_restorer(self, restore: Callable[[Any], None] | None) -> None:
        """`restore(endpoint)` loads the current weights into a restarted engine (its endpoint
        as `engine_endpoints` gives it) before the engine serves anything; the session passes
        `WeightSync.resync`. Without one, a restarted engine keeps its initial weights."""
        self._weight_restorer = restore

    # -- streaming ---------------------------------------------------------------------------

    def submit(self, requests: Sequence[GenerationRequest]) -> None:
        """Queue `requests`; their results come back through `next_completed`/`results`."""
        self._reserve_ids(requests)
        for chunk in self._chunks(requests):
            self._submit_streaming(chunk)

    def next_completed(self, timeout_s: float | None = None) -> GenerationResult:
        """The next result to complete (blocking up to `timeout_s`, default the pool's
        `wait_timeout_s`; `TimeoutError` after). Re-issues the chunks of an engine that died."""
        timeout_s = self._wait_timeout_s if timeout_s is None else timeout_s
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while not self._ready:
            with self._lock:
                if self._streaming_calls == 0:
                    raise LookupError("next_completed: nothing submitted is outstanding")
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                call = self._completed.get(timeout=remaining)
            except queue.Empty:
                raise TimeoutError(self._no_result_message(timeout_s)) from None
            with self._lock:
                self._streaming_calls -= 1
            if self._recovered(call, deadline):
                self._submit_streaming(call.chunk)  # same requests, on an engine alive
                continue
            self._ready.extend(self._unwrap(call))
        return self._ready.popleft()

    def drain_completed(self, timeout_s: float | None = None) -> list[GenerationResult]:
        """Block for the next result (at most `timeout_s`, default the pool's `wait_timeout_s`),
        then also take every other result already back."""
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

    def outstanding_samples_per_engine(self) -> list[int]:
        """Samples given to each engine serving now and not yet returned (monitoring)."""
        with self._lock:
            return [
                load.outstanding_samples
                for load, alive in zip(self._loads, self._alive, strict=True)
                if alive
            ]

    def engine_handles(self) -> list[EngineHandle]:
        """The engines serving now (for fault-injection tests and monitoring: e.g. the Ray actor
        of each, `handle.endpoint`)."""
        return [engine for engine, alive in zip(self._engines, self._alive, strict=True) if alive]

    # -- synchronous helpers -----------------------------------------------------------------

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        """Results of `requests` in request order (a barrier: for evaluation, not training),
        within the pool's `wait_timeout_s` in all. Chunks of an engine that died are re-issued."""
        self._reserve_ids(requests)
        timeout_s = self._wait_timeout_s
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        calls = deque(self._dispatch(chunk, on_done=None) for chunk in self._chunks(requests))
        by_id: dict[str, GenerationResult] = {}
        while calls:
            call = calls.popleft()
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                call.future.exception(timeout=remaining)  # waits; an error is handled below
            except concurrent.futures.TimeoutError:
                raise TimeoutError(self._no_result_message(timeout_s)) from None
            if self._recovered(call, deadline):
                calls.append(self._dispatch(call.chunk, on_done=None))
                continue
            by_id.update((result.request_id, result) for result in self._unwrap(call))
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
        """Load `weights` on every engine (after their already-queued work) and wait. An engine
        that died meanwhile is replaced (or dropped) per `engine_failure`, then loaded too."""
        payload = self._engines[0].share(dict(weights))
        slots = self._alive_slots()
        calls = [(slot, self._engines[slot]) for slot in slots]
        futures = [handle.update_weights(version, payload) for _, handle in calls]
        for (slot, handle), future in zip(calls, futures, strict=True):
            try:
                self._result_of(handle, future)
            except RuntimeError as error:
                if not self._handle_death(slot, handle, error.__cause__, deadline=None):
                    raise
                if self._alive[slot]:
                    self._result_of(
                        self._engines[slot], self._engines[slot].update_weights(version, payload)
                    )

    def engine_endpoints(self) -> Sequence[Any]:
        """Per engine serving now, the worker or actor handle a `WeightSync` pushes to. Calls
        through it run in the engine's call order, after the generations already queued there.
        A live view: after a restart it holds the new engine, after a drop one fewer."""
        return _LiveEndpoints(self)

    def weight_versions(self) -> list[int]:
        handles = self.engine_handles()
        futures = [engine.weight_version() for engine in handles]
        return [
            int(self._result_of(engine, future))
            for engine, future in zip(handles, futures, strict=True)
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
            deaths, self._window_deaths = self._window_deaths, 0
            reissued, self._window_reissued = self._window_reissued, 0
        window = self._window
        elapsed = max(now - window.time, 1e-9)
        utilisation = [
            (b - b0) / elapsed
            for b, b0, alive in zip(busy, window.busy_s, self._alive, strict=True)
            if alive
        ]
        self._window = _Window(time=now, samples=samples, tokens=tokens, busy_s=busy)
        metrics = {
            "perf/rollout_samples_per_s": (samples - window.samples) / elapsed,
            "perf/rollout_tokens_per_s": (tokens - window.tokens) / elapsed,
            "perf/rollout_engine_utilisation": sum(utilisation) / len(utilisation),
            "perf/rollout_engine_utilisation_min": min(utilisation),
            "sampling/engine_samples": float(samples - window.samples),
            "sampling/engine_tokens": float(tokens - window.tokens),
            "sampling/rollout_outstanding_samples": float(outstanding),
            # Faults survived in the window (module docstring): engines that died, and the
            # requests re-issued because they were in flight on them.
            "sampling/rollout_engine_deaths": float(deaths),
            "sampling/rollout_requests_reissued": float(reissued),
            "sampling/rollout_engines_alive": float(sum(self._alive)),
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

    def _alive_slots(self) -> list[int]:
        return [slot for slot, alive in enumerate(self._alive) if alive]

    def _least_loaded(self) -> int:
        with self._lock:
            slots = [slot for slot, alive in enumerate(self._alive) if alive]
            return min(slots, key=lambda i: self._loads[i].outstanding_samples)

    def _submit_streaming(self, chunk: list[GenerationRequest]) -> None:
        with self._lock:
            self._streaming_calls += 1
        self._dispatch(chunk, on_done=self._completed.put)

    def _dispatch(
        self,
        chunk: list[GenerationRequest],
        *,
        on_done: Callable[[_Call], None] | None,
    ) -> _Call:
        """Send `chunk` to the least-loaded engine; `on_done(call)` once its call completes."""
        engine = self._least_loaded()
        handle = self._engines[engine]
        samples = sum(request.num_samples for request in chunk)
        with self._lock:
            load = self._loads[engine]
            if load.outstanding_calls == 0:
                load.busy_since = time.perf_counter()
            load.outstanding_calls += 1
            load.outstanding_samples += samples
        future = handle.generate(chunk)
        call = _Call(slot=engine, handle=handle, future=future, chunk=chunk)

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
            future.add_done_callback(lambda _: on_done(call))
        return call

    def _unwrap(self, call: _Call) -> list[GenerationResult]:
        ids = [request.request_id for request in call.chunk]
        try:
            results: list[GenerationResult] = self._result_of(call.handle, call.future)
        finally:
            with self._lock:
                self._pending_ids.difference_update(ids)
        returned = [result.request_id for result in results]
        if returned != ids:
            raise RuntimeError(
                f"rollout engine {call.handle.name} returned results for {returned} "
                f"but was asked for {ids}"
            )
        return results

    def _recovered(self, call: _Call, deadline: float | None) -> bool:
        """True when `call` (done) failed because its engine died and the pool recovered (the
        caller re-issues `call.chunk`); False when it has results or an error to propagate."""
        error = call.future.exception()
        if error is None or not self._handle_death(call.slot, call.handle, error, deadline):
            return False
        with self._lock:
            self._window_reissued += len(call.chunk)
        return True

    def _handle_death(
        self, slot: int, handle: EngineHandle, error: BaseException | None, deadline: float | None
    ) -> bool:
        """If `error` is `handle`'s process dying: restart or drop its slot per the policy
        (once per dead engine: its other failed calls find the slot already handled) and return
        True; raise when the policy says stop. False when `error` is not a death."""
        if error is None or not is_actor_death(error):
            return False
        with self._lock:
            handled = self._engines[slot] is not handle or not self._alive[slot]
        if handled:
            return True
        mode, limit = self._engine_failure, self._max_engine_restarts
        # Its last words (a C++ abort, a library error) are in its log file, when it has one.
        output = library_log_note(error)
        if mode == "fail" or self._deaths >= limit:
            reason = (
                "faults.engine_failure=fail"
                if mode == "fail"
                else f"it is death {self._deaths + 1} and faults.max_engine_restarts={limit}"
            )
            where = f"{output}; see also" if output else "Look for why in"
            raise RuntimeError(
                f"rollout engine {handle.name} died ({type(error).__name__}: {error}); the run "
                f"stops because {reason}. {where} the Ray logs (host OOM, node lost); "
                "set faults.engine_failure=restart or continue (and faults.max_engine_restarts) "
                "to survive engine deaths"
            ) from error
        self._deaths += 1
        with self._lock:
            self._window_deaths += 1
        with contextlib.suppress(Exception):  # it is dead; make sure Ray forgets it too
            handle.shutdown()
        if mode == "continue" or self._restart_engine is None:
            with self._lock:
                self._alive[slot] = False
            if not any(self._alive):
                raise RuntimeError(
                    f"rollout engine {handle.name} died and no engine is left "
                    "(faults.engine_failure=continue); the run cannot go on"
                    + (f". {output}" if output else "")
                ) from error
            log.warning(
                "rollout engine %s died (%s); continuing with %d engine(s), re-issuing its "
                "in-flight requests (faults.engine_failure=continue, death %d of at most %d)%s",
                handle.name,
                type(error).__name__,
                sum(self._alive),
                self._deaths,
                limit,
                f". {output}" if output else "",
            )
            return True
        log.warning(
            "rollout engine %s died (%s); restarting it and re-issuing its in-flight requests "
            "(faults.engine_failure=restart, death %d of at most %d)%s",
            handle.name,
            type(error).__name__,
            self._deaths,
            limit,
            f". {output}" if output else "",
        )
        replacement = self._restart_engine(slot, self._deaths)
        remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
        result_within(
            replacement.weight_version(),  # returns once the engine is up
            remaining,
            waiting_for=f"the restarted rollout engine {replacement.name} to start",
            key=WAIT_TIMEOUT_KEY,
        )
        if self._weight_restorer is not None:
            self._weight_restorer(replacement.endpoint)  # serves the current weights, never v0
        with self._lock:
            self._engines[slot] = replacement
        log.info("rollout engine %s is up and serving", replacement.name)
        return True

    def _no_result_message(self, timeout_s: float | None) -> str:
        with self._lock:
            busy = [
                f"{self._engines[slot].name} ({load.outstanding_samples} samples)"
                for slot, load in enumerate(self._loads)
                if self._alive[slot] and load.outstanding_calls
            ]
        return (
            f"no rollout completed within {timeout_s:g} s ({WAIT_TIMEOUT_KEY}); waiting on "
            f"{', '.join(busy) or 'no engine'}. Raise {WAIT_TIMEOUT_KEY} for slow engines or "
            "long generations, or look for a stuck engine in the Ray logs"
        )

    def _result_of(self, engine: EngineHandle, future: Future) -> Any:
        """`future`'s result (at most the pool's `wait_timeout_s`); errors name the engine."""
        try:
            return future.result(timeout=self._wait_timeout_s)
        except concurrent.futures.TimeoutError:
            if future.done():  # the engine itself raised a TimeoutError
                raise RuntimeError(
                    f"rollout engine {engine.name} failed: {future.exception()}"
                ) from future.exception()
            raise TimeoutError(
                f"rollout engine {engine.name} did not answer within {self._wait_timeout_s:g} s "
                f"({WAIT_TIMEOUT_KEY})"
            ) from None
        except Exception as error:
            raise RuntimeError(f"rollout engine {engine.name} failed: {error}") from error


@dataclass(frozen=True)
class _Call:
    """One engine call in flight: which slot and engine took `chunk`, and its future."""

    slot: int
    handle: EngineHandle
    future: Future
    chunk: list[GenerationRequest]


class _LiveEndpoints(Sequence[Any]):
    """The endpoints of a pool's engines serving now (see `RolloutPool.engine_endpoints`)."""

    def __init__(self, pool: RolloutPool) -> None:
        self._pool = pool

    def _current(self) -> list[Any]:
        return [handle.endpoint for handle in self._pool.engine_handles()]

    def __len__(self) -> int:
        return self._pool.num_engines

    def __getitem__(self, index: Any) -> Any:
        return self._current()[index]

    def __iter__(self) -> Iterator[Any]:
        return iter(self._current())


def build_rollout_pool(
    config: RolloutConfig,
    *,
    model_path: str,
    num_engines: int = 1,
    in_process: bool = False,
    num_cpus_per_engine: float = 1.0,
    num_gpus_per_engine: float = 0.0,
    fake_script: Mapping[str, FakePrompt] | None = None,
    faults: FaultsConfig | None = None,
    scheduling: Sequence[Any] | None = None,
) -> RolloutPool:
    """`num_engines` engines built from `config`: in this process, or as Ray actors (connecting
    to or starting Ray with `adarl.cluster.ensure_ray` defaults if not connected). `model_path`
    comes from `adarl.models.resolve_model_config`; `fake_script` only for `engine=fake`.
    `faults`: engine-death policy and wait limit (defaults: `FaultsConfig()`); `scheduling`:
    the resource plan's placement of each engine actor."""
    if num_engines < 1:
        raise ValueError(f"build_rollout_pool: num_engines must be >= 1, got {num_engines}")
    faults = faults or FaultsConfig()
    faults.validate()
    engine_class, kwargs = engine_class_and_kwargs(
        config, model_path=model_path, fake_script=fake_script
    )
    if in_process:
        return RolloutPool.in_process(
            [engine_class(**kwargs) for _ in range(num_engines)],
            max_samples_per_call=config.max_samples_per_call,
            wait_timeout_s=faults.rollout_wait_timeout_s,
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
        scheduling=scheduling,
        engine_failure=faults.engine_failure,
        max_engine_restarts=faults.max_engine_restarts,
        wait_timeout_s=faults.rollout_wait_timeout_s,
    )
