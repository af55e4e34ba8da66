"""What every sampler shares: the protocol and its capabilities, per-prompt verdicts, the step
budget, request seeds.

A sampler decides, prompt by prompt, how many more responses to draw. It sees only prompt ids and
rewards (never rollouts or tokens) and holds only plain Python state, so `state_dict()` is a small
picklable dict and a sampler restored mid-step makes the same decisions as one that never stopped.

Life of a step, as the `BudgetAllocator` drives it (the `Sampler` protocol):

    start_step(step, prompt_ids, history)  # a new batch of prompts (and what is known of them)
    next() -> [Draw]                      # draws to dispatch now
    observe(prompt_id, rewards)           # the rewards of one returned draw, in sample order
    next() -> [Draw]                      # ... more draws unlocked by that result
    needs_prompts() -> int                # refills: the dynamic filter, a rollout budget
    add_prompts(prompt_ids)               # the driver's answer ([] = the source has none left)
    done() -> bool                        # nothing in flight and nothing left to draw
    verdict(prompt_id) -> PromptStatus    # how each prompt ended
    target_groups(), sequential_law()     # what the group builder needs of the step's pools

A sampler that does more implements a capability, a small protocol of its own, and nothing else:
`StatisticsRequester` (learner statistics: GVM), `PilotDrawer` (an estimation-only pilot),
`PassRateEstimator` (allocation by an estimate), `HintHost` (funding hinted conditions and
abandoning collapsed prompts), `InclusionWeigher` (chosen for rollouts with a probability:
curation), `PoolStatisticsObserver` (a pool reward stage's statistics: the DRO filter). The
allocator finds them with `capability(sampler, kind)`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any, Protocol, TypeVar, runtime_checkable

from adarl.algo.stopping import StoppingRule


class PromptStatus(str, Enum):
    """Where a prompt stands within the current step."""

    SAMPLING = "sampling"  # more draws may follow (or one is in flight)
    RESOLVED = "resolved"  # the exit condition was met: its pool is trained on
    UNRESOLVED = "unresolved"  # stopped at its cap or by the step budget without meeting it
    FILTERED = "filtered"  # dynamic filter: the finished pool failed the keep rule
    ABANDONED = "abandoned"  # the allocator gave up on it (collapsed, re-rolled with a hint)
    SKIPPED = "skipped"  # never drawn: its history chose it out before rollout (curation)


@dataclass(frozen=True)
class Draw:
    """A sampler's decision: draw `num_samples` more responses for `prompt_id`.

    `index` counts the draws of this prompt within the step (0 = first); it names the request and
    seeds it, so a resumed sampler reproduces the same requests.
    """

    prompt_id: str
    num_samples: int
    index: int


@dataclass(frozen=True)
class PromptHistory:
    """What the allocator knows about a prompt from earlier steps (read-only for samplers)."""

    pass_rate: float  # smoothed estimate (EMA with a Beta prior); the prior mean if never seen
    samples: int  # lifetime samples
    grad_norm: float | None  # last per-prompt gradient norm reported by the learner
    # The EMA's discounted counts (λ per visit): pseudo-counts a sampler may add to its posterior.
    ema_positives: float = 0.0
    ema_negatives: float = 0.0
    last_step: int = -1  # the step that last updated these statistics (-1: never)
    # History as a posterior (adarl/allocator/stats.py): the prior pooled from prompts like it,
    # and every earlier outcome discounted by age. Beta(1, 1) and 0, 0 when the store was asked
    # without a step, or knows nothing.
    prior_alpha: float = 1.0
    prior_beta: float = 1.0
    decayed_positives: float = 0.0
    decayed_negatives: float = 0.0
    last_pass_rate: float | None = None  # the latest visit's pool rate (None: never drawn)
    zero_variance_streak: int = 0  # +z: last z visits all correct; -z: all wrong
    skipped_visits: int = 0  # visits skipped since the last rollout
    recent_labels: str = ""  # its latest sample labels, oldest first ("1" positive, "0" negative)

    def posterior(self) -> tuple[float, float]:
        """Beta(a, b) of the pass rate: the pooled prior plus the discounted counts."""
        return (
            self.prior_alpha + self.decayed_positives,
            self.prior_beta + self.decayed_negatives,
        )


@dataclass(frozen=True)
class SequentialLaw:
    """How a sequential sampler drew its pools: what an unbiased pass-rate estimate of a pool
    conditions on (`adarl.algo.drawing.unbiased_pass_rate`)."""

    rule: StoppingRule
    round_size: int  # 1: chunks, the rule checked sample by sample; > 1: synchronous rounds


@runtime_checkable
class Sampler(Protocol):
    """What every sampler does (see the module docstring): take a step's prompts, decide draws,
    observe their rewards, say how each prompt ended and how its pools were drawn, and report and
    checkpoint itself. What only some samplers do is a capability below."""

    name: str

    def start_step(
        self,
        step: int,
        prompt_ids: Sequence[str],
        history: Mapping[str, PromptHistory],
        *,
        carried_groups: int = 0,
    ) -> None:
        """A new step; `carried_groups` kept groups from earlier steps already count towards
        `target_groups()` (only the dynamic filter uses it)."""
        ...

    def add_prompts(self, prompt_ids: Sequence[str], history: Mapping[str, PromptHistory]) -> None:
        """More prompts for this step (refills, hinted conditions); an empty list means the
        prompt source has none to give. Samplers that allocate over the whole batch refuse a
        non-empty one (ValueError)."""
        ...

    def needs_prompts(self) -> int:
        """Prompts the step wants from the source now (refills: the dynamic filter, a rollout
        budget); 0 otherwise."""
        ...

    def next(self) -> list[Draw]: ...

    def observe(self, prompt_id: str, rewards: Sequence[float]) -> None: ...

    def done(self) -> bool: ...

    def verdict(self, prompt_id: str) -> PromptStatus: ...

    def prompt_ids(self) -> list[str]:
        """This step's prompts, in the order they entered the step."""
        ...

    def target_groups(self) -> int | None:
        """Groups this step should train on (dynamic filter); None = every resolved prompt."""
        ...

    def sequential_law(self) -> SequentialLaw | None:
        """The stopping law of this sampler's pools, or None when a pool's size was fixed before
        its labels were seen (its mean is then already unbiased)."""
        ...

    def metrics(self) -> dict[str, float]: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None: ...


