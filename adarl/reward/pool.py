"""`RewardPool`: score rollouts concurrently, in order, and never crash or hang on a verifier.

Verifiers run on `num_workers` daemon threads (light verifiers release the GIL rarely but are
fast; the code verifier spends its time waiting on sandbox subprocesses). Each verification:

* that raises → reward 0, the exception as its error (`sampling/reward_verifier_exceptions`);
* that runs past `timeout_s` → reward 0, a timeout error (`sampling/reward_timeouts`); its thread is
  abandoned (a Python thread cannot be killed) and replaced, so the pool keeps `num_workers`
  live workers; `sampling/reward_stuck_threads` shows abandoned threads still running.

The verifier of a rollout is chosen by its example's `task` (an example with an empty `task` uses
the only verifier, if there is exactly one).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from adarl.reward.base import Verifier, VerifierResult
from adarl.types import Rollout, ScoredRollout, TaskExample


@dataclass
class _Job:
    verifier: Verifier
    response: str
    example: TaskExample
    started_at: float | None = None
    thread: threading.Thread | None = None
    result: VerifierResult | None = None
    raised: bool = False
    abandoned: bool = False
    duration_s: float = 0.0


@dataclass
class _Batch:
    jobs: list[_Job]
    done: int = 0
    condition: threading.Condition = field(default_factory=threading.Condition)


@dataclass
class _Stats:
    responses: int = 0
    reward_sum: float = 0.0
    errors: int = 0
    malformed_correct: int = 0
    timeouts: int = 0
    exceptions: int = 0
    wall_s: float = 0.0
    slowest_s: float = 0.0


class RewardPool:
    def __init__(
        self,
        *,
        verifiers: Mapping[str, Verifier],
        num_workers: int = 4,
        timeout_s: float = 60.0,
    ) -> None:
        if not verifiers:
            raise ValueError("RewardPool needs at least one verifier")
        if num_workers < 1:
            raise ValueError(f"RewardPool: num_workers must be >= 1, got {num_workers}")
        if not timeout_s > 0:
            raise ValueError(f"RewardPool: timeout_s must be > 0, got {timeout_s}")
        self._verifiers = dict(verifiers)
        self._timeout_s = timeout_s
        self._queue: queue.SimpleQueue[tuple[_Batch, _Job] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._workers: set[threading.Thread] = set()
        self._abandoned: set[threading.Thread] = set()
        self._stats = _Stats()
        self._closed = False
        for _ in range(num_workers):
            self._start_worker()

    def _start_worker(self) -> None:
        thread = threading.Thread(target=self._work, name="adarl-reward", daemon=True)
        with self._lock:
            self._workers.add(thread)
        thread.start()

    def _work(self) -> None:
        me = threading.current_thread()
        while True:
            item = self._queue.get()
            if item is None:
                return
            batch, job = item
            with batch.condition:
                job.started_at, job.thread = time.monotonic(), me
                batch.condition.notify_all()  # the waiter tracks this job's deadline from now
            try:
                result, raised = job.verifier.verify(job.response, job.example), False
            except Exception as error:  # the documented contract: a failing verifier scores 0
                result, raised = VerifierResult.failure(f"{type(error).__name__}: {error}"), True
            with batch.condition:
                if job.abandoned:  # the pool gave up on this job and replaced this thread
                    return
                job.duration_s = time.monotonic() - (job.started_at or 0.0)
                job.result, job.raised = result, raised
                batch.done += 1
                batch.condition.notify_all()

    def _verifier_for(self, example: TaskExample) -> Verifier:
        if example.task in self._verifiers:
            return self._verifiers[example.task]
        if not example.task and len(self._verifiers) == 1:
            return next(iter(self._verifiers.values()))
        raise ValueError(
            f"no verifier for task {example.task!r} (prompt {example.prompt_id!r}); the pool has "
            f"{sorted(self._verifiers)}: build it with the task's verifier"
        )

    def score(
        self,
        rollouts: Sequence[Rollout],
        examples: Sequence[TaskExample] | Mapping[str, TaskExample],
    ) -> list[ScoredRollout]:
        """Score `rollouts` (in order). `examples`: one per rollout, or a mapping prompt_id →
        example."""
        if self._closed:
            raise RuntimeError("RewardPool.score called after close()")
        if isinstance(examples, Mapping):
            missing = [r.prompt_id for r in rollouts if r.prompt_id not in examples]
            if missing:
                raise ValueError(f"RewardPool.score: no example for prompt ids {missing[:5]}")
            matched = [examples[r.prompt_id] for r in rollouts]
        else:
            if len(examples) != len(rollouts):
                raise ValueError(
                    f"RewardPool.score: {len(rollouts)} rollouts but {len(examples)} examples"
                )
            matched = list(examples)
        start = time.monotonic()
        batch = _Batch(
            jobs=[
                _Job(self._verifier_for(example), rollout.completion.text, example)
                for rollout, example in zip(rollouts, matched, strict=True)
            ]
        )
        for job in batch.jobs:
            self._queue.put((batch, job))
        self._wait(batch)
        scored = []
        for rollout, job in zip(rollouts, batch.jobs, strict=True):
            assert job.result is not None
            scored.append(
                ScoredRollout(
                    rollout=rollout, reward=job.result.reward, reward_error=job.result.error
                )
            )
        self._record(batch, time.monotonic() - start)
        return scored

    def _wait(self, batch: _Batch) -> None:
        """Block until every job has a result; jobs past their deadline get a timeout result."""
        with batch.condition:
            while batch.done < len(batch.jobs):
                now = time.monotonic()
                next_deadline = now + self._timeout_s
                for job in batch.jobs:
                    if job.result is not None or job.started_at is None:
                        continue
                    deadline = job.started_at + self._timeout_s
                    if now < deadline:
                        next_deadline = min(next_deadline, deadline)
                        continue
                    job.abandoned = True
                    job.duration_s = now - job.started_at
                    job.result = VerifierResult.failure(
                        f"verifier did not finish within reward.timeout_s={self._timeout_s}",
                        timed_out=True,
                    )
                    batch.done += 1
                    self._replace_stuck_worker(job.thread)
                if batch.done < len(batch.jobs):
                    batch.condition.wait(timeout=next_deadline - now)

    def _replace_stuck_worker(self, thread: threading.Thread | None) -> None:
        # The stuck thread exits when (if) its verifier returns; a fresh one takes its place.
        with self._lock:
            self._abandoned = {t for t in self._abandoned if t.is_alive()}
            if thread is not None:
                self._workers.discard(thread)
                self._abandoned.add(thread)
        self._start_worker()

    def _record(self, batch: _Batch, wall_s: float) -> None:
        with self._lock:
            stats = self._stats
            stats.wall_s += wall_s
            for job in batch.jobs:
                assert job.result is not None
                stats.responses += 1
                stats.reward_sum += job.result.reward
                stats.errors += job.result.error is not None
                stats.malformed_correct += job.result.malformed_work and job.result.reward > 0
                stats.timeouts += job.result.timed_out
                stats.exceptions += job.raised
                stats.slowest_s = max(stats.slowest_s, job.duration_s)

    def metrics(self) -> dict[str, float]:
        """Counts since the previous `metrics()` call: the caller opens a window with one call
        and reads it with the next (the driver brackets each rollout phase, the evaluator each
        evaluation, so training and evaluation traffic are never mixed)."""
        with self._lock:
            stats, self._stats = self._stats, _Stats()
            stuck = sum(t.is_alive() for t in self._abandoned)
        return {
            "sampling/reward_responses": float(stats.responses),
            # The verifier side's view of the window; equals the allocator's signal/reward_mean
            # over the same rollouts (a cross-check that no other traffic is counted).
            "sampling/scored_reward_mean": (
                stats.reward_sum / stats.responses if stats.responses else 0.0
            ),
            "sampling/reward_errors": float(stats.errors),
            # right answers whose work the verifier judged malformed (scored 1 all the same)
            "sampling/reward_malformed_correct": float(stats.malformed_correct),
            "sampling/reward_timeouts": float(stats.timeouts),
            "sampling/reward_verifier_exceptions": float(stats.exceptions),
            "sampling/reward_stuck_threads": float(stuck),
            "timing/reward_s": stats.wall_s,
            "timing/reward_slowest_s": stats.slowest_s,
        }

    def close(self) -> None:
        """Stop the workers (stuck ones are daemon threads and die with the process)."""
        if self._closed:
            return
        self._closed = True
        with self._lock:
            workers = len(self._workers)
        for _ in range(workers):
            self._queue.put(None)

    def __enter__(self) -> RewardPool:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
