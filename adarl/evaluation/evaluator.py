"""Held-out evaluation: pass@k, coverage and the guesser's pass@k, overall and by difficulty level.

Every evaluation samples each held-out prompt n times at temperature T with no hint (the
deployment condition, hint level 0), seeded per prompt so that every evaluation of a run, and
every run of a root seed, draws with the same seeds. It reports (adarl/evaluation/passk.py):

    eval/accuracy                mean reward over the samples: pass@1 (and the curves' y axis)
    eval/pass@K                  unbiased pass@K for K = 2, 4, … up to n, and n
    eval/coverage                share of prompts with at least one correct sample (pass@n)
    eval/guess_pass@K            the guesser's pass@K (answers drawn from the training answers of
                                 the prompt's level), K = 1 … n
    eval/pass@K_above_guess      pass@K − the guesser's: what the policy covers beyond chance
    eval/pass@K_by_difficulty/L  and eval/guess_pass@K_by_difficulty/L, per level L
    eval/greedy_accuracy         one greedy sample per prompt (`eval.greedy`)
    eval/best_constant_accuracy  the training split's most common answer, always given, scored
                                 by the task's verifier: learning means beating it

Each evaluation says which it is (`EvalKind`): the base evaluation (step 0) and the final one draw
`eval.final_samples_per_prompt` samples (64 by default), with the same seeds, so base → final is
paired; the periodic evaluations in between draw `eval.samples_per_prompt`. The one builder of an
`Evaluator` from a config is adarl/evaluation/build.py.
"""

from __future__ import annotations

import enum
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from adarl.evaluation.passk import (
    guess_hit_rates,
    guess_pass_at_k,
    paired_pass_at_1_rise,
    pass_at_k,
    pass_at_k_ks,
)
from adarl.reward.base import Verifier
from adarl.rollout.codec import PromptCodec
from adarl.tasks.baselines import (
    ConstantAnswer,
    best_constant_answer,
    constant_answer_rewards,
    lead_over,
)
from adarl.types import (
    GenerationRequest,
    GenerationResult,
    PromptRequest,
    Rollout,
    SamplingParams,
    ScoredRollout,
    TaskExample,
)


class EngineLike(Protocol):
    """What evaluation needs of a rollout pool: one blocking batch of generations."""

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]: ...


class ScorerLike(Protocol):
    """What evaluation needs of a reward pool."""

    def score(
        self, rollouts: Sequence[Rollout], examples: Sequence[TaskExample]
    ) -> list[ScoredRollout]: ...
    def metrics(self) -> dict[str, float]: ...


class EvalKind(enum.Enum):
    """Which of a run's evaluations this is: it decides the samples drawn per prompt."""

    BASE = "base"  # step 0, before any update: `final_samples_per_prompt`, paired with FINAL
    PERIODIC = "periodic"  # eval.every_steps / eval.every_rollouts: `samples_per_prompt`
    FINAL = "final"  # the last step, or a model on its own (adarl.evaluate): as BASE


def difficulty_label(difficulty: float | None) -> str:
    """A difficulty as a metric-name suffix: "2" for 2.0, "0.5" for 0.5, "none" if unset."""
    if difficulty is None:
        return "none"
    return f"{difficulty:g}"


def eval_reward_metrics(pool_metrics: Mapping[str, float]) -> dict[str, float]:
    """The reward pool's counters over an evaluation, renamed so they never mix with training:
    `sampling/reward_X` -> `eval/reward_X`, `timing/reward_X` -> `timing/eval_reward_X`."""
    out = {}
    for name, value in pool_metrics.items():
        group, _, rest = name.partition("/")
        out[f"eval/{rest}" if group == "sampling" else f"timing/eval_{rest}"] = value
    return out


