"""How good are the hints? Parse rate, leak rate and the pass-rate lift per level, for the `self`
source against the `template` source, on held-out prompts the base policy fails.

    prompts ─► unhinted pass rate (n samples) ─► the failed ones (p̂ = 0)
      ├─► control: the same prompts unhinted again, fresh seeds (the lift's baseline: a prompt
      │   at p̂ = 0 of n samples may still have p > 0)
      ├─► template hints ℓ = 1, 2, 3 ─► pass rate of prompt + hint
      └─► self hints (the policy in hint mode, one generation per prompt + retries)
          ─► parse rate, leak rate ─► pass rate of prompt + hint per level

The lift of a level is its mean pass rate minus the control's, over the failed prompts that got a
hint at that level, with the standard error of that paired difference; the gate is the share of
those prompts with at least one correct sample (a group that can train). Every generation goes
through one engine's `generate`.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from adarl.hints.format import LEVELS
from adarl.hints.generator import GenerateFn, HintCodec, HintGenerator
from adarl.hints.types import HintRequest
from adarl.types import GenerationRequest, SamplingParams, TaskExample

Verify = Callable[[TaskExample, str], bool]


@dataclass(frozen=True)
class LevelQuality:
    source: str
    level: int
    prompts: int  # failed prompts that got a hint of this level from this source
    pass_rate: float  # mean pass rate of prompt + hint over them
    gate: float  # share of them with at least one correct sample
    control_pass_rate: float  # the same prompts unhinted (fresh seeds)
    control_gate: float
    # Standard error of the lift: of the mean over prompts of (hinted − control) pass rate, a
    # paired difference, so prompt-to-prompt spread in difficulty does not inflate it.
    lift_se: float = float("nan")

    @property
    def lift(self) -> float:
        return self.pass_rate - self.control_pass_rate

    @property
    def lift_in_se(self) -> float:
        """The lift in standard errors (nan without a positive SE, e.g. below two prompts)."""
        return self.lift / self.lift_se if self.lift_se > 0 else float("nan")


@dataclass(frozen=True)
class HintQualityReport:
    prompts: int  # held-out prompts measured
    failed: int  # of them at p̂ = 0 unhinted (the prompts hints are for)
    samples_per_prompt: int
    base_pass_rate: float  # mean unhinted pass rate over all prompts
    self_generations: int  # hint-mode generations (retries included)
    self_parse_rate: float  # share of them giving all three levels in the format
    self_leak_rate: float  # share of the levels they gave that stated the answer
    self_tokens_per_generation: float
    self_seconds_per_generation: float  # wall time in `hints()` (generation, parsing, checks)
    levels: tuple[LevelQuality, ...]  # template then self, levels 1..3


def _pass_rates(
    generate: GenerateFn,
    codec: HintCodec,
    items: Sequence[tuple[TaskExample, str]],
    *,
    samples: int,
    sampling: SamplingParams,
    seed: int,
    verify: Verify,
) -> list[float]:
    """Pass rate of each (example, prompt text) over `samples` draws."""
    requests = [
        GenerationRequest(
            request_id=f"quality-{seed}-{index}",
            prompt_token_ids=codec.prompt_token_ids(text),
            num_samples=samples,
            sampling=sampling,
            seed=seed * 1_000_003 + index,
        )
        for index, (_, text) in enumerate(items)
    ]
    results = generate(requests) if requests else []
    return [
        sum(verify(example, completion.text) for completion in result.completions) / samples
        for (example, _), result in zip(items, results, strict=True)
    ]


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def _standard_error(values: Sequence[float]) -> float:
    """SE of the mean of `values` (sample standard deviation / √n); nan below two values."""
    return statistics.stdev(values) / len(values) ** 0.5 if len(values) > 1 else float("nan")


def measure_hint_quality(
    *,
    generate: GenerateFn,
    codec: HintCodec,
    examples: Sequence[TaskExample],
    verify: Verify,
    self_hints: HintGenerator,
    samples_per_prompt: int = 16,
    seed: int = 0,
) -> HintQualityReport:
    """The report above. `codec.sampling` is the policy's sampling (temperature, max tokens);
    `self_hints` is a `self` generator over the same `generate` (its retries and fallback are
    used as configured: build it with fallback "none" to see `self` alone)."""
    if self_hints.source == "template":
        raise ValueError("measure_hint_quality: self_hints must be a 'self' or 'model' generator")
    sampling = codec.sampling
    kwargs = {"samples": samples_per_prompt, "sampling": sampling, "verify": verify}
    base = _pass_rates(generate, codec, [(e, e.prompt) for e in examples], seed=seed, **kwargs)
    failed = [e for e, p in zip(examples, base, strict=True) if p == 0]
    control = dict(
        zip(
            (e.prompt_id for e in failed),
            _pass_rates(generate, codec, [(e, e.prompt) for e in failed], seed=seed + 1, **kwargs),
            strict=True,
        )
    )
    template = HintGenerator(source="template")
    levels: list[LevelQuality] = []
    self_hints.metrics()  # open a fresh window
    for source, generator in (("template", template), ("self", self_hints)):
        for level in LEVELS:
            hints = generator.hints([HintRequest(e.prompt_id, e, level, step=0) for e in failed])
            items = [
                (e, e.prompt + hint.text)
                for e, hint in zip(failed, hints, strict=True)
                if hint.text is not None and hint.source == source
            ]
            rates = _pass_rates(generate, codec, items, seed=seed + 1 + 10 * level, **kwargs)
            controls = [control[e.prompt_id] for e, _ in items]
            levels.append(
                LevelQuality(
                    source=source,
                    level=level,
                    prompts=len(items),
                    pass_rate=_mean(rates),
                    gate=_mean([float(r > 0) for r in rates]),
                    control_pass_rate=_mean(controls),
                    control_gate=_mean([float(c > 0) for c in controls]),
                    lift_se=_standard_error(
                        [rate - c for rate, c in zip(rates, controls, strict=True)]
                    ),
                )
            )
    counts = self_hints.metrics()
    generations = counts["sampling/hint_generations"]
    parsed_levels = counts["sampling/hint_levels_parsed"]
    return HintQualityReport(
        prompts=len(examples),
        failed=len(failed),
        samples_per_prompt=samples_per_prompt,
        base_pass_rate=_mean(base),
        self_generations=int(generations),
        self_parse_rate=1.0 - counts["sampling/hint_parse_failures"] / generations
        if generations
        else float("nan"),
        self_leak_rate=counts["sampling/hint_leaks_rejected"] / parsed_levels
        if parsed_levels
        else float("nan"),
        self_tokens_per_generation=counts["perf/hint_tokens"] / generations
        if generations
        else float("nan"),
        self_seconds_per_generation=counts["timing/hint_s"] / generations
        if generations
        else float("nan"),
        levels=tuple(levels),
    )
