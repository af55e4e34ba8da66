"""The one algorithm-blind policy loss the learner runs, whatever the algorithm, and the protocol
of the loss terms added to it.

Everything algorithmic (advantages, selection corrections, hint masks, downsampling) is decided
before the learner and arrives as a per-token weight `A_t` and a response mask `m_t`
(`adarl.types.TrainBatch`). This module turns them into a scalar loss:

    L = Agg_t[ w_t · ℓ^clip_t ]  +  Σ_terms  L_term

* ℓ^clip_t — PPO's clipped surrogate on the token importance ratio ρ_t = π_θ(y_t)/π_old(y_t)
  (Schulman et al. 2017, arXiv:1707.06347), with separate low/high clip ranges ("clip-higher",
  DAPO, arXiv:2503.14476) and an optional dual clip for negative advantages (Ye et al. 2020,
  arXiv:1912.09729):

      ℓ_t = max(-A_t ρ_t, -A_t clip(ρ_t, 1-ε_low, 1+ε_high))
      ℓ_t ← min(ℓ_t, -A_t c)   where A_t < 0     (dual clip, c > 1)

* π_old — what the ratio is taken against. Without `proximal_logprobs` it is the behaviour
  policy μ: the log-probs the rollout engine reported when sampling. The ratio then carries both
  staleness and the engine/learner numerical mismatch, and the clip bounds both. With
  `proximal_logprobs` (the learner's own log-probs under the weights the update starts from) it
  is that proximal policy, and the engine/learner mismatch is corrected separately by a
  truncated importance weight (TIS; Yao et al. 2025, "Your efficient RL framework secretly
  brings you off-policy RL training"; the decoupled objective of Hilton et al. 2021,
  arXiv:2110.00641):

      w_t = min(π_old(y_t)/μ(y_t), C)   (no gradient)      w_t = 1 when TIS is off

* the terms — small components (`LossTerm`, in adarl/algo/loss_terms.py: the KL anchor, the
  entropy term, SimKO, DPH-RL's rehearsal term), each declaring what it needs from the batch
  (`TermNeeds`). A term either reshapes the clipped surrogate's ratio and advantages before the
  clip (`shape`: SimKO) or adds a loss of its own (`add`: the KL anchor, the entropy term, the
  rehearsal term), or both; terms run in the order given, and each says, in the start-up
  declaration, what it adds to the objective or that it declares none (`declare`). The learner
  builds them once from config (adarl/learner/loss_terms.py, the registry).

Every policy here (π_θ, μ, π_old, π_ref) is a distribution at the rollouts' sampling
temperature T, softmax(logits / T): the engines report log μ at T and the learner computes
log π_θ, log π_ref and H at the same T (adarl/rollout/common.py, adarl/learner/logprobs.py).

Rows a term trains alone (`LossInputs.term_rows`: DPH-RL's rehearsal rows, stored samples that
are not π_θ's now) take no part in the clipped surrogate nor in any other term; they have their
own whole-batch counts, which that term normalises by.

Aggregation (`Agg`) over the tokens where m_t = 1 (term rows excluded), with N_tok the number
of response tokens and N_seq the number of sequences **in the whole training batch** (all
data-parallel ranks, all micro-batches), and L_b the response length of sequence b:

    token_mean:     Σ_b Σ_t m x / N_tok                 (DAPO; the Reinforce-Ada script)
    sequence_mean:  Σ_b (Σ_t m x / L_b) / N_seq         (GRPO, arXiv:2402.03300)
    sequence_sum:   Σ_b Σ_t m x / N_seq                 (Dr. GRPO without the constant, 2503.20783)

Each is a sum over sequences of a per-sequence quantity divided by a global count, so a shard of
the batch (a rank's share, one micro-batch) contributes exactly its part: summing the returned
losses and metrics over every shard gives the full-batch value, however the batch was split.
Normalising by a local count would not have this property (it is what makes some frameworks'
losses depend on the micro-batch size).

Pure torch: no config objects, no learner state. Shapes: B sequences, T tokens, K top tokens.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

import torch

Aggregation = Literal["token_mean", "sequence_mean", "sequence_sum"]
KLEstimator = Literal["k1", "k2", "k3"]
AGGREGATIONS: tuple[str, ...] = ("token_mean", "sequence_mean", "sequence_sum")
KL_ESTIMATORS: tuple[str, ...] = ("k1", "k2", "k3")

# ρ = exp(log π_θ - log π_old) is computed from a log-ratio clamped to ±20 (ρ ∈ [2e-9, 5e8]):
# a ratio that extreme is clipped anyway, and the clamp keeps a pathological token from turning
# the whole loss into inf/NaN. Same bound as verl's core_algos.
MAX_ABS_LOG_RATIO = 20.0


@dataclass(frozen=True)
class PolicyLossOutput:
    """The loss of one shard and every term's value, each this shard's additive share.

    `loss` is a scalar with gradient. `metrics` are floats named `train/...`; summing them over
    all shards (micro-batches and ranks) gives the full-batch value, like the loss itself.
    """

    loss: torch.Tensor
    metrics: dict[str, float]


@dataclass(frozen=True)
class TermRows:
    """The rows of a shard that one term trains alone, and the whole batch's counts of them."""

    rows: torch.Tensor  # [B] bool
    global_num_tokens: float  # their response tokens, all ranks and micro-batches
    global_num_sequences: float  # those of them with a response token