# -- capabilities: the hooks only some samplers have ----------------------------------------------
# A sampler implements the capabilities it uses and nothing else; the allocator looks each one up
# with `capability` and, for a sampler without it, uses the neutral answer named in its docstring.


@runtime_checkable
class StatisticsRequester(Protocol):
    """Asks for learner statistics before it can draw more (GVM, after its pilot). Without it:
    no request is ever made."""

    def statistics_wanted(self) -> list[str]:
        """Prompts whose accepted samples' gradient norms the sampler needs before it can draw
        more; [] otherwise. The allocator turns this into a `StatisticsRequest` the driver
        routes to the learners."""
        ...

    def observe_statistics(self, grad_norms: Mapping[str, float]) -> None:
        """The answer to `statistics_wanted`: each prompt's mean gradient norm over its accepted
        samples (0 when it has none)."""
        ...


@runtime_checkable
class PilotDrawer(Protocol):
    """Draws a pilot to estimate before it allocates (Ada-Est, GVM). Without it: no pilot, every
    sample of a pool is trained on."""

    def pilot_samples(self, prompt_id: str) -> int:
        """Samples at the start of the prompt's pool drawn only to estimate (not trained on:
        the trained samples' count was then fixed before their labels were seen)."""
        ...


@runtime_checkable
class PassRateEstimator(Protocol):
    """Allocates by a pass-rate estimate (Ada-Est, GVM, knapsack). Without it: None."""

    def pass_rate_estimate(self, prompt_id: str) -> float | None:
        """The pass-rate estimate the sampler allocated this prompt's samples by (None: none),
        for advantages that weight by it and for the estimate-error metric."""
        ...


@runtime_checkable
class HintHost(Protocol):
    """Takes hinted conditions in and gives collapsed prompts up (uniform, streaming sequential):
    what the hint stage needs. Samplers that allocate over the whole batch have none, and the
    allocator refuses a hint stage with them."""

    def prompt_allowance(self) -> int:
        """The most one prompt may draw in a step (its cap)."""
        ...

    def fund(self, prompt_ids: Sequence[str]) -> None:
        """Grow the step budget by the most `prompt_ids` may draw (their caps), before they are
        added: prompts paid from another budget (hinted conditions, from the hint stage's) take
        no samples from the step's other prompts."""
        ...

    def abandon(self, prompt_id: str) -> None:
        """Stop a prompt whose last draw returned (the allocator declared it collapsed): draws
        queued for it are cancelled and refunded to the step budget, and it ends ABANDONED
        (no group)."""
        ...


@runtime_checkable
class InclusionWeigher(Protocol):
    """Chooses prompts for rollouts with a probability (curation skips, knapsack exploration).
    Without it: every prompt was chosen with probability 1 and its advantages weigh 1."""

    def inclusion_probability(self, prompt_id: str) -> float:
        """The probability π with which this step's prompt was chosen for rollouts, given its
        history and the step's other candidates (for a SKIPPED prompt, the probability it had)."""
        ...

    def advantage_weight(self, prompt_id: str) -> float:
        """The factor on the prompt's group advantages: 1/π when skips are corrected by inverse
        inclusion probabilities (the declared objective kept), else 1."""
        ...


