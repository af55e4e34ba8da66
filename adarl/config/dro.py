"""Structured config of DRO (`dro`): the R3 reward and the cross-rollout variance filter.

Source: Direct Reasoning Optimization (arXiv 2506.13351); equations in adarl/algo/dro.py and
docs/algorithms.md §10. The paper publishes no thresholds: every default below is adarl's,
measured on the built-in task (docs/benchmarks.md "DRO"). Read by `adarl.reward.r3.
build_pool_reward` (the scoring pass and R3) and `adarl.allocator.variance_filter.
build_variance_filter` (the filter, wrapping whatever sampler `allocator.sampler` names).

`DroConfig`
    reward: "verifier" (the task's verifier rewards are trained on; no R3) or "r3" (each finished
        pool's rewards are replaced by R3: the task is scored only through the likelihood of its
        reference answer; the verifier still runs, for evaluation and for the logged
        correlation `signal/r3_verifier_correlation`). "r3" needs `allocator.sampler=uniform` (a
        sampler that reads rewards while sampling would read the verifier's) and a uniform-group
        advantage that takes real-valued rewards ("grpo", "dr_grpo", "rloo").
    template: how a rollout conditions the reference answer: "answer_marker" (the prompt, the
        completion before its last `answer_marker`, then the marker) or "arithmetic_restatement"
        (the built-in arithmetic task, whose tiny policy answers without reasoning: the rollout's
        answer restated as "<answer>+0=", adarl/reward/arithmetic_reflection.py; needs
        `task.source=arithmetic`).
    answer_marker: the marker of "answer_marker" (include a space the policy writes after it).
    certainty: the per-token quantity R3 sums and the deviation is taken of: "prob" (the token's
        probability: R3 in [0, 1] without contrast) or "logprob".
    weight_shape: token weights, increasing in the token's cross-rollout deviation σ_j: "power"
        (w ∝ σ^weight_power), "softmax" (w ∝ exp(σ / weight_temperature)) or "uniform" (no
        selection: the plain mean certainty).
    weight_power: the exponent of "power" (> 0; 1 = linear in σ).
    weight_temperature: the temperature of "softmax" (> 0; in units of σ).
    contrast: subtract the masked-reasoning baseline (the reference's certainty with the
        reasoning removed) token by token. Within a prompt it shifts every rollout's R3 by the
        same amount, so group-normalised advantages are unchanged; it changes comparisons across
        prompts (the pooled correlation, the filter's ranking is unaffected).
    filter: `DroFilterConfig`.

A scoring pass (one teacher-forced pair per rollout, `timing/pool_reward_s`) runs each step when
`reward=r3` or `filter.enabled`.

`DroFilterConfig` (`adarl.allocator.variance_filter.VarianceFilter`; works with any sampler)
    enabled: wrap the sampler with the variance filter.
    drop_fraction: at each application, drop the prompts whose maximum per-token deviation
        max_j σ_j ranks in this lowest fraction (⌊fraction × M⌋ of the M prompts measured since
        the previous application).
    top_k: also drop prompts where no rollout brings the reference within the top k: every
        reference token's probability ≥ 1/(k+1), which certifies a rank ≤ k from log-probs
        alone (adarl/algo/dro.py `reaches_top_k`); None = no such rule.
    interval_steps: apply the filter every this many steps (the first step included); between
        applications measured prompts accumulate and are trained on.
    carry_forward_fraction: dropped prompts are skipped when the prompt source serves them again
        (and replaced by fresh ones); at the next application this fraction of the drop set (the
        lowest deviations first) stays dropped, the rest is re-admitted to be measured again
        under the current policy. In [0, 1): 1 would drop prompts for good.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from adarl.algo.advantages import real_valued_estimators

REWARDS = ("verifier", "r3")
TEMPLATES = ("answer_marker", "arithmetic_restatement")
CERTAINTIES = ("prob", "logprob")
WEIGHT_SHAPES = ("power", "softmax", "uniform")


@dataclass
class DroFilterConfig:
    enabled: bool = False
    drop_fraction: float = 0.2
    top_k: int | None = 10
    interval_steps: int = 1
    carry_forward_fraction: float = 0.5

    def validate(self) -> None:
        if not 0.0 <= self.drop_fraction < 1.0:
            raise ValueError(
                f"dro.filter.drop_fraction={self.drop_fraction} must be in [0, 1) (e.g. 0.2 "
                "drops the fifth of measured prompts with the least cross-rollout deviation)"
            )
        if self.top_k is not None and self.top_k < 1:
            raise ValueError(f"dro.filter.top_k={self.top_k} must be >= 1, or null (no rule)")
        if self.interval_steps < 1:
            raise ValueError(f"dro.filter.interval_steps={self.interval_steps} must be >= 1")
        if not 0.0 <= self.carry_forward_fraction < 1.0:
            raise ValueError(
                f"dro.filter.carry_forward_fraction={self.carry_forward_fraction} must be in "
                "[0, 1) (1 would never re-admit a dropped prompt)"
            )


@dataclass
class DroConfig:
    reward: str = "verifier"
    template: str = "answer_marker"
    answer_marker: str = "Answer:"
    certainty: str = "prob"
    weight_shape: str = "power"
    weight_power: float = 1.0
    weight_temperature: float = 0.1
    contrast: bool = False
    filter: DroFilterConfig = field(default_factory=DroFilterConfig)

    @property
    def scoring_pass(self) -> bool:
        """Whether a scoring pass runs each step (R3 rewards or the filter's statistics)."""
        return self.reward == "r3" or self.filter.enabled

    def validate(self) -> None:
        for key, value, allowed in (
            ("reward", self.reward, REWARDS),
            ("template", self.template, TEMPLATES),
            ("certainty", self.certainty, CERTAINTIES),
            ("weight_shape", self.weight_shape, WEIGHT_SHAPES),
        ):
            if value not in allowed:
                raise ValueError(f"dro.{key}={value!r} is not one of {allowed}")
        if not self.answer_marker:
            raise ValueError("dro.answer_marker must be a non-empty string (e.g. 'Answer:')")
        if not self.weight_power > 0:
            raise ValueError(f"dro.weight_power={self.weight_power} must be > 0")
        if not self.weight_temperature > 0:
            raise ValueError(f"dro.weight_temperature={self.weight_temperature} must be > 0")
        self.filter.validate()

    def validate_with(self, *, sampler: str, advantage: str, task_source: str) -> None:
        """What `dro` needs of the other areas (`AdarlConfig.validate` calls it)."""
        if self.reward == "r3" and sampler != "uniform":
            raise ValueError(
                f"dro.reward=r3 with allocator.sampler={sampler!r}: that sampler decides from "
                "the verifier's rewards while sampling, which R3 replaces only at the end of the "
                "step; use allocator=uniform (or dro.reward=verifier to keep the verifier)"
            )
        if self.reward == "r3" and advantage not in real_valued_estimators():
            raise ValueError(
                f"dro.reward=r3 with allocator.group.advantage={advantage!r}: R3 rewards are "
                f"real-valued, not pass/fail; use one of {real_valued_estimators()}"
            )
        if (
            self.scoring_pass
            and self.template == "arithmetic_restatement"
            and (task_source != "arithmetic")
        ):
            raise ValueError(
                f"dro.template=arithmetic_restatement restates arithmetic answers but "
                f"task.source={task_source!r}; use dro.template=answer_marker for other tasks"
            )