@dataclass(frozen=True)
class EvalResult:
    """One evaluation: per-prompt counts, from which every figure is computed.

    `correct[i]` of `samples_per_prompt` samples of held-out prompt i were correct; `levels[i]`
    is its difficulty label; `guess_rates[i]` the guesser's hit probability on it (empty when no
    training answers were given). Plain lists, so a checkpoint stores the base evaluation whole.
    """

    accuracy: float  # mean reward over samples at the eval temperature (pass@1 for 0/1 rewards)
    greedy_accuracy: float | None
    num_prompts: int
    samples_per_prompt: int
    completions: list[dict[str, Any]]
    accuracy_by_difficulty: dict[str, float] = field(default_factory=dict)
    cost_metrics: dict[str, float] = field(default_factory=dict)  # eval/reward_*, timing/eval_*
    correct: list[int] = field(default_factory=list)  # [P] correct samples per prompt
    levels: list[str] = field(default_factory=list)  # [P] difficulty labels
    guess_rates: list[float] = field(default_factory=list)  # [P] guesser's hit probability
    # The training split's most common answer, always given, scored on these prompts by the
    # task's verifier (adarl/tasks/baselines.py): learning means beating it. None without one.
    best_constant: ConstantAnswer | None = None
    constant_rewards: list[float] = field(default_factory=list)  # [P] its reward per prompt
    # [P] distinct correct responses per prompt (by text): coverage of solutions, not of prompts
    distinct_correct: list[int] = field(default_factory=list)
    response_tokens: list[float] = field(default_factory=list)  # [P] mean response tokens
    prompt_ids: list[str] = field(default_factory=list)  # [P] the prompts, in this order

    @property
    def ks(self) -> tuple[int, ...]:
        return pass_at_k_ks(self.samples_per_prompt)

    def state_dict(self) -> dict[str, Any]:
        """Plain containers only, so a checkpoint loads it with `torch.load(weights_only=True)`."""
        constant = self.best_constant
        return {**self.__dict__, "best_constant": None if constant is None else constant._asdict()}

    @classmethod
    def from_state_dict(cls, state: Mapping[str, Any]) -> EvalResult:
        constant = state.get("best_constant")  # absent from checkpoints of older runs
        return cls(
            **{
                **state,
                "best_constant": None if constant is None else ConstantAnswer(**constant),
            }
        )

    def pass_at_k(self, *, level: str | None = None) -> dict[int, float]:
        """Mean unbiased pass@K over the prompts (of one level), for every reported K."""
        counts = np.asarray(self._select(self.correct, level), dtype=np.int64)
        return {
            k: float(pass_at_k(self.samples_per_prompt, counts, k).mean()) if counts.size else 0.0
            for k in self.ks
        }

    def guess_pass_at_k(self, *, level: str | None = None) -> dict[int, float]:
        """The guesser's pass@K over the same prompts; empty without training answers."""
        if not self.guess_rates:
            return {}
        rates = np.asarray(self._select(self.guess_rates, level), dtype=np.float64)
        return {k: float(guess_pass_at_k(rates, k).mean()) if rates.size else 0.0 for k in self.ks}

    @property
    def coverage(self) -> float:
        """Share of prompts with at least one correct sample."""
        return float(np.mean(np.asarray(self.correct) > 0)) if self.correct else 0.0

    def _select(self, values: Sequence[Any], level: str | None) -> list[Any]:
        if level is None:
            return list(values)
        return [v for v, lv in zip(values, self.levels, strict=True) if lv == level]

    def table(self) -> dict[str, Any]:
        """The JSON summary of this evaluation (summary.json, `python -m adarl.evaluate`)."""
        levels = sorted(set(self.levels), key=level_key)
        guess = self.guess_pass_at_k()
        return {
            "num_prompts": self.num_prompts,
            "samples_per_prompt": self.samples_per_prompt,
            "pass_at_k": {str(k): v for k, v in self.pass_at_k().items()},
            "guess_pass_at_k": {str(k): v for k, v in guess.items()},
            "coverage": self.coverage,
            "greedy_accuracy": self.greedy_accuracy,
            "best_constant": None if self.best_constant is None else self.best_constant._asdict(),
            "by_level": {
                level: {
                    "num_prompts": self.levels.count(level),
                    "pass_at_k": {str(k): v for k, v in self.pass_at_k(level=level).items()},
                    "guess_pass_at_k": {
                        str(k): v for k, v in self.guess_pass_at_k(level=level).items()
                    },
                }
                for level in levels
            },
        }

    def pass_at_1_rise_over(self, base: EvalResult) -> dict[str, float] | None:
        """This evaluation's pass@1 minus `base`'s, paired by prompt (`paired_pass_at_1_rise`):
        {"rise", "se", "prompts"}; None unless both drew the same number of samples on the same
        number of prompts (a base and a final evaluation of one run do)."""
        if (
            base.samples_per_prompt != self.samples_per_prompt
            or len(base.correct) != len(self.correct)
            or len(self.correct) < 2
        ):
            return None
        rise, se = paired_pass_at_1_rise(
            base_correct=base.correct,
            final_correct=self.correct,
            num_samples=self.samples_per_prompt,
        )
        return {"rise": rise, "se": se, "prompts": float(len(self.correct))}

    def lead_over_best_constant(self) -> dict[str, float] | None:
        """This evaluation's pass@1 minus the best constant answer's, paired by prompt
        (`lead_over`): {"lead", "se", "prompts"}; a run has learned the task, not its answers'
        prior, when the lead is large and many SE. None without a constant answer."""
        if not self.constant_rewards or len(self.constant_rewards) != len(self.correct):
            return None
        lead = lead_over(
            np.asarray(self.correct, dtype=np.float64) / self.samples_per_prompt,
            self.constant_rewards,
        )
        return {"lead": lead.mean, "se": lead.se, "prompts": float(len(self.correct))}

    def metrics(self) -> dict[str, float]:
        out = {"eval/accuracy": self.accuracy, "eval/num_prompts": float(self.num_prompts)}
        out["eval/samples_per_prompt"] = float(self.samples_per_prompt)
        if self.greedy_accuracy is not None:
            out["eval/greedy_accuracy"] = self.greedy_accuracy
        for level, accuracy in self.accuracy_by_difficulty.items():
            out[f"eval/accuracy_by_difficulty/{level}"] = accuracy
        if self.correct:
            passes = self.pass_at_k()
            guess = self.guess_pass_at_k()
            for k, value in passes.items():
                if k > 1:  # pass@1 is eval/accuracy
                    out[f"eval/pass@{k}"] = value
                if k in guess:
                    out[f"eval/guess_pass@{k}"] = guess[k]
                    out[f"eval/pass@{k}_above_guess"] = value - guess[k]
            out["eval/coverage"] = self.coverage
            if self.distinct_correct:
                out["eval/distinct_correct_per_prompt"] = float(np.mean(self.distinct_correct))
            if self.response_tokens:
                out["eval/response_tokens_mean"] = float(np.mean(self.response_tokens))
            for level in sorted(set(self.levels), key=level_key):
                level_guess = self.guess_pass_at_k(level=level)
                for k, value in self.pass_at_k(level=level).items():
                    out[f"eval/pass@{k}_by_difficulty/{level}"] = value
                    if k in level_guess:
                        out[f"eval/guess_pass@{k}_by_difficulty/{level}"] = level_guess[k]
        if self.best_constant is not None:
            out["eval/best_constant_accuracy"] = self.best_constant.accuracy
        return {**out, **self.cost_metrics}