@dataclass(frozen=True)
class LossInputs:
    """One shard of the batch as the loss reads it, on the learner's device (prime-rl's typed
    loss inputs). The optional fields are what a term may need (`TermNeeds`)."""

    logprobs: torch.Tensor  # [B, T] log π_θ(y_t | y_<t), with gradient
    behaviour_logprobs: torch.Tensor  # [B, T] log μ(y_t | y_<t) reported by the rollout engine
    advantages: torch.Tensor  # [B, T] per-token weight A_t
    response_mask: torch.Tensor  # [B, T] bool, True on response tokens (term rows' included)
    global_num_tokens: float  # the policy rows' response tokens in the whole batch
    global_num_sequences: float  # the policy rows in the whole batch
    sequence_weights: torch.Tensor | None = None  # [B] what each row counts in the normalisers
    proximal_logprobs: torch.Tensor | None = None  # [B, T] log π_old, no gradient
    ref_logprobs: torch.Tensor | None = None  # [B, T] log π_ref, no gradient
    entropy: torch.Tensor | None = None  # [B, T] H(π_θ(· | y_<t)), with gradient if used
    top_logprobs: torch.Tensor | None = None  # [B, T, K] log π_θ of the K likeliest tokens
    is_top1: torch.Tensor | None = None  # [B, T] bool: y_t is the likeliest token
    # the rows each term that owns rows trains alone, by the term's name
    term_rows: Mapping[str, TermRows] = field(default_factory=dict)


@dataclass(frozen=True)
class TermNeeds:
    """What a term needs from the batch and the learner's forward pass."""

    reference: bool = False  # log π_ref: the learner loads a frozen reference model
    entropy: bool = False  # the per-token entropy (the learner always computes it)
    entropy_grad: bool = False  # ... with gradient
    top_k: int = 0  # the K likeliest tokens' log-probs and the top-1 flags (K > 0)
    owns_rows: bool = False  # the batch may hold rows it trains alone (`TermRows`, its name)


@dataclass(frozen=True)
class PolicyTokens:
    """The tokens of a shard's policy rows (term rows excluded), and how a term aggregates over
    them: `agg` is the batch aggregate `Agg_t` (each row counting its sequence weight), and
    `token_mean` a logged token mean (module docstring)."""

    mask: torch.Tensor  # [B, T] bool
    row_weight: torch.Tensor  # [B, 1] each row's sequence weight (1 by default)
    aggregation: Aggregation
    global_num_tokens: float  # > 0 (1 when the batch holds term rows only)
    global_num_sequences: float  # > 0

    def agg(self, values: torch.Tensor, *, weighted: bool = True) -> torch.Tensor:  # []
        """Agg_t[x] over the policy tokens; each row weighted by its sequence weight unless
        `weighted` is False (the clipped term, whose advantages the group builder scaled)."""
        return aggregate(
            values * self.row_weight if weighted else values,
            self.mask,
            aggregation=self.aggregation,
            global_num_tokens=self.global_num_tokens,
            global_num_sequences=self.global_num_sequences,
        )

    def token_mean(self, values: torch.Tensor) -> float:
        """This shard's share of the batch's weighted token mean of `values` (a metric)."""
        weighted = torch.where(self.mask, values * self.row_weight, torch.zeros_like(values))
        return float(weighted.sum().detach()) / self.global_num_tokens


@dataclass(frozen=True)
class Surrogate:
    """The clipped term's inputs per token, as the terms may reshape them before the clip."""

    ratio: torch.Tensor  # [B, T] ρ_t, with gradient
    advantages: torch.Tensor  # [B, T] A_t (0 outside the policy tokens)


