"""Structured config of hinting (SAGE): when a collapsed prompt gets a hint, of which level, and
who writes it. Builders: `adarl.hints.build_hint_schedule`,
`adarl.rollout.builders.build_hint_generator`, `adarl.hints.build_collapse_rule`. Levels,
schedules and formats: docs/algorithms.md "Hints".

`HintsConfig`
    schedule: "off" (default: no hints; evaluation never has one either way), "sage" (escalate
        ℓ = 1 → 2 → 3 within the step while the prompt stays collapsed) or "sage_light" (one hint
        per prompt per step at a per-prompt level kept across epochs, moved by `up_threshold`
        and `down_threshold`; checkpointed).
    source: who writes the hints. "template": derived deterministically from the example's
        `reference_solution`. "self": the current policy in hint mode, through the rollout
        engines (the hint-mode prompt shows the reference solution; one generation writes all
        three levels). "model": a separate hint model (`model`) on its own engine, built with
        the `rollout` settings.
    fallback: what a request gets when `self`/`model` found no usable hint for its level after
        the retries: "template" (the template's hint, if it has one) or "none" (no hint; the
        prompt is not re-rolled).
    retries: further hint-mode generations for a prompt whose output did not give all three
        levels (unparseable, a level missing, or a level rejected for stating the answer); 0 =
        one generation only.
    temperature: sampling temperature of hint-mode generations (0 = greedy; retries of a
        greedy generation repeat it, so keep it > 0 when `retries` > 0).
    max_hint_tokens: longest hint-mode generation, in tokens (all three levels together).
    prompt_template: the hint-mode prompt, with `{prompt}` (the task prompt) and `{solution}`
        (its reference solution; for arithmetic the worked steps). The default is the format
        the built-in tiny model is warm-started on; give another hint model an instruction
        that asks for the answer format `1[...]2[...]3[...]`.
    show_template: how a hint is shown to the policy, appended to the prompt, with `{hint}`.
        The default `[{hint}]` is the built-in tiny model's format.
    model: the hint model (a Hugging Face directory or hub name) when `source` = "model".
    first_level: the level of a collapsed prompt's first hint (1, SAGE's): `sage` escalates
        from it to 3; `sage_light` never hints below it. 3 spends a capped hint budget on the
        only level that lifts `model=tiny_worked` (docs/benchmarks.md "Hints in training").
    up_threshold: sage_light moves a prompt's level up after an accuracy ≤ this (0.1).
    down_threshold: sage_light moves a prompt's level down after an accuracy > this (0.35).
    collapse_after_samples: the allocator declares a prompt collapsed (and asks for a hint)
        once this many samples of it this step have no positive reward, or when its sampler
        ends its sampling with none (uniform: its one draw; streaming: a cap or futility stop).
    max_extra_rollouts_fraction: the cost ceiling of hinting: a step's hinted samples stay at
        most this fraction of its unhinted ones. A hint is granted only if every hinted
        condition, counted at its cap until it ends and at what it drew after, still fits under
        the fraction of the unhinted samples dispatched so far; a prompt refused asks again
        after its next draw. Hinted conditions are paid from this budget, never from the
        unhinted prompts' step budget. None (default) = no ceiling.
    write_ahead: write hints before they are needed (docs/algorithms.md §11.1).
        While a step trains, the next step's prompts are drawn and hints are written for those
        whose record predicts a collapse (`write_ahead_min_collapse_probability`), on the
        engines the learners leave idle; a prompt that then collapses finds its hint written,
        and the rest are written when asked, as without it. Each prompt is still hinted only
        after it collapses. The hints written ahead come from the weights before that step's
        update (one version older). Not with source=template (nothing to write) nor where the
        next step is sampled ahead (`rollout.max_off_policy_steps` ≥ 1 writes its hints while
        the learners train already). False (default) = hints are written when asked.
    write_ahead_min_collapse_probability: write a prompt's hints ahead when its posterior pass
        rate, Beta(a, b) (its pooled prior and discounted record; docs/algorithms.md
        §5.2), gives P(collapse) = E[(1-p)^m] ≥ this, m = min(collapse_after_samples,
        the sampler's per-prompt cap). 0 = every prompt of the next step.
    seed: seeds hint-mode sampling (with the prompt, the step and the attempt); None (default)
        = derived from the root `seed` (adarl/config/seeds.py).
"""

from __future__ import annotations

from dataclasses import dataclass

