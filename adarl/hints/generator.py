"""`HintGenerator`: hints for collapsed prompts, from a template, the policy itself, or a model.

    HintRequest(prompt, level) ─► template ─────────────────────────────► Hint("[...]")
                               └► hint mode: prompt + reference solution ─► generate (one
                                  generation writes 1[..]2[..]3[..]) ─► parse ─► leak check
                                  ─► retries ─► fallback (template | none) ─► Hint

A plain class. In a run on Ray it is an actor of its own (adarl/rollout/hint_service.py places
it), answering in turns: a call (`begin_hints`, `begin_write_ahead`) returns the hint-mode
generations it needs as a `HintTurn`, the caller runs them and hands the results to `resume`,
until a turn holds the answer. The caller is `HintRunner`, in the driver, which runs them on
the rollout pool (`self`: hints from the current weights, engine restarts handled like any
other call) or on the hint model's own engine pool (`model`). `hints()` and `write_ahead()` do
the same in one call with the `generate` the generator was given (in-process runs, tests).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from adarl.config.hints import DEFAULT_PROMPT_TEMPLATE, DEFAULT_SHOW_TEMPLATE
from adarl.hints.format import (
    LEVELS,
    ParsedLevels,
    hint_prompt,
    leaks_answer,
    parse_levels,
    render_hint,
)
from adarl.hints.template import hint_mode_solution, template_levels, template_unusable_reason
from adarl.hints.types import Hint, HintRequest, HintTurn
from adarl.types import GenerationRequest, GenerationResult, SamplingParams, TaskExample

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

GenerateFn = Callable[[list[GenerationRequest]], list[GenerationResult]]
# A hint call in progress: yields the generations it needs, is sent their results, returns its turn.
_Call = Generator[list[GenerationRequest], list[GenerationResult], HintTurn]


class HintCodec(Protocol):
    """What hints need of a prompt codec (`adarl.rollout.codec.PromptCodec`). A protocol, not
    an import: rollout's engines load the tiny model whose warm start teaches the hint formats,
    so hints must not depend on rollout."""

    @property
    def tokenizer(self) -> PreTrainedTokenizerBase: ...

    @property
    def sampling(self) -> SamplingParams: ...

    def prompt_token_ids(self, text: str) -> tuple[int, ...]: ...


# A prompt without a reference solution gets no hint (counted as unavailable), not an error: a
# file task may have solutions for only some rows.
_NO_SOLUTION = "the example has no reference_solution to derive a hint from"


def _hint_seed(seed: int, prompt_id: str, step: int, attempt: int) -> int:
    digest = hashlib.blake2b(f"{seed}/{prompt_id}/{step}/{attempt}".encode(), digest_size=8)
    return int.from_bytes(digest.digest(), "little") >> 2


@dataclass
class _Payload:
    """The usable levels found for one prompt in one step, over its hint-mode attempts."""

    levels: dict[int, str] = field(default_factory=dict)
    error: str | None = None  # why levels are missing, from the last attempt


@dataclass
class _Counters:
    requested: int = 0
    given: dict[int, int] = field(default_factory=lambda: dict.fromkeys(LEVELS, 0))
    unavailable: int = 0
    fallbacks: int = 0
    generations: int = 0
    parse_failures: int = 0
    levels_parsed: int = 0
    leaks_rejected: int = 0
    tokens: int = 0
    seconds: float = 0.0
    from_ahead: int = 0  # requests answered from levels written ahead (`write_ahead`)


class HintGenerator:
    """Answers `HintRequest`s in order; `metrics()` reports what it did since the last call."""

    def __init__(
        self,
        *,
        source: str,
        fallback: str = "template",
        retries: int = 2,
        generate: GenerateFn | None = None,
        codec: HintCodec | None = None,
        sampling: SamplingParams | None = None,
        prompt_template: str = DEFAULT_PROMPT_TEMPLATE,
        show_template: str = DEFAULT_SHOW_TEMPLATE,
        seed: int = 0,
    ) -> None:
        """`source`: "template", "self" or "model"; the last two need `codec` (tokenises
        hint-mode prompts for their engine) and `sampling` (hint-mode sampling: temperature, max
        tokens), and `generate` (an engine's or the rollout pool's synchronous generate) unless
        the caller runs each turn's generations itself (`HintRunner`)."""
        if source not in ("template", "self", "model"):
            raise ValueError(f"hint source {source!r} is not 'template', 'self' or 'model'")
        if fallback not in ("template", "none"):
            raise ValueError(f"hint fallback {fallback!r} is not 'template' or 'none'")
        if retries < 0:
            raise ValueError(f"hint retries must be >= 0, got {retries}")
        if source != "template" and (codec is None or sampling is None):
            raise ValueError(
                f"hint source {source!r} writes hints with a model: pass codec= and sampling= "
                "(and generate=, the rollout pool's or the hint engine's generate, or run its "
                "turns with HintRunner)"
            )
        self._source = source
        self._fallback = fallback
        self._retries = retries
        self._generate = generate
        self._codec = codec
        self._sampling = sampling
        self._prompt_template = prompt_template
        self._show_template = show_template
        self._seed = seed
        self._step: int | None = None
        self._payloads: dict[str, _Payload] = {}  # prompt id -> this step's hint-mode levels
        self._written_ahead: set[str] = set()  # prompt ids whose payload `write_ahead` wrote
        self._calls = 0
        self._counters = _Counters()
        self._call: _Call | None = None  # the call waiting for its generations, if any

    @property
    def source(self) -> str:
        return self._source

    # -- the protocol ------------------------------------------------------------------------

    def hints(self, requests: Sequence[HintRequest]) -> list[Hint]:
        """One `Hint` per request, in order. Model sources write every prompt's three levels in
        one batched generation (plus retries) and reuse them for later requests of the step."""
        return list(run_hint_call(self, self._generate, self.begin_hints(requests)).hints)

    def write_ahead(self, step: int, examples: Sequence[TaskExample]) -> dict[str, float]:
        """Write the hint-mode levels of `examples` for the coming step `step` now (before any
        of them is asked for: `hints.write_ahead`), with the weights the engine holds now, every
        attempt in one round (the engines are otherwise idle); a request of that step then
        reuses them as it reuses an earlier request's. Returns what this cost
        (`sampling/hints_ahead_*`, `perf/hint_ahead_tokens`); `metrics()` does not count it.
        Template hints cost nothing to write: refused."""
        turn = run_hint_call(self, self._generate, self.begin_write_ahead(step, examples))
        return dict(turn.written_ahead or {})

    # -- the same calls in turns (the generator in its own process) -------------------------

    def begin_hints(self, requests: Sequence[HintRequest]) -> HintTurn:
        """Start `hints(requests)`: its first turn (`HintTurn`; see `resume`)."""
        return self._begin(self._hints_call(list(requests)))

    def begin_write_ahead(self, step: int, examples: Sequence[TaskExample]) -> HintTurn:
        """Start `write_ahead(step, examples)`: its first turn (`HintTurn`; see `resume`)."""
        if self._source == "template":
            raise ValueError("write_ahead: template hints are derived when asked; nothing to write")
        return self._begin(self._write_ahead_call(step, list(examples)))

    def resume(self, results: Sequence[GenerationResult]) -> HintTurn:
        """Continue the call in progress with the results of the last turn's generations, in
        their order; returns the next turn."""
        if self._call is None:
            raise RuntimeError(
                "HintGenerator.resume: no hint call is waiting for generations; begin one first"
            )
        return self._advance(list(results))

    def _begin(self, call: _Call) -> HintTurn:
        if self._call is not None:
            call.close()
            raise RuntimeError(
                "HintGenerator: a hint call is still waiting for its generations; resume it "
                "before beginning another"
            )
        self._call = call
        return self._advance(None)

    def _advance(self, results: list[GenerationResult] | None) -> HintTurn:
        call = self._call
        assert call is not None
        try:
            generations = call.send(results)  # type: ignore[arg-type]  # None starts it
        except StopIteration as finished:
            self._call = None
            return finished.value  # type: ignore[no-any-return]
        except BaseException:
            self._call = None
            raise
        return HintTurn(generations=tuple(generations))

    def _hints_call(self, requests: list[HintRequest]) -> _Call:
        start = time.perf_counter()
        if self._source != "template":
            yield from self._write_payloads(requests)
        answers = [self._answer(request) for request in requests]
        counters = self._counters
        counters.requested += len(requests)
        counters.from_ahead += sum(r.prompt_id in self._written_ahead for r in requests)
        for hint in answers:
            if hint.text is None:
                counters.unavailable += 1
            else:
                counters.given[hint.level] += 1
        # The call's span in this process, its generations included (run by the caller).
        counters.seconds += time.perf_counter() - start
        return HintTurn(hints=tuple(answers))

    def _write_ahead_call(self, step: int, examples: list[TaskExample]) -> _Call:
        outer, self._counters = self._counters, _Counters()
        try:
            # The engines are otherwise idle now: every attempt in one round, not one by one.
            yield from self._write_payloads(
                [
                    HintRequest(prompt_id=e.prompt_id, example=e, level=1, step=step)
                    for e in examples
                ],
                attempts_at_once=True,
            )
            written = {e.prompt_id for e in examples if e.reference_solution}
            self._written_ahead = written if self._step == step else set()
            c = self._counters
        finally:
            self._counters = outer
        return HintTurn(
            written_ahead={
                "sampling/hints_ahead_prompts": float(len(written)),
                "sampling/hints_ahead_generations": float(c.generations),
                "sampling/hints_ahead_parse_failures": float(c.parse_failures),
                "perf/hint_ahead_tokens": float(c.tokens),
            }
        )

    def metrics(self) -> dict[str, float]:
        """Counts since the previous call (`sampling/hint_*`), hint-mode tokens generated
        (`perf/hint_tokens`) and time spent in `hints` (`timing/hint_s`)."""
        c, self._counters = self._counters, _Counters()
        out = {
            "sampling/hint_requests": float(c.requested),
            "sampling/hints_given": float(sum(c.given.values())),
            "sampling/hints_unavailable": float(c.unavailable),
            "sampling/hint_fallbacks": float(c.fallbacks),
            "sampling/hint_generations": float(c.generations),
            "sampling/hint_parse_failures": float(c.parse_failures),
            "sampling/hint_levels_parsed": float(c.levels_parsed),
            "sampling/hint_leaks_rejected": float(c.leaks_rejected),
            "perf/hint_tokens": float(c.tokens),
            "timing/hint_s": c.seconds,
            "sampling/hint_requests_written_ahead": float(c.from_ahead),
        }
        out.update({f"sampling/hints_given_level_{k}": float(v) for k, v in c.given.items()})
        return out

    # -- answering ---------------------------------------------------------------------------

    def _show(self, content: str) -> str:
        return render_hint(content, self._show_template)

    def _template_hint(self, request: HintRequest, *, why_fallback: str | None) -> Hint:
        content = template_levels(request.example)[request.level]
        if content is None:
            reason = template_unusable_reason(request.example, request.level)
            error = reason if why_fallback is None else f"{why_fallback}; template: {reason}"
            return Hint(request.prompt_id, request.level, None, "none", error)
        return Hint(request.prompt_id, request.level, self._show(content), "template", why_fallback)

    def _answer(self, request: HintRequest) -> Hint:
        if not request.example.reference_solution:
            return Hint(request.prompt_id, request.level, None, "none", _NO_SOLUTION)
        if self._source == "template":
            return self._template_hint(request, why_fallback=None)
        payload = self._payloads[request.prompt_id]
        content = payload.levels.get(request.level)
        if content is not None:
            return Hint(request.prompt_id, request.level, self._show(content), self._source)  # type: ignore[arg-type]
        why = payload.error or f"no usable level-{request.level} hint"
        if self._fallback == "template":
            self._counters.fallbacks += 1
            return self._template_hint(request, why_fallback=why)
        return Hint(request.prompt_id, request.level, None, "none", why)

    # -- hint mode ---------------------------------------------------------------------------

    def _write_payloads(
        self, requests: Sequence[HintRequest], *, attempts_at_once: bool = False
    ) -> Generator[list[GenerationRequest], list[GenerationResult], None]:
        """Make sure every requested prompt has this step's payload (generating what is new).

        Attempts are generated one round at a time, each for the prompts still missing a level;
        with `attempts_at_once`, every attempt of every prompt in one round (fewer rounds of a
        latency-bound generation, more tokens). Either way a prompt's attempts are read in
        order until its levels are complete, and each attempt has its own seed, so both give
        the same levels."""
        for request in requests:
            if self._step is None or request.step > self._step:
                # A new step: new weights, so no earlier level is reused.
                self._step, self._payloads, self._written_ahead = request.step, {}, set()
        examples: dict[str, TaskExample] = {}
        for request in requests:
            if request.prompt_id not in self._payloads and request.example.reference_solution:
                examples.setdefault(request.prompt_id, request.example)
        step = self._step if self._step is not None else 0
        pending = {prompt_id: _Payload() for prompt_id in examples}
        rounds = (
            [range(1 + self._retries)]
            if attempts_at_once
            else [range(attempt, attempt + 1) for attempt in range(1 + self._retries)]
        )
        for attempts in rounds:
            todo = [p for p, payload in pending.items() if len(payload.levels) < len(LEVELS)]
            if not todo:
                break
            items = [(p, attempt) for p in todo for attempt in attempts]
            texts = yield from self._run_hint_mode(
                [(examples[p], attempt) for p, attempt in items], step=step
            )
            for (prompt_id, _), text in zip(items, texts, strict=True):
                payload = pending[prompt_id]
                if len(payload.levels) < len(LEVELS):  # attempts after a complete one are unread
                    self._absorb(payload, examples[prompt_id], parse_levels(text))
        self._payloads.update(pending)

    def _absorb(self, payload: _Payload, example: TaskExample, parsed: ParsedLevels) -> None:
        """Keep the first usable content found for each level; count what was rejected. A
        malformed output (text outside the format, levels out of order, cut off) gives nothing:
        a model that left the format is not trusted with what it wrote inside it."""
        if parsed.malformed:
            self._counters.parse_failures += 1
            payload.error = "hint-mode output is not in the 1[..]2[..]3[..] format"
            return
        if parsed.missing:
            self._counters.parse_failures += 1
            payload.error = f"hint-mode output lacks level(s) {list(parsed.missing)}"
        self._counters.levels_parsed += len(parsed.levels)
        for level, content in parsed.levels.items():
            if leaks_answer(content, answer=example.answer, prompt=example.prompt):
                self._counters.leaks_rejected += 1
                payload.error = f"hint-mode level {level} stated the answer"
                continue
            payload.levels.setdefault(level, content)

    def _run_hint_mode(
        self, items: list[tuple[TaskExample, int]], *, step: int
    ) -> Generator[list[GenerationRequest], list[GenerationResult], list[str]]:
        """One batched hint-mode generation: (example, attempt) -> its text, in order."""
        assert self._codec is not None and self._sampling is not None
        self._calls += 1
        requests = [
            GenerationRequest(
                request_id=f"hint-{self._calls}-{index}",
                prompt_token_ids=self._codec.prompt_token_ids(
                    hint_prompt(
                        example.prompt, hint_mode_solution(example), template=self._prompt_template
                    )
                ),
                num_samples=1,
                sampling=self._sampling,
                seed=_hint_seed(self._seed, example.prompt_id, step, attempt),
            )
            for index, (example, attempt) in enumerate(items)
        ]
        results = yield requests
        if len(results) != len(requests):
            raise ValueError(
                f"HintGenerator.resume got {len(results)} results for {len(requests)} hint-mode "
                "generations; pass every result of the turn, in its order"
            )
        texts = []
        for result in results:
            completion = result.completions[0]
            self._counters.generations += 1
            self._counters.tokens += len(completion.token_ids)
            texts.append(
                completion.text
                or self._codec.tokenizer.decode(completion.token_ids, skip_special_tokens=True)
            )
        return texts