@dataclass(frozen=True)
class TermValue:
    """A term's addition to the loss (its coefficient and sign applied) and its metrics."""

    loss: torch.Tensor  # [] with gradient
    metrics: dict[str, float]


class LossTerm(Protocol):
    """One term of the loss (module docstring): a small frozen record of its parameters."""

    name: str  # its registry name; the key of the rows it owns (`LossInputs.term_rows`)
    needs: TermNeeds

    def shape(
        self, surrogate: Surrogate, inputs: LossInputs, tokens: PolicyTokens
    ) -> tuple[Surrogate, dict[str, float]]:
        """The clipped term's ratio and advantages after this term, and its metrics."""
        ...

    def add(self, inputs: LossInputs, tokens: PolicyTokens) -> TermValue | None:
        """What this term adds to the loss (None: nothing, e.g. no row of its own here)."""
        ...

    def declare(self) -> str | None:
        """Its line of the start-up declaration: what it adds to the declared objective, or
        that it declares none; None for a term that changes nothing (logged only)."""
        ...


def aggregate(
    values: torch.Tensor,  # [B, T] per-token values
    response_mask: torch.Tensor,  # [B, T] bool
    *,
    aggregation: Aggregation,
    global_num_tokens: float,
    global_num_sequences: float,
) -> torch.Tensor:  # [] this shard's share of the batch aggregate
    """Agg_t[x] as in the module docstring, normalised by whole-batch counts.

    A sequence with no response token contributes 0 to every aggregation (it still counts in
    `global_num_sequences` if the caller counted it there).
    """
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"aggregation must be one of {list(AGGREGATIONS)}, got {aggregation!r}")
    mask = response_mask.to(values.dtype)
    masked = torch.where(response_mask, values, torch.zeros_like(values))
    if aggregation == "token_mean":
        return masked.sum() / global_num_tokens
    per_sequence = masked.sum(dim=1)  # [B]
    if aggregation == "sequence_mean":
        per_sequence = per_sequence / mask.sum(dim=1).clamp(min=1.0)
    return per_sequence.sum() / global_num_sequences


def kl_estimate(
    logprobs: torch.Tensor,  # [B, T] log π_θ
    ref_logprobs: torch.Tensor,  # [B, T] log π_ref
    *,
    estimator: KLEstimator,
) -> torch.Tensor:  # [B, T]
    """Per-token k1/k2/k3 estimate of KL(π_θ ‖ π_ref) on tokens sampled from π_θ, with
    δ_t = log π_θ(y_t) - log π_ref(y_t) (Schulman 2020, "Approximating KL divergence",
    http://joschu.net/blog/kl-approx.html):

        k1 = δ        k2 = δ²/2        k3 = e^{-δ} - 1 + δ   (the GRPO loss term, arXiv:2402.03300)

    k1 is unbiased but can be negative and its gradient has zero mean; k2 = δ²/2 is biased but
    low-variance; k3 is unbiased and ≥ 0.
    """
    delta = (logprobs - ref_logprobs).clamp(-MAX_ABS_LOG_RATIO, MAX_ABS_LOG_RATIO)
    if estimator == "k1":
        return delta
    if estimator == "k2":
        return 0.5 * delta.square()
    if estimator == "k3":
        return torch.exp(-delta) - 1.0 + delta
    raise ValueError(f"kl_estimator must be one of {list(KL_ESTIMATORS)}, got {estimator!r}")


