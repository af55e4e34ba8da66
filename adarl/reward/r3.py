"""R3, DRO's reasoning-reflective reward, as a pool reward stage (adarl/allocator/pool_reward.py).

Per finished pool (one prompt, N rollouts) the stage makes one scoring pair per rollout:

    context_i   = the prompt and rollout i's reasoning, laid out by a `ReflectionTemplate`
    reference   = the example's reference answer tokens (then end-of-sequence)

plus, with `contrast`, one pair whose context has the reasoning masked out. Every pool of the
step goes to the engines in one batched `score` call (`RolloutPool.score`, temperature 1: the
model's own certainty). The numbers are `adarl.algo.dro`'s: per-token certainty s_ij, its
deviation σ_j across the N rollouts, weights w(σ), R3_i = Σ_j w_j (s_ij - b_j).

With `replace_rewards` the pool's rewards become R3 (a task scored only through the reference's
likelihood); otherwise the verifier's rewards stay and the pass only measures (for the variance
filter). Either way each pool reports the statistics the filter reads (`max_deviation`; with
`top_k`, `reaches_top_k`), and the stage's metrics compare R3 with the rewards the pool came in
with (the verifier's): the correlation the issue asks for, on any task that has a verifier.

Templates: `AnswerMarkerTemplate` (reasoning = the completion before an answer marker such as
"Answer:", for tasks whose responses reason first) and, for the built-in arithmetic task whose
tiny policy answers without reasoning, `adarl.reward.arithmetic_reflection.ArithmeticRestatement`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
from transformers import PreTrainedTokenizerBase

from adarl.algo.dro import (
    CERTAINTIES,
    WEIGHT_SHAPES,
    pearson,
    reaches_top_k,
    reflection_reward,
    token_certainty,
    token_deviation,
    token_weights,
)
from adarl.config.dro import DroConfig
from adarl.types import FinishedPool, RescoredPool, Rollout, ScoreFn, TaskExample

DEVIATION_QUANTILES = (0.1, 0.5, 0.9)


class ReflectionTemplate(Protocol):
    """How a rollout conditions the reference answer: token ids of the scoring pairs."""

    def reference(self, example: TaskExample) -> tuple[int, ...]:
        """The reference answer's tokens, as the policy would write them (non-empty)."""
        ...

    def context(self, example: TaskExample, rollout: Rollout) -> tuple[int, ...]:
        """The prefix the reference is scored after: the prompt and the rollout's reasoning."""
        ...

    def masked_context(self, example: TaskExample, rollout: Rollout) -> tuple[int, ...]:
        """The same prefix with the reasoning masked out (the contrast baseline)."""
        ...


class AnswerMarkerTemplate:
    """Responses that reason, then write `marker` and the answer ("... so 42. Answer: 42").

    context = the rollout's prompt tokens + the completion text before the last `marker` (all of
    it when the marker is absent) + `marker`; masked context = prompt + `marker`; reference =
    the answer + end-of-sequence. Put any space the policy writes after the marker into `marker`.
    """

    def __init__(self, *, tokenizer: PreTrainedTokenizerBase, marker: str) -> None:
        if not marker:
            raise ValueError("AnswerMarkerTemplate: marker must be a non-empty string")
        self.tokenizer = tokenizer
        self.marker = marker

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def reference(self, example: TaskExample) -> tuple[int, ...]:
        eos = self.tokenizer.eos_token_id
        return (*self._encode(example.answer), *([] if eos is None else [eos]))

    def context(self, example: TaskExample, rollout: Rollout) -> tuple[int, ...]:
        text = rollout.completion.text
        cut = text.rfind(self.marker)
        reasoning = text if cut == -1 else text[:cut]
        return (*rollout.prompt_token_ids, *self._encode(reasoning + self.marker))

    def masked_context(self, example: TaskExample, rollout: Rollout) -> tuple[int, ...]:
        return (*rollout.prompt_token_ids, *self._encode(self.marker))


@dataclass
class _Window:
    """What the stage saw since its last `metrics()` call."""

    pools: int = 0
    pairs: int = 0
    tokens: int = 0
    build_s: float = 0.0
    score_s: float = 0.0
    r3: list[float] = field(default_factory=list)
    incoming: list[float] = field(default_factory=list)  # the rewards the pools came in with
    within: list[float] = field(default_factory=list)  # per-prompt correlations
    max_deviation: list[float] = field(default_factory=list)
    token_deviation: list[float] = field(default_factory=list)
    reached: int = 0


