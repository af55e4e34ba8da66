"""`SimulatedRolloutPool`: the rollout pool's streaming calls in virtual time, for benchmarks and
tests that drive the real rollout phase (`adarl.driver.rollout_phase.collect_groups`) without a GPU.

Outcomes come from a real engine (usually the scripted `FakeEngine`: known pass rates); *time*
comes from a discrete-event simulation of continuous-batching engines (`LatencyModel`,
`ContinuousBatchingSimulator`), so what is measured is the scheduling (barriers, sequential waits,
engine occupancy) of the very loop the driver runs.

Latency model (`LatencyModel`; defaults sized like one vLLM engine serving a 1.5B-7B model on one
H100; only ratios between samplers are meaningful):

* `engines` engines each hold at most `slots` sequences at once (vLLM `max_num_seqs`); a request
  goes whole to the engine with the fewest running + waiting samples; waiting samples are
  admitted first-in first-out as soon as a slot frees (continuous batching);
* one decode iteration advances every running sequence by one token and takes
  `decode_step_base_s + decode_step_per_seq_s × running` seconds (a weight-read floor plus a
  per-sequence KV-cache cost);
* a request's prompt is prefilled once, `prefill_s_per_request`, added to the iteration that
  admits its first sample (samples of a request share the prompt's KV cache);
* a response has L ~ LogNormal(log(median_response_tokens), response_tokens_sigma) tokens, times
  `incorrect_length_factor` for a wrong answer (wrong answers run longer), capped at
  `max_response_tokens`; lengths are drawn per sample from the request seed, so every sampler sees
  the same law;
* a request completes when all its samples finished (engines return a request's samples
  together); scoring and the allocator's reply take `result_latency_s`: the follow-up requests a
  result unlocks enter the queue that much later.

The simulation jumps from one sequence completion to the next (between two completions the batch
is constant), so a step with thousands of samples simulates in milliseconds.
"""

from __future__ import annotations

import heapq
import math
import random
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from adarl.rollout.base import RolloutEngine
from adarl.types import Completion, GenerationRequest, GenerationResult


@dataclass(frozen=True)
class LatencyModel:
    engines: int = 8
    slots: int = 256
    decode_step_base_s: float = 0.012
    decode_step_per_seq_s: float = 0.00004
    prefill_s_per_request: float = 0.004
    median_response_tokens: float = 400.0
    response_tokens_sigma: float = 0.6
    incorrect_length_factor: float = 1.3
    max_response_tokens: int = 2048
    result_latency_s: float = 0.02

    def iteration_s(self, running: int) -> float:
        return self.decode_step_base_s + self.decode_step_per_seq_s * running

    def response_tokens(self, rng: random.Random, *, correct: bool) -> int:
        length = rng.lognormvariate(
            math.log(self.median_response_tokens), self.response_tokens_sigma
        )
        if not correct:
            length *= self.incorrect_length_factor
        return max(1, min(self.max_response_tokens, round(length)))


class _Engine:
    """One continuous-batching engine; its clock may lag the global one while it decodes."""

    def __init__(self, latency: LatencyModel) -> None:
        self.latency = latency
        self.time_s = 0.0
        self.iteration = 0
        self.running: list[tuple[int, int, str]] = []  # heap of (finish iteration, seq, request)
        self.waiting: deque[tuple[str, int]] = deque()  # (request id, response tokens)
        self.prefilled: set[str] = set()
        self.busy_slot_s = 0.0  # ∫ running sequences dt
        self._seq = 0

    def load(self) -> int:
        return len(self.running) + len(self.waiting)

    def enqueue(self, request_id: str, lengths: Sequence[int], at_s: float) -> None:
        if not self.running:
            self.time_s = max(self.time_s, at_s)  # an idle engine starts when work arrives
        self.waiting.extend((request_id, n) for n in lengths)
        self._admit()

    def _admit(self) -> None:
        while self.waiting and len(self.running) < self.latency.slots:
            request_id, tokens = self.waiting.popleft()
            if request_id not in self.prefilled:
                self.prefilled.add(request_id)
                self.time_s += self.latency.prefill_s_per_request
            self._seq += 1
            heapq.heappush(self.running, (self.iteration + tokens, self._seq, request_id))

    def next_finish_s(self) -> float:
        if not self.running:
            return math.inf
        steps = self.running[0][0] - self.iteration
        return self.time_s + steps * self.latency.iteration_s(len(self.running))

    def _run(self, steps: int) -> None:
        step_s = self.latency.iteration_s(len(self.running))
        self.time_s += steps * step_s
        self.busy_slot_s += steps * step_s * len(self.running)
        self.iteration += steps

    def advance_to(self, until_s: float, finished: list[tuple[float, str]]) -> None:
        """Decode until `until_s`; append (time, request id) of every sequence finished."""
        while self.running and self.next_finish_s() <= until_s:
            self._run(self.running[0][0] - self.iteration)
            while self.running and self.running[0][0] <= self.iteration:
                finished.append((self.time_s, heapq.heappop(self.running)[2]))
            self._admit()
        if self.running:
            step_s = self.latency.iteration_s(len(self.running))
            self._run(max(0, math.floor((until_s - self.time_s) / step_s)))
        else:
            self.time_s = max(self.time_s, until_s)