def policy_loss(
    inputs: LossInputs,
    *,
    aggregation: Aggregation = "token_mean",
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    dual_clip: float | None = None,
    tis_cap: float | None = None,
    terms: Sequence[LossTerm] = (),
) -> PolicyLossOutput:
    """L = Agg[w · ℓ^clip] + Σ_terms L_term; see the module docstring.

    Values outside `response_mask` are ignored (they may be anything finite or not). Rows in
    `inputs.term_rows` count only in their term (normalised by its counts);
    `global_num_tokens` and `global_num_sequences` count the other rows, and may be 0 when the
    batch holds term rows only. `tis_cap` needs `proximal_logprobs`.

    Metrics (all additive shares, see `PolicyLossOutput`): train/loss, train/policy_loss; token
    means of: train/clip_fraction (tokens whose clipped branch is active: zero gradient),
    train/dual_clip_fraction, train/ratio_mean (ρ), train/mismatch_kl (k3 estimate of
    KL(μ ‖ π_θ) per token: how far the engine's sampling distribution is from the learner's,
    staleness included), train/is_weight_mean and train/is_truncated_fraction (with `tis_cap`);
    and each term's own.
    """
    _check_inputs(inputs, terms)
    _check_clip(clip_low=clip_low, clip_high=clip_high, dual_clip=dual_clip, tis_cap=tis_cap)
    if tis_cap is not None and inputs.proximal_logprobs is None:
        raise ValueError(
            "tis_cap needs proximal_logprobs: without them the ratio is already taken against "
            "the behaviour policy and there is no separate engine/learner weight to truncate"
        )
    logprobs = inputs.logprobs
    mask = inputs.response_mask.bool()
    for owned in inputs.term_rows.values():
        mask = mask & ~owned.rows.to(mask.device, torch.bool).unsqueeze(1)
    # A row counts `sequence_weights[b]` in the normalisers (a whole pool of N trains as n
    # sequences' worth): every per-token term but the policy's (whose advantages the group
    # builder already scaled by it) is weighted the same, so a KL coefficient, an entropy bonus
    # or a logged token mean means per token what it means with kept groups.
    weights = inputs.sequence_weights
    tokens = PolicyTokens(
        mask=mask,
        row_weight=(
            torch.ones_like(logprobs[:, :1])
            if weights is None
            else weights.to(logprobs.device, logprobs.dtype).unsqueeze(1)
        ),
        aggregation=aggregation,
        # A batch of term rows only has no policy token: its sums of zeros are divided by 1
        # instead of 0 (checked in _check_inputs: some token is in the batch).
        global_num_tokens=inputs.global_num_tokens if inputs.global_num_tokens > 0 else 1.0,
        global_num_sequences=(
            inputs.global_num_sequences if inputs.global_num_sequences > 0 else 1.0
        ),
    )
    zeros = torch.zeros_like(logprobs)
    behaviour = inputs.behaviour_logprobs
    old_logprobs = behaviour if inputs.proximal_logprobs is None else inputs.proximal_logprobs
    log_ratio = torch.where(mask, logprobs - old_logprobs.to(logprobs.dtype), zeros)
    surrogate = Surrogate(
        ratio=torch.exp(log_ratio.clamp(-MAX_ABS_LOG_RATIO, MAX_ABS_LOG_RATIO)),
        advantages=torch.where(mask, inputs.advantages.to(logprobs.dtype), zeros),
    )
    metrics: dict[str, float] = {}
    for term in terms:
        surrogate, shaped = term.shape(surrogate, inputs, tokens)
        metrics.update(shaped)
    advantages, ratio = surrogate.advantages, surrogate.ratio
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    token_loss = torch.maximum(unclipped, clipped)
    clip_active = (clipped > unclipped).to(logprobs.dtype)
    dual_active = zeros
    if dual_clip is not None:
        dual_bound = -advantages * dual_clip
        dual_active = ((advantages < 0) & (token_loss > dual_bound)).to(logprobs.dtype)
        token_loss = torch.where(advantages < 0, torch.minimum(token_loss, dual_bound), token_loss)
    if tis_cap is not None:
        assert inputs.proximal_logprobs is not None  # checked above
        mismatch_log_ratio = torch.where(
            mask, inputs.proximal_logprobs.to(logprobs.dtype) - behaviour, zeros
        )
        raw_weight = torch.exp(mismatch_log_ratio.clamp(-MAX_ABS_LOG_RATIO, MAX_ABS_LOG_RATIO))
        is_weight = raw_weight.clamp(max=tis_cap).detach()
        token_loss = is_weight * token_loss
        metrics["train/is_weight_mean"] = tokens.token_mean(is_weight)
        metrics["train/is_truncated_fraction"] = tokens.token_mean((raw_weight > tis_cap).float())

    policy_term = tokens.agg(token_loss, weighted=False)
    loss = policy_term
    metrics["train/policy_loss"] = float(policy_term.detach())
    metrics["train/clip_fraction"] = tokens.token_mean(clip_active)
    if dual_clip is not None:
        metrics["train/dual_clip_fraction"] = tokens.token_mean(dual_active)
    metrics["train/ratio_mean"] = tokens.token_mean(ratio)
    # KL(μ ‖ π_θ) from samples of μ: k3 with δ = log μ - log π_θ.
    metrics["train/mismatch_kl"] = tokens.token_mean(
        kl_estimate(behaviour.to(logprobs.dtype), logprobs.detach(), estimator="k3")
    )
    for term in terms:
        added = term.add(inputs, tokens)
        if added is not None:
            loss = loss + added.loss
            metrics.update(added.metrics)
    metrics["train/loss"] = float(loss.detach())
    return PolicyLossOutput(loss=loss, metrics=metrics)