class R3PoolReward:
    """The R3 pool reward stage (see the module docstring). Implements `PoolReward`."""

    def __init__(
        self,
        *,
        template: ReflectionTemplate,
        certainty: str = "prob",
        weight_shape: str = "power",
        weight_power: float = 1.0,
        weight_temperature: float = 0.1,
        contrast: bool = False,
        replace_rewards: bool = True,
        top_k: int | None = None,
    ) -> None:
        if certainty not in CERTAINTIES:
            raise ValueError(f"R3: certainty must be one of {CERTAINTIES}, got {certainty!r}")
        if weight_shape not in WEIGHT_SHAPES:
            raise ValueError(f"R3: weight_shape must be one of {WEIGHT_SHAPES}")
        if top_k is not None and top_k < 1:
            raise ValueError(f"R3: top_k must be >= 1 or None, got {top_k}")
        self.template = template
        self.certainty = certainty
        self.weight_shape = weight_shape
        self.weight_power = weight_power
        self.weight_temperature = weight_temperature
        self.contrast = contrast
        self.replace_rewards = replace_rewards
        self.top_k = top_k
        self._window = _Window()

    def rescore(self, pools: Sequence[FinishedPool], *, score: ScoreFn) -> dict[str, RescoredPool]:
        start = time.perf_counter()
        contexts: list[tuple[int, ...]] = []
        references: list[tuple[int, ...]] = []
        offsets: list[int] = []
        for pool in pools:
            reference = self.template.reference(pool.example)
            if not reference or not pool.rollouts:
                raise ValueError(
                    f"R3: prompt {pool.prompt_id!r} has {len(reference)} reference tokens and "
                    f"{len(pool.rollouts)} rollouts; both must be non-empty (check the task's "
                    "answers and dro.template)"
                )
            offsets.append(len(contexts))
            for scored in pool.rollouts:
                contexts.append(self.template.context(pool.example, scored.rollout))
                references.append(reference)
            if self.contrast:
                contexts.append(
                    self.template.masked_context(pool.example, pool.rollouts[0].rollout)
                )
                references.append(reference)
        scored_at = time.perf_counter()
        logprobs = score(contexts, references, temperature=1.0) if contexts else []
        done_at = time.perf_counter()
        window = self._window
        window.build_s += scored_at - start
        window.score_s += done_at - scored_at
        window.pairs += len(contexts)
        window.tokens += sum(len(c) + len(r) for c, r in zip(contexts, references, strict=True))
        rescored = {
            pool.prompt_id: self._pool(pool, logprobs, offset)
            for pool, offset in zip(pools, offsets, strict=True)
        }
        window.build_s += time.perf_counter() - done_at
        return rescored

    def _pool(
        self, pool: FinishedPool, logprobs: Sequence[Sequence[float]], offset: int
    ) -> RescoredPool:
        n = len(pool.rollouts)
        table = np.array(logprobs[offset : offset + n], dtype=np.float64)  # [N, L]
        certainty = token_certainty(table, certainty=self.certainty)
        deviation = token_deviation(certainty)  # [L]
        weights = token_weights(
            deviation,
            shape=self.weight_shape,
            power=self.weight_power,
            temperature=self.weight_temperature,
        )
        baseline = (
            token_certainty(np.array(logprobs[offset + n]), certainty=self.certainty)
            if self.contrast
            else None
        )
        r3 = reflection_reward(certainty, weights=weights, baseline=baseline)  # [N]
        incoming = [s.reward for s in pool.rollouts]
        statistics = {"max_deviation": float(deviation.max())}
        if self.top_k is not None:
            reached = bool(reaches_top_k(table, k=self.top_k).any())
            statistics["reaches_top_k"] = float(reached)
            self._window.reached += int(reached)
        window = self._window
        window.pools += 1
        window.r3 += r3.tolist()
        window.incoming += incoming
        window.max_deviation.append(statistics["max_deviation"])
        window.token_deviation += deviation.tolist()
        within = pearson(r3.tolist(), incoming) if n > 1 else None
        if within is not None:
            window.within.append(within)
        rewards = r3.tolist() if self.replace_rewards else incoming
        return RescoredPool(rewards=tuple(float(r) for r in rewards), statistics=statistics)

    def metrics(self) -> dict[str, float]:
        """Since the previous call: the scoring pass's size and cost, R3's distribution and its
        correlation with the incoming (verifier) rewards, the deviation distributions."""
        window, self._window = self._window, _Window()
        out = {
            "sampling/r3_pools": float(window.pools),
            "sampling/r3_scored_pairs": float(window.pairs),
            "sampling/r3_scored_tokens": float(window.tokens),
            "timing/r3_scoring_s": window.score_s,
            "timing/r3_compute_s": window.build_s,
        }
        if not window.pools:
            return out
        out["signal/r3_mean"] = float(np.mean(window.r3))
        out["signal/r3_std"] = float(np.std(window.r3))
        pooled = pearson(window.r3, window.incoming)
        if pooled is not None:  # undefined when every incoming reward is equal
            out["signal/r3_verifier_correlation"] = pooled
        out["signal/r3_verifier_correlation_prompts"] = float(len(window.within))
        if window.within:
            out["signal/r3_verifier_correlation_within"] = float(np.mean(window.within))
        quantiles = np.quantile(window.max_deviation, DEVIATION_QUANTILES)
        for q, value in zip(DEVIATION_QUANTILES, quantiles, strict=True):
            out[f"signal/r3_max_deviation_q{round(100 * q)}"] = float(value)
        out["signal/r3_token_deviation_mean"] = float(np.mean(window.token_deviation))
        if self.top_k is not None:
            out["signal/r3_reference_in_top_k_fraction"] = window.reached / window.pools
        return out


def build_pool_reward(
    config: DroConfig, *, tokenizer: PreTrainedTokenizerBase
) -> R3PoolReward | None:
    """The R3 stage `config` asks for (a scoring pass runs when `dro.reward=r3` or the variance
    filter is on), or None."""
    config.validate()
    if not config.scoring_pass:
        return None
    template: ReflectionTemplate
    if config.template == "arithmetic_restatement":
        from adarl.reward.arithmetic_reflection import ArithmeticRestatement

        template = ArithmeticRestatement(tokenizer=tokenizer)
    else:
        template = AnswerMarkerTemplate(tokenizer=tokenizer, marker=config.answer_marker)
    return R3PoolReward(
        template=template,
        certainty=config.certainty,
        weight_shape=config.weight_shape,
        weight_power=config.weight_power,
        weight_temperature=config.weight_temperature,
        contrast=config.contrast,
        replace_rewards=config.reward == "r3",
        top_k=config.filter.top_k if config.filter.enabled else None,
    )