@runtime_checkable
class PoolStatisticsObserver(Protocol):
    """Reads a pool reward stage's statistics (the DRO variance filter; adarl/allocator/
    pool_reward.py). Without it: the statistics are not handed on."""

    def observe_pool_statistics(self, statistics: Mapping[str, Mapping[str, float]]) -> None:
        """Every rescored pool's statistics of this step, keyed by prompt id, in one call after
        the pool stage and before the step's verdicts are read."""
        ...


Capability = TypeVar("Capability")


def capability(sampler: Sampler, kind: type[Capability]) -> Capability | None:
    """`sampler` as a `kind` when it implements that capability, else the sampler it wraps when
    that one does (a wrapper, `inner`, leaves to its inner sampler the hooks it does not define
    itself), else None."""
    layer: object = sampler
    while not isinstance(layer, kind):
        layer = getattr(layer, "inner", None)
        if layer is None:
            return None
    return layer


@dataclass(frozen=True)
class SamplerHooks:
    """A sampler's capabilities, looked up once (`capability`), and the neutral answer of each
    for a sampler without it: what the allocator asks of a step's sampler beyond the protocol."""

    statistics: StatisticsRequester | None
    pilots: PilotDrawer | None
    estimates: PassRateEstimator | None
    hints: HintHost | None
    inclusion: InclusionWeigher | None
    pool_statistics: PoolStatisticsObserver | None

    @staticmethod
    def of(sampler: Sampler) -> SamplerHooks:
        return SamplerHooks(
            statistics=capability(sampler, StatisticsRequester),
            pilots=capability(sampler, PilotDrawer),
            estimates=capability(sampler, PassRateEstimator),
            hints=capability(sampler, HintHost),
            inclusion=capability(sampler, InclusionWeigher),
            pool_statistics=capability(sampler, PoolStatisticsObserver),
        )

    def statistics_wanted(self) -> list[str]:
        return [] if self.statistics is None else self.statistics.statistics_wanted()

    def pilot_samples(self, prompt_id: str) -> int:
        return 0 if self.pilots is None else self.pilots.pilot_samples(prompt_id)

    def pass_rate_estimate(self, prompt_id: str) -> float | None:
        return None if self.estimates is None else self.estimates.pass_rate_estimate(prompt_id)

    def inclusion_probability(self, prompt_id: str) -> float:
        return 1.0 if self.inclusion is None else self.inclusion.inclusion_probability(prompt_id)

    def advantage_weight(self, prompt_id: str) -> float:
        return 1.0 if self.inclusion is None else self.inclusion.advantage_weight(prompt_id)


class StepBudget:
    """Samples the current step may still dispatch. Counted at dispatch, so never exceeded.

    `cap=None` means no global limit (per-prompt caps still apply).
    """

    def __init__(self, cap: int | None) -> None:
        if cap is not None and cap < 0:
            raise ValueError(f"step budget cap must be >= 0 or None, got {cap}")
        self.cap = cap
        self.used = 0

    @property
    def left(self) -> int | None:
        return None if self.cap is None else self.cap - self.used

    def grant(self, wanted: int) -> int:
        """Reserve up to `wanted` samples; returns how many were granted (maybe 0)."""
        granted = wanted if self.cap is None else max(0, min(wanted, self.cap - self.used))
        self.used += granted
        return granted

    @property
    def exhausted(self) -> bool:
        return self.cap is not None and self.used >= self.cap

    def extend(self, samples: int) -> None:
        """Raise the cap by `samples` paid from elsewhere (a hinted condition's allowance); no
        effect without a cap."""
        if self.cap is not None:
            self.cap += samples

    def state_dict(self) -> dict[str, Any]:
        return {"cap": self.cap, "used": self.used}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.cap = state["cap"]
        self.used = int(state["used"])


def is_positive(reward: float, threshold: float) -> bool:
    """The reference code's rule: a sample is positive iff reward > threshold (strict)."""
    return reward > threshold


def derive_seed(*parts: int | str) -> int:
    """A stable 63-bit seed from parts (no global RNG state: resumes reproduce it exactly)."""
    digest = hashlib.blake2b("/".join(str(p) for p in parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


def check_new_prompt_ids(prompt_ids: Sequence[str], known: Mapping[str, Any], *, what: str) -> None:
    """Raise if `prompt_ids` repeats itself or a prompt already in the step."""
    seen: set[str] = set()
    for pid in prompt_ids:
        if pid in seen or pid in known:
            raise ValueError(
                f"{what}: prompt id {pid!r} appears twice in one step; prompt ids must be unique "
                "within a step (deduplicate the dataset or lower prompts_per_step below its size)"
            )
        seen.add(pid)