class ContinuousBatchingSimulator:
    """`latency.engines` continuous-batching engines serving requests in virtual time.

    A request goes whole to the engine with the fewest running + waiting samples (its samples
    share a prompt), like a pool routing by load.
    """

    def __init__(self, latency: LatencyModel) -> None:
        if latency.engines < 1 or latency.slots < 1:
            raise ValueError(
                f"latency model needs engines >= 1 and slots >= 1 (got {latency.engines}, "
                f"{latency.slots})"
            )
        self.latency = latency
        self.now_s = 0.0
        self._engines = [_Engine(latency) for _ in range(latency.engines)]
        self._arrivals: list[tuple[float, int, str, list[int]]] = []  # heap of future requests
        self._left: dict[str, int] = {}  # samples of each request not finished yet
        self._completed: deque[tuple[float, str]] = deque()
        self._seq = 0

    def submit(self, request_id: str, lengths: Sequence[int], *, at_s: float) -> None:
        """Queue a request of len(lengths) samples, arriving at virtual time `at_s`."""
        self._seq += 1
        heapq.heappush(self._arrivals, (at_s, self._seq, request_id, list(lengths)))

    def next_completion(self) -> str:
        """Advance virtual time to the next request completion; returns its request id."""
        while not self._completed:
            next_arrival = self._arrivals[0][0] if self._arrivals else math.inf
            until = min(next_arrival, *(e.next_finish_s() for e in self._engines))
            if until == math.inf:
                raise RuntimeError("simulator: nothing running, waiting or arriving")
            finished: list[tuple[float, str]] = []
            for engine in self._engines:
                engine.advance_to(until, finished)
            self.now_s = max(self.now_s, until)
            for at_s, request_id in sorted(finished):
                self._left[request_id] -= 1
                if self._left[request_id] == 0:
                    del self._left[request_id]
                    self._completed.append((at_s, request_id))
            while self._arrivals and self._arrivals[0][0] <= self.now_s:
                at_s, _, request_id, lengths = heapq.heappop(self._arrivals)
                self._left[request_id] = len(lengths)
                min(self._engines, key=_Engine.load).enqueue(request_id, lengths, at_s)
        at_s, request_id = self._completed.popleft()
        self.now_s = max(self.now_s, at_s)
        return request_id

    def completed_now(self) -> list[str]:
        """Requests already complete at the current virtual time (time does not advance)."""
        done = []
        while self._completed and self._completed[0][0] <= self.now_s:
            done.append(self._completed.popleft()[1])
        return done

    def busy(self) -> bool:
        """Whether any request is waiting, running or not yet returned."""
        return bool(self._arrivals or self._left or self._completed)

    def busy_slot_s(self) -> float:
        """∫ running sequences dt over every engine, up to now."""
        return sum(e.busy_slot_s for e in self._engines)

    def utilisation(self) -> float:
        """Time-average fraction of all slots holding a running sequence, up to now."""
        capacity = self.latency.slots * len(self._engines) * self.now_s
        return sum(e.busy_slot_s for e in self._engines) / capacity if capacity > 0 else 0.0