def _check_clip(
    *, clip_low: float, clip_high: float, dual_clip: float | None, tis_cap: float | None
) -> None:
    if not 0.0 <= clip_low < 1.0 or clip_high < 0.0:
        raise ValueError(
            f"need 0 <= clip_low < 1 and clip_high >= 0, got clip_low={clip_low}, "
            f"clip_high={clip_high}"
        )
    if dual_clip is not None and dual_clip <= 1.0:
        raise ValueError(f"dual_clip must be > 1 (typically 3) or None, got {dual_clip}")
    if tis_cap is not None and tis_cap <= 0:
        raise ValueError(f"tis_cap must be > 0 (typically 2), got {tis_cap}")


def _check_inputs(inputs: LossInputs, terms: Sequence[LossTerm]) -> None:
    """Shapes, counts, and every term's needs met by `inputs`."""
    shape = inputs.logprobs.shape
    if inputs.logprobs.dim() != 2:
        raise ValueError(f"logprobs must be [B, T], got shape {tuple(shape)}")
    per_token = {
        "behaviour_logprobs": inputs.behaviour_logprobs,
        "advantages": inputs.advantages,
        "response_mask": inputs.response_mask,
        "proximal_logprobs": inputs.proximal_logprobs,
        "ref_logprobs": inputs.ref_logprobs,
        "entropy": inputs.entropy,
        "is_top1": inputs.is_top1,
    }
    for name, tensor in per_token.items():
        if tensor is not None and tensor.shape != shape:
            raise ValueError(
                f"{name} has shape {tuple(tensor.shape)} but logprobs has {tuple(shape)}; "
                "every per-token input must be [B, T] on the same positions"
            )
    top = inputs.top_logprobs
    if top is not None and (top.dim() != 3 or top.shape[:2] != shape):
        raise ValueError(
            f"top_logprobs {tuple(top.shape)} must be [B, T, K] on logprobs' {tuple(shape)} "
            "positions"
        )
    policy_counts = (inputs.global_num_tokens, inputs.global_num_sequences)
    if min(policy_counts) < 0:
        raise ValueError(f"the whole batch's counts must be >= 0, got {policy_counts}")
    counted = min(policy_counts) > 0
    for name, owned in inputs.term_rows.items():
        if tuple(owned.rows.shape) != (shape[0],):
            raise ValueError(
                f"the rows of term {name!r} have shape {tuple(owned.rows.shape)}; they must be "
                f"[B] = ({shape[0]},), one flag per row"
            )
        if min(owned.global_num_tokens, owned.global_num_sequences) < 0:
            raise ValueError(f"term {name!r}: its rows' whole-batch counts must be >= 0")
        counted = counted or min(owned.global_num_tokens, owned.global_num_sequences) > 0
        rows = owned.rows.to(inputs.response_mask.device, torch.bool)
        if bool((inputs.response_mask.bool() & rows[:, None]).any()):
            if owned.global_num_tokens <= 0:
                raise ValueError(
                    f"the shard has tokens of term {name!r}'s rows but their whole-batch token "
                    "count is 0: pass the whole batch's counts of them (BatchCounts.term_rows)"
                )
            if not any(term.name == name and term.needs.owns_rows for term in terms):
                raise ValueError(
                    f"the shard holds rows of term {name!r} but no such term is given: pass "
                    "it in `terms`, or leave its rows out"
                )
    if not counted:
        raise ValueError(
            f"global_num_tokens ({inputs.global_num_tokens}) and global_num_sequences "
            f"({inputs.global_num_sequences}), or some term's rows' counts, must be > 0: pass "
            "the whole batch's counts, which include at least one response token"
        )
    for term in terms:
        needs = term.needs
        missing = [
            name
            for name, needed, value in (
                ("ref_logprobs (a frozen reference model)", needs.reference, inputs.ref_logprobs),
                ("the per-token entropy", needs.entropy, inputs.entropy),
                ("the top-K log-probs", needs.top_k > 0, inputs.top_logprobs),
                ("the top-1 flags", needs.top_k > 0, inputs.is_top1),
            )
            if needed and value is None
        ]
        if missing:
            raise ValueError(f"the {term.name} term needs {' and '.join(missing)}")
