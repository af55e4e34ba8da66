"""`HintGenerator`: hints for collapsed prompts, from a template, the policy itself, or a model.

    HintRequest(prompt, level) ─► template ─────────────────────────────► Hint("[...]")
                               └► hint mode: prompt + reference solution ─► generate (one
                                  generation writes 1[..]2[..]3[..]) ─► parse ─► leak check
                                  ─► retries ─► fallback (template | none) ─► Hint

A plain class (the lead wraps it as a Ray actor in adarl/cluster.py). `self` generates through
the `generate` callable it is given (the rollout pool's synchronous `generate`, so hints come
from the current weights); `model` through its own engine (`build_hint_generator`, in
adarl/rollout/builders.py: it builds that engine).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Sequence
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
from adarl.hints.types import Hint, HintRequest
from adarl.types import GenerationRequest, GenerationResult, SamplingParams, TaskExample

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

GenerateFn = Callable[[list[GenerationRequest]], list[GenerationResult]]


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
        """`source`: "template", "self" or "model"; the last two need `generate` (an engine's
        or the rollout pool's synchronous generate), `codec` (tokenises hint-mode prompts for
        that engine) and `sampling` (hint-mode sampling: temperature, max tokens)."""
        if source not in ("template", "self", "model"):
            raise ValueError(f"hint source {source!r} is not 'template', 'self' or 'model'")
        if fallback not in ("template", "none"):
            raise ValueError(f"hint fallback {fallback!r} is not 'template' or 'none'")
        if retries < 0:
            raise ValueError(f"hint retries must be >= 0, got {retries}")
        if source != "template" and (generate is None or codec is None or sampling is None):
            raise ValueError(
                f"hint source {source!r} writes hints with a model: pass generate= (the rollout "
                "pool's or the hint engine's generate), codec= and sampling="
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

    @property
    def source(self) -> str:
        return self._source

    # -- the protocol ------------------------------------------------------------------------

    def hints(self, requests: Sequence[HintRequest]) -> list[Hint]:
        """One `Hint` per request, in order. Model sources write every prompt's three levels in
        one batched generation (plus retries) and reuse them for later requests of the step."""
        start = time.perf_counter()
        if self._source != "template":
            self._write_payloads(requests)
        answers = [self._answer(request) for request in requests]
        counters = self._counters
        counters.requested += len(requests)
        counters.from_ahead += sum(r.prompt_id in self._written_ahead for r in requests)
        for hint in answers:
            if hint.text is None:
                counters.unavailable += 1
            else:
                counters.given[hint.level] += 1
        counters.seconds += time.perf_counter() - start
        return answers

    def write_ahead(self, step: int, examples: Sequence[TaskExample]) -> dict[str, float]:
        """Write the hint-mode levels of `examples` for the coming step `step` now (before any
        of them is asked for: `hints.write_ahead`), with the weights the engine holds now, every
        attempt in one round (the engines are otherwise idle); a request of that step then
        reuses them as it reuses an earlier request's. Returns what this cost
        (`sampling/hints_ahead_*`, `perf/hint_ahead_tokens`); `metrics()` does not count it.
        Template hints cost nothing to write: refused."""
        if self._source == "template":
            raise ValueError("write_ahead: template hints are derived when asked; nothing to write")
        outer, self._counters = self._counters, _Counters()
        try:
            # The engines are otherwise idle now: every attempt in one round, not one by one.
            self._write_payloads(
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
        return {
            "sampling/hints_ahead_prompts": float(len(written)),
            "sampling/hints_ahead_generations": float(c.generations),
            "sampling/hints_ahead_parse_failures": float(c.parse_failures),
            "perf/hint_ahead_tokens": float(c.tokens),
        }

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
    ) -> None:
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
            texts = self._run_hint_mode([(examples[p], attempt) for p, attempt in items], step=step)
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

    def _run_hint_mode(self, items: list[tuple[TaskExample, int]], *, step: int) -> list[str]:
        """One batched hint-mode generation: (example, attempt) -> its text, in order."""
        assert self._generate is not None and self._codec is not None
        assert self._sampling is not None
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
        results = self._generate(requests)
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
