"""The terms of the policy loss (`adarl.algo.loss.LossTerm`): one small record each, with its
equation, what it needs from the batch, and its line of the start-up declaration.

    KLAnchor    +β·Agg_t[k(π_θ, π_ref)_t]
    Entropy     -η·Agg_t[H(π_θ)_t]
    SimKO       reshapes the clipped term's ratio and advantages on high-entropy tokens
    Rehearsal   +λ·Agg^R_t[k3(log π_ref - log π_θ)_t] on the rows it trains alone

`Agg` is the batch aggregate over the policy's tokens (`PolicyTokens.agg`, each row weighted by
its sequence weight), `Agg^R` the same aggregation over a term's own rows with their own counts.
The learner builds the terms from config once (adarl/learner/loss_terms.py, the registry);
each term's parameters are flat values here, checked when it is built.

Pure torch: no config objects.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from adarl.algo.loss import (
    KL_ESTIMATORS,
    KLEstimator,
    LossInputs,
    PolicyTokens,
    Surrogate,
    TermNeeds,
    TermValue,
    aggregate,
    kl_estimate,
)

REHEARSAL = "rehearsal"  # the rehearsal term's name: the key of the rows it trains


def _unchanged(surrogate: Surrogate) -> tuple[Surrogate, dict[str, float]]:
    return surrogate, {}


@dataclass(frozen=True)
class KLAnchor:
    """β·Agg_t[k(π_θ, π_ref)_t], k the per-token `kl_estimate` (k1, k2 or k3 of δ = log π_θ -
    log π_ref on the policy's samples): the GRPO loss's KL term (arXiv:2402.03300). Metrics:
    train/kl (Agg[k]) and train/kl_loss (β times it). `reference` and `reset_every_steps`
    only say what π_ref is (the learner loads it; ProRL's reset moves it, arXiv 2505.24864)."""

    coef: float  # β > 0
    estimator: KLEstimator = "k3"
    reference: str = "the initial policy"
    reset_every_steps: int | None = None
    name: str = "kl_anchor"

    def __post_init__(self) -> None:
        if not self.coef > 0:
            raise ValueError(f"the KL anchor's coefficient must be > 0, got {self.coef}")
        if self.estimator not in KL_ESTIMATORS:
            raise ValueError(f"kl_estimator must be one of {list(KL_ESTIMATORS)}")

    @property
    def needs(self) -> TermNeeds:
        return TermNeeds(reference=True)

    def shape(
        self, surrogate: Surrogate, inputs: LossInputs, tokens: PolicyTokens
    ) -> tuple[Surrogate, dict[str, float]]:
        return _unchanged(surrogate)

    def add(self, inputs: LossInputs, tokens: PolicyTokens) -> TermValue:
        assert inputs.ref_logprobs is not None  # its needs, checked by policy_loss
        logprobs = inputs.logprobs
        kl = tokens.agg(
            kl_estimate(logprobs, inputs.ref_logprobs.to(logprobs.dtype), estimator=self.estimator)
        )
        value = float(kl.detach())
        return TermValue(self.coef * kl, {"train/kl": value, "train/kl_loss": self.coef * value})

    def declare(self) -> str:
        reset = self.reset_every_steps
        return (
            f"KL anchor: minus {self.coef:g}·KL(π_θ ‖ π_ref) ({self.estimator} per token on "
            f"the policy's samples), π_ref = {self.reference}"
            + (
                f", reset to the current policy every {reset} training steps (ProRL)"
                if reset
                else ""
            )
        )


@dataclass(frozen=True)
class Entropy:
    """-η·Agg_t[H(π_θ)_t], H the per-token entropy of π_θ's next-token distribution (computed by
    the learner from logits, with gradient when η ≠ 0): an entropy bonus for η > 0. With η = 0
    the entropy is logged only. Metrics: train/entropy (Agg[H]), train/entropy_loss (-η times
    it)."""

    coef: float = 0.0  # η
    name: str = "entropy"

    @property
    def needs(self) -> TermNeeds:
        return TermNeeds(entropy=True, entropy_grad=self.coef != 0.0)

    def shape(
        self, surrogate: Surrogate, inputs: LossInputs, tokens: PolicyTokens
    ) -> tuple[Surrogate, dict[str, float]]:
        return _unchanged(surrogate)

    def add(self, inputs: LossInputs, tokens: PolicyTokens) -> TermValue:
        assert inputs.entropy is not None  # its needs
        mean_entropy = tokens.agg(inputs.entropy)
        value = float(mean_entropy.detach())
        return TermValue(
            -self.coef * mean_entropy,
            {"train/entropy": value, "train/entropy_loss": -self.coef * value},
        )

    def declare(self) -> str | None:
        if self.coef == 0:
            return None  # logged only: nothing added
        return (
            f"entropy term: plus {self.coef:g}·H(π_θ) per token (an entropy bonus when > 0): "
            "declares no f(p) objective"
        )


@dataclass(frozen=True)
class SimKO:
    """SimKO (Peng et al. 2025, arXiv 2510.14807; CLR-Lab/SimKO `compute_policy_loss_simko`),
    α = `alpha` > 0: on a response's high-entropy tokens (entropy above the q-quantile of its own
    response tokens' entropies, `high_entropy_tokens`), a positive-advantage token's ratio
    becomes

        ρ̃_t = (1 - α)·ρ_t + (α/K)·Σ_{i ≤ K} sg[ρ_t]·π_θ(v_i)/sg[π_θ(v_i)]     (`simko_ratio`)

    v_1..v_K the K most likely tokens at t: ρ̃_t = ρ_t in value (so the clip acts as before) while
    the share α of its gradient goes to raising the top-K candidates (sg = stop-gradient); and a
    negative-advantage token whose sampled token is the most likely one gets its advantage × c
    (`negative_scale`, 1.1): the wrong mode is pushed down harder. It declares no f(p)
    objective: it moves probability among tokens of the same responses. Metric:
    train/simko_token_fraction (tokens it changes)."""

    alpha: float  # α in (0, 1)
    top_k: int = 3  # K
    entropy_quantile: float = 0.8  # q
    negative_scale: float = 1.1  # c
    name: str = "simko"

    def __post_init__(self) -> None:
        if not 0.0 < self.alpha < 1.0:
            raise ValueError(f"simko_alpha must be in (0, 1) (0 = off), got {self.alpha}")
        if self.top_k < 1 or not 0.0 < self.entropy_quantile < 1.0:
            raise ValueError(
                f"SimKO needs top_k >= 1 and an entropy quantile in (0, 1), got {self.top_k}, "
                f"{self.entropy_quantile}"
            )

    @property
    def needs(self) -> TermNeeds:
        return TermNeeds(entropy=True, top_k=self.top_k)

    def shape(
        self, surrogate: Surrogate, inputs: LossInputs, tokens: PolicyTokens
    ) -> tuple[Surrogate, dict[str, float]]:
        assert inputs.entropy is not None and inputs.top_logprobs is not None  # its needs
        assert inputs.is_top1 is not None
        advantages = surrogate.advantages
        high = high_entropy_tokens(
            inputs.entropy.detach(), tokens.mask, quantile=self.entropy_quantile
        )
        positive = high & (advantages > 0)
        negative_mode = high & (advantages < 0) & inputs.is_top1
        changed = (positive | negative_mode).to(inputs.logprobs.dtype)
        return Surrogate(
            ratio=simko_ratio(
                surrogate.ratio, inputs.top_logprobs, alpha=self.alpha, where=positive
            ),
            advantages=torch.where(negative_mode, advantages * self.negative_scale, advantages),
        ), {"train/simko_token_fraction": tokens.token_mean(changed)}

    def add(self, inputs: LossInputs, tokens: PolicyTokens) -> None:
        return None

    def declare(self) -> str:
        return (
            f"SimKO (α = {self.alpha:g}, top-{self.top_k}, entropy quantile "
            f"{self.entropy_quantile:g}, negative scale {self.negative_scale:g}): declares no "
            "f(p) objective: moves probability to the top-K candidates of high-entropy tokens "
            "of positive responses"
        )


def high_entropy_tokens(
    entropy: torch.Tensor,  # [B, T] per-token entropy
    response_mask: torch.Tensor,  # [B, T] bool
    *,
    quantile: float,
) -> torch.Tensor:  # [B, T] bool
    """Tokens whose entropy is above the `quantile` of their own response's token entropies
    (linear interpolation, as `torch.quantile`; SimKO's per-row 0.8-quantile)."""
    values = entropy.float()
    masked = torch.where(response_mask, values, torch.full_like(values, torch.nan))
    threshold = torch.nanquantile(masked, quantile, dim=1, keepdim=True)  # [B, 1], NaN if empty
    return response_mask & (values > threshold)


def simko_ratio(
    ratio: torch.Tensor,  # [B, T] ρ_t = π_θ(y_t)/π_old(y_t), with gradient
    top_logprobs: torch.Tensor,  # [B, T, K] log π_θ of the K likeliest tokens, with gradient
    *,
    alpha: float,
    where: torch.Tensor,  # [B, T] bool: the tokens to mix (positive, high-entropy)
) -> torch.Tensor:  # [B, T]
    """ρ̃_t = (1 - α)ρ_t + (α/K)Σ_i sg[ρ_t]·π_θ(v_i)/sg[π_θ(v_i)] where `where`, else ρ_t (`SimKO`).
    Equal to ρ_t in value; its gradient is (1 - α)∇ρ_t + α·ρ_t·mean_i ∇log π_θ(v_i). (The
    reference code's ratio of old top-K probabilities cancels in both.)"""
    candidates = ratio.detach().unsqueeze(-1) * torch.exp(top_logprobs - top_logprobs.detach())
    mixed = (1.0 - alpha) * ratio + alpha * candidates.mean(dim=-1)
    return torch.where(where, mixed, ratio)


@dataclass(frozen=True)
class Rehearsal:
    """DPH-RL's rehearsal term (arXiv 2509.07430; seamoke/DPH-RL `dp_actor.py`, sft_loss_mode
    "forward"), on the rows it trains alone (`LossInputs.term_rows["rehearsal"]`): stored
    correct samples y of prompts the policy already solved (adarl/allocator/rehearsal.py), not
    sampled from π_θ now. With u_t = π_θ(y_t)/π_ref(y_t), the per-token k3(log π_ref - log π_θ)
    = u_t - 1 - log u_t is an estimate of the forward KL(π_ref ‖ π_θ) on π_ref's samples
    (`rehearsal_forward_kl`); its gradient is (u_t - 1)·∇log π_θ(y_t): where the policy has lost
    probability of a rehearsed token (u < 1) the term raises it. λ = `coef` is the paper's η
    (0.01-0.05). Its aggregate Agg^R is `aggregate` over its rows' tokens with the whole batch's
    counts of them, so it keeps the additivity over shards. Metrics: train/rehearsal_kl and
    train/rehearsal_loss (with its rows in the whole batch). `rows_per_step`, `min_samples` and
    `reference` only say what the store feeds it (adarl/allocator/rehearsal.py)."""

    coef: float  # λ >= 0
    rows_per_step: int = 16
    min_samples: int = 8
    reference: str = "the base"
    name: str = REHEARSAL

    def __post_init__(self) -> None:
        if self.coef < 0:
            raise ValueError(f"rehearsal_coef must be >= 0 (DPH-RL's 0.01-0.05), got {self.coef}")

    @property
    def needs(self) -> TermNeeds:
        return TermNeeds(reference=True, owns_rows=True)

    def shape(
        self, surrogate: Surrogate, inputs: LossInputs, tokens: PolicyTokens
    ) -> tuple[Surrogate, dict[str, float]]:
        return _unchanged(surrogate)

    def add(self, inputs: LossInputs, tokens: PolicyTokens) -> TermValue | None:
        own = inputs.term_rows.get(self.name)
        if own is None or own.global_num_tokens <= 0:
            return None  # no rehearsal row in this mini-batch
        assert inputs.ref_logprobs is not None  # its needs
        logprobs = inputs.logprobs
        rows = own.rows.to(logprobs.device, torch.bool).unsqueeze(1)  # [B, 1]
        value = aggregate(
            rehearsal_forward_kl(logprobs, inputs.ref_logprobs.to(logprobs.dtype)),
            inputs.response_mask.bool() & rows,
            aggregation=tokens.aggregation,
            global_num_tokens=own.global_num_tokens,
            global_num_sequences=own.global_num_sequences,
        )
        kl = float(value.detach())
        return TermValue(
            self.coef * value, {"train/rehearsal_kl": kl, "train/rehearsal_loss": self.coef * kl}
        )

    def declare(self) -> str:
        return (
            f"DPH-RL rehearsal: minus {self.coef:g}·KL(π_ref ‖ π_θ) (forward, k3 on "
            f"{self.rows_per_step} stored correct samples per step of the prompts whose first "
            f"pool of ≥ {self.min_samples} samples was all correct; π_ref = {self.reference}): "
            "declares no f(p) objective; those prompts draw no rollout, so the objective above "
            "is over the other prompts"
        )


def rehearsal_forward_kl(
    logprobs: torch.Tensor,  # [B, T] log π_θ(y_t), with gradient
    ref_logprobs: torch.Tensor,  # [B, T] log π_ref(y_t), no gradient
) -> torch.Tensor:  # [B, T]
    """Per token k3(log π_ref - log π_θ) = u - 1 - log u, u = π_θ(y_t)/π_ref(y_t): DPH-RL's
    forward-KL term (arXiv 2509.07430; seamoke/DPH-RL `kl_penalty(logprob=π_ref's,
    ref_logprob=π_θ's, "low_var_kl")`), an estimate of KL(π_ref ‖ π_θ) when y ~ π_ref. It is
    `kl_estimate`'s k3 with the two policies swapped: ≥ 0, zero where u = 1, and its gradient
    (u - 1)·∇log π_θ pulls a token's probability back towards π_ref's from either side."""
    return kl_estimate(ref_logprobs, logprobs, estimator="k3")