class _TurnTaker(Protocol):
    def resume(self, results: Sequence[GenerationResult]) -> HintTurn: ...


def run_hint_call(generator: _TurnTaker, generate: GenerateFn | None, turn: HintTurn) -> HintTurn:
    """Run a hint call's turns to its answer: each turn's generations on `generate`, their
    results back to `generator.resume` (the generator here or its actor's proxy)."""
    while not turn.done:
        if generate is None:
            raise ValueError(
                "this hint call needs hint-mode generations but no generate= was given: pass "
                "the rollout pool's (source=self) or the hint engine's (source=model) generate"
            )
        turn = generator.resume(generate(list(turn.generations)))
    return turn


class _Engines(Protocol):
    def shutdown(self) -> None: ...


class HintRunner:
    """The driver's `HintGenerator`: the same calls (`hints`, `write_ahead`, `metrics`) on a
    generator that lives in this process or in its own actor (reached through a blocking proxy),
    with each turn's generations run here on `generate`: the rollout pool's (`source=self`) or
    the hint model's engine pool's (`source=model`)."""

    def __init__(
        self,
        *,
        generator: HintGenerator,
        generate: GenerateFn | None,
        source: str,
        engines: _Engines | None = None,
    ) -> None:
        """`generator`: the object or its proxy. `engines`: the hint model's own engine pool
        (`source=model`), which `close` shuts down."""
        self._generator = generator
        self._generate = generate
        self._source = source
        self._engines = engines

    @property
    def source(self) -> str:
        return self._source

    @property
    def generator(self) -> HintGenerator:
        """The generator: the object itself in-process, its actor's blocking proxy on Ray."""
        return self._generator

    @property
    def engines(self) -> _Engines | None:
        """The hint model's engine pool (`source=model`), else None."""
        return self._engines

    def hints(self, requests: Sequence[HintRequest]) -> list[Hint]:
        turn = self._generator.begin_hints(list(requests))
        return list(run_hint_call(self._generator, self._generate, turn).hints)

    def write_ahead(self, step: int, examples: Sequence[TaskExample]) -> dict[str, float]:
        turn = self._generator.begin_write_ahead(step, list(examples))
        return dict(run_hint_call(self._generator, self._generate, turn).written_ahead or {})

    def metrics(self) -> dict[str, float]:
        return self._generator.metrics()

    def close(self) -> None:
        engines, self._engines = self._engines, None
        if engines is not None:
            engines.shutdown()