HINT_SCHEDULES: tuple[str, ...] = ("off", "sage", "sage_light")
HINT_SOURCES: tuple[str, ...] = ("template", "self", "model")
HINT_FALLBACKS: tuple[str, ...] = ("template", "none")
DEFAULT_PROMPT_TEMPLATE = "hint:{prompt}({solution})"
DEFAULT_SHOW_TEMPLATE = "[{hint}]"


@dataclass
class HintsConfig:
    schedule: str = "off"
    source: str = "self"
    fallback: str = "template"
    retries: int = 2
    temperature: float = 1.0
    max_hint_tokens: int = 96
    prompt_template: str = DEFAULT_PROMPT_TEMPLATE
    show_template: str = DEFAULT_SHOW_TEMPLATE
    model: str | None = None
    first_level: int = 1
    up_threshold: float = 0.1
    down_threshold: float = 0.35
    collapse_after_samples: int = 8
    max_extra_rollouts_fraction: float | None = None
    write_ahead: bool = False
    write_ahead_min_collapse_probability: float = 0.5
    seed: int | None = None

    def validate(self) -> None:
        for key, value, allowed in (
            ("schedule", self.schedule, HINT_SCHEDULES),
            ("source", self.source, HINT_SOURCES),
            ("fallback", self.fallback, HINT_FALLBACKS),
        ):
            if value not in allowed:
                raise ValueError(f"hints.{key}={value!r} is not one of {list(allowed)}")
        if self.retries < 0:
            raise ValueError(f"hints.retries={self.retries} must be >= 0 (0 = one generation)")
        if self.temperature < 0:
            raise ValueError(f"hints.temperature={self.temperature} must be >= 0 (0 = greedy)")
        if self.max_hint_tokens < 1:
            raise ValueError(f"hints.max_hint_tokens={self.max_hint_tokens} must be >= 1")
        for field in ("{prompt}", "{solution}"):
            if field not in self.prompt_template:
                raise ValueError(
                    f"hints.prompt_template={self.prompt_template!r} lacks {field}; the hint "
                    "mode must see the prompt and its reference solution"
                )
        if "{hint}" not in self.show_template:
            raise ValueError(
                f"hints.show_template={self.show_template!r} lacks {{hint}}, where the hint goes"
            )
        if self.source == "model" and not self.model:
            raise ValueError(
                "hints.source=model needs hints.model: a Hugging Face directory or hub name of "
                "the hint model"
            )
        if self.model and self.source != "model":
            raise ValueError(
                f"hints.model={self.model!r} is set but hints.source={self.source!r}; set "
                "hints.source=model to use it, or hints.model=null"
            )
        if self.first_level not in (1, 2, 3):
            raise ValueError(f"hints.first_level={self.first_level} must be 1, 2 or 3")
        if not 0.0 <= self.up_threshold <= self.down_threshold <= 1.0:
            raise ValueError(
                f"hints.up_threshold={self.up_threshold} and hints.down_threshold="
                f"{self.down_threshold} must satisfy 0 <= up_threshold <= down_threshold <= 1"
            )
        if self.max_extra_rollouts_fraction is not None and not (
            self.max_extra_rollouts_fraction >= 0
        ):
            raise ValueError(
                f"hints.max_extra_rollouts_fraction={self.max_extra_rollouts_fraction} must be "
                ">= 0 or null (no ceiling)"
            )
        if self.collapse_after_samples < 1:
            raise ValueError(
                f"hints.collapse_after_samples={self.collapse_after_samples} must be >= 1"
            )
        if not 0.0 <= self.write_ahead_min_collapse_probability <= 1.0:
            raise ValueError(
                "hints.write_ahead_min_collapse_probability="
                f"{self.write_ahead_min_collapse_probability} must be in [0, 1] (0 = every prompt)"
            )
        if self.write_ahead and self.schedule == "off":
            raise ValueError(
                "hints.write_ahead=true but hints.schedule=off: there are no hints to write; "
                "choose a schedule (sage, sage_light) or set hints.write_ahead=false"
            )
        if self.write_ahead and self.source == "template":
            raise ValueError(
                "hints.write_ahead=true with hints.source=template: template hints are derived "
                "when asked at no cost, so there is nothing to write ahead; set "
                "hints.write_ahead=false"
            )
        fraction = self.max_extra_rollouts_fraction
        if fraction is not None and not fraction > 0:
            raise ValueError(
                f"hints.max_extra_rollouts_fraction={fraction} must be > 0 (e.g. 0.25), or null "
                "for no bound"
            )