def level_key(level: str) -> tuple[int, float, str]:
    """Numeric levels in numeric order, then the rest by name."""
    try:
        return (0, float(level), "")
    except ValueError:
        return (1, 0.0, level)


@dataclass
class Evaluator:
    """Held-out pass@k with no hint, sampled at temperature T, plus greedy (module docstring).

    `train_examples` (the training split) give the guesser its answers; without them no guesser
    figures are reported. Its prompts never carry a hint (`PromptRequest.hint` is None):
    evaluation measures the deployment condition, hint level 0.
    """

    examples: Sequence[TaskExample]
    codec: PromptCodec
    samples_per_prompt: int
    temperature: float
    max_new_tokens: int
    greedy: bool
    completions_to_log: int
    seed: int
    train_examples: Sequence[TaskExample] = ()
    verifier: Verifier | None = None  # with train_examples: the best constant answer's accuracy
    # Samples per prompt of the base and final evaluations (None: `samples_per_prompt`).
    final_samples_per_prompt: int | None = None
    guess_rates: list[float] = field(init=False, default_factory=list)
    best_constant: ConstantAnswer | None = field(init=False, default=None)
    constant_rewards: list[float] = field(init=False, default_factory=list)

    def __post_init__(self) -> None:
        if self.train_examples and self.examples and self.verifier is not None:
            self.best_constant = best_constant_answer(
                self.train_examples, self.examples, self.verifier
            )
            self.constant_rewards = constant_answer_rewards(
                self.best_constant.answer, self.examples, self.verifier
            )
        if self.train_examples and self.examples:
            self.guess_rates = [
                float(g)
                for g in guess_hit_rates(
                    [e.answer for e in self.examples],
                    [difficulty_label(e.difficulty) for e in self.examples],
                    [e.answer for e in self.train_examples],
                    [difficulty_label(e.difficulty) for e in self.train_examples],
                )
            ]

    def evaluate(
        self,
        rollout: EngineLike,
        rewards: ScorerLike,
        *,
        step: int,
        kind: EvalKind = EvalKind.PERIODIC,
    ) -> EvalResult:
        """Evaluate now, as the `kind` of evaluation (the base and final ones draw more)."""
        if not self.examples:
            raise ValueError(
                "Evaluator has no held-out examples; set task.test_path or task.test_fraction"
            )
        n = self.samples_per_prompt
        if kind is not EvalKind.PERIODIC and self.final_samples_per_prompt is not None:
            n = self.final_samples_per_prompt
        if n < 1:
            raise ValueError(f"an evaluation draws at least one sample per prompt (got {n})")
        rewards.metrics()  # opens the reward pool's window: the counters below are eval only
        scores, correct, scored, solutions = self._sample(
            rollout,
            rewards,
            step=step,
            num_samples=n,
            sampling=SamplingParams(
                temperature=self.temperature, max_new_tokens=self.max_new_tokens
            ),
            tag="sample",
        )
        greedy = (
            self._sample(
                rollout,
                rewards,
                step=step,
                num_samples=1,
                sampling=SamplingParams(temperature=0.0, max_new_tokens=self.max_new_tokens),
                tag="greedy",
            )
            if self.greedy
            else None
        )
        levels = [difficulty_label(example.difficulty) for example in self.examples]
        by_level: dict[str, list[float]] = defaultdict(list)
        for level, score in zip(levels, scores, strict=True):
            by_level[level].append(score)
        return EvalResult(
            accuracy=float(np.mean(scores)),
            greedy_accuracy=(float(np.mean(greedy[0])) if greedy else None),
            num_prompts=len(self.examples),
            samples_per_prompt=n,
            completions=[
                {
                    "step": step,
                    "prompt": ex.prompt,
                    "answer": ex.answer,
                    "completion": s.rollout.completion.text,
                    "reward": s.reward,
                }
                for ex, s in scored[: self.completions_to_log]
            ],
            accuracy_by_difficulty={
                level: float(np.mean(values))
                for level, values in sorted(by_level.items(), key=lambda kv: level_key(kv[0]))
            },
            cost_metrics=eval_reward_metrics(rewards.metrics()),
            correct=correct,
            levels=levels,
            guess_rates=list(self.guess_rates),
            best_constant=self.best_constant,
            constant_rewards=list(self.constant_rewards),
            distinct_correct=solutions.distinct_correct,
            response_tokens=solutions.response_tokens,
            prompt_ids=[example.prompt_id for example in self.examples],
        )

    def _sample(
        self,
        rollout: EngineLike,
        rewards: ScorerLike,
        *,
        step: int,
        num_samples: int,
        sampling: SamplingParams,
        tag: str,
    ) -> tuple[list[float], list[int], list[tuple[TaskExample, ScoredRollout]], _Solutions]:
        """Mean reward and correct count per prompt, each prompt's first scored sample, and its
        distinct correct responses and mean response length."""
        requests = [
            PromptRequest(
                request_id=f"eval-{tag}-{step}-{index}",
                example=example,
                num_samples=num_samples,
                step=step,
                seed=self.seed + 1_000_003 * index,  # the same eval draws at every step
            )
            for index, example in enumerate(self.examples)
        ]
        sent = [self.codec.generation_request(r, sampling=sampling) for r in requests]
        results = rollout.generate(sent)
        rollouts = [
            PromptCodec.rollouts(request, generation, result)
            for request, generation, result in zip(requests, sent, results, strict=True)
        ]
        scored_all = rewards.score(
            [r for per_prompt in rollouts for r in per_prompt],
            [request.example for request, rs in zip(requests, rollouts, strict=True) for _ in rs],
        )
        per_prompt: list[float] = []
        correct: list[int] = []
        shown: list[tuple[TaskExample, ScoredRollout]] = []
        solutions = _Solutions(distinct_correct=[], response_tokens=[])
        offset = 0
        for request, prompt_rollouts in zip(requests, rollouts, strict=True):
            scored = scored_all[offset : offset + len(prompt_rollouts)]
            offset += len(prompt_rollouts)
            if len(scored) != num_samples:
                raise RuntimeError(
                    f"evaluation asked {num_samples} samples of prompt "
                    f"{request.example.prompt_id!r} and got {len(scored)}: pass@k needs them all"
                )
            per_prompt.append(float(np.mean([s.reward for s in scored])))
            right = [s.rollout.completion.text for s in scored if s.reward >= _CORRECT_REWARD]
            correct.append(len(right))
            solutions.distinct_correct.append(len(set(right)))
            solutions.response_tokens.append(
                float(np.mean([len(s.rollout.completion.token_ids) for s in scored]))
            )
            shown.extend((request.example, s) for s in scored[:1])
        return per_prompt, correct, shown, solutions


@dataclass(frozen=True)
class _Solutions:
    """Per prompt: distinct correct response texts, mean response length in tokens."""

    distinct_correct: list[int]
    response_tokens: list[float]


# A sample counts as correct for pass@k when its reward is full credit. Verifier rewards are 0/1
# (partial-credit rewards, DRO's R3, are training-only), so pass@1 equals eval/accuracy.
_CORRECT_REWARD = 1.0