class SimulatedRolloutPool:
    """`RolloutPool`'s calls (`submit`, `drain_completed`, `generate`, `metrics`) in virtual time.

    `engine` produces the completions (at once, when a request is submitted); `is_correct` says
    whether a completion is a right answer, which only sets its simulated length. `now()` is the
    virtual clock: pass it as `PhaseParts(clock=...)` to
    `adarl.driver.rollout_phase.collect_groups`.
    """

    def __init__(
        self,
        *,
        engine: RolloutEngine,
        latency: LatencyModel,
        is_correct: Callable[[GenerationRequest, Completion], bool],
        seed: int = 0,
    ) -> None:
        self.engine = engine
        self.seed = seed  # varies the simulated lengths, hence the order results come back in
        self.latency = latency
        self.is_correct = is_correct
        self._sim = ContinuousBatchingSimulator(latency)
        self._results: dict[str, GenerationResult] = {}
        self._after_result = False  # submissions now answer a result: they pay result latency
        self._window_start_s = 0.0
        self._window_busy = 0.0
        self._window_samples = 0
        self._samples = 0

    def now(self) -> float:
        return self._sim.now_s

    def busy_slot_s(self) -> float:
        """Slot-seconds the engines have spent decoding so far (∫ running sequences dt)."""
        return self._sim.busy_slot_s()

    def submit(self, requests: Sequence[GenerationRequest]) -> None:
        # Follow-ups of a result reach the engines after scoring and the allocator's reply.
        at_s = self._sim.now_s + (self.latency.result_latency_s if self._after_result else 0.0)
        for request, result in zip(requests, self.engine.generate(list(requests)), strict=True):
            rng = random.Random(f"latency/{self.seed}/{request.seed}")
            lengths = [
                self.latency.response_tokens(rng, correct=self.is_correct(request, completion))
                for completion in result.completions
            ]
            self._results[request.request_id] = result
            self._sim.submit(request.request_id, lengths, at_s=at_s)

    def drain_completed(self) -> list[GenerationResult]:
        """The next result in virtual time, and every other result finished at that instant."""
        finished = [self._sim.next_completion()]
        finished += self._sim.completed_now()
        out = [self._results.pop(request_id) for request_id in finished]
        self._after_result = True
        self._samples += sum(len(r.completions) for r in out)
        return out

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        """Synchronous generation (evaluation): outcomes only, no simulated time."""
        return self.engine.generate(list(requests))

    def score(
        self,
        prompt_token_ids: Sequence[Sequence[int]],
        response_token_ids: Sequence[Sequence[int]],
        *,
        temperature: float = 1.0,
    ) -> list[list[float]]:
        """`RolloutPool.score` (a barrier): the engine's scores, and virtual time for one
        prefill per pair, the pairs spread evenly over the engines (a scoring pass decodes
        nothing). Only between rollout phases' sampling: with sequences in flight the simulated
        engines would have to interleave prefills with decoding, which this model does not."""
        if self._sim.busy():
            raise RuntimeError(
                "SimulatedRolloutPool.score: requests are still in flight; score once every "
                "submitted request has been drained (the driver scores finished pools)"
            )
        scores = self.engine.score(prompt_token_ids, response_token_ids, temperature=temperature)
        serial = math.ceil(len(prompt_token_ids) / self.latency.engines)
        self._sim.now_s += serial * self.latency.prefill_s_per_request
        return scores

    def metrics(self) -> dict[str, float]:
        """Utilisation and samples since the previous call (the caller's window), like
        `RolloutPool.metrics()`; elapsed time is virtual."""
        now, busy = self._sim.now_s, self._sim.busy_slot_s()
        elapsed = now - self._window_start_s
        capacity = self.latency.slots * self.latency.engines * elapsed
        utilisation = (busy - self._window_busy) / capacity if capacity > 0 else 0.0
        metrics = {
            "perf/rollout_engine_utilisation": utilisation,
            "sampling/engine_samples": float(self._samples - self._window_samples),
        }
        self._window_start_s, self._window_busy, self._window_samples = now, busy, self._samples
        # A new window (rollout phase) starts with fresh requests, unless another step's
        # requests are still in flight (overlapping steps): then submissions still answer results.
        self._after_result = self._sim.busy()
        return metrics
