"""The one algorithm-blind policy loss the learner runs, whatever the algorithm.

Everything algorithmic (advantages, selection corrections, hint masks, downsampling) is decided
before the learner and arrives as a per-token weight `A_t` and a response mask `m_t`
(`adarl.types.TrainBatch`). This module turns them into a scalar loss:

    L = Agg_t[ w_t · ℓ^clip_t ]  +  β · Agg_t[ k(π_θ, π_ref)_t ]  -  η · Agg_t[ H(π_θ)_t ]
        +  λ · Agg^R_t[ k3(log π_ref - log π_θ)_t ]

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

* k — a per-token estimator of KL(π_θ ‖ π_ref) from samples of π_θ, with
  δ_t = log π_θ(y_t) - log π_ref(y_t) (Schulman 2020, "Approximating KL divergence",
  http://joschu.net/blog/kl-approx.html):

      k1 = δ        k2 = δ²/2        k3 = e^{-δ} - 1 + δ   (the GRPO loss term, arXiv:2402.03300)

* H — the per-token entropy of π_θ's next-token distribution (computed by the caller from
  logits, with gradient when η ≠ 0).

* Agg^R — DPH-RL's rehearsal term (arXiv 2509.07430; seamoke/DPH-RL
  `dp_actor.py`, sft_loss_mode "forward"), on the rows flagged `rehearsal`: stored correct
  samples y of prompts the policy already solved, not sampled from π_θ now. With
  u_t = π_θ(y_t)/π_ref(y_t), the per-token k3(log π_ref - log π_θ) = u_t - 1 - log u_t is an
  estimate of the forward KL(π_ref ‖ π_θ) on π_ref's samples (`rehearsal_kl`); its gradient is
  (u_t - 1)·∇log π_θ(y_t): where the policy has lost probability of a rehearsed token (u < 1)
  the term raises it. λ is the paper's η (0.01-0.05). The rehearsal rows take no part in the
  other terms (their advantage is 0 and they are not π_θ's samples), and the term has its own
  normalisers: Agg^R is `aggregate` over the rehearsal rows' tokens with the whole batch's
  rehearsal counts, so it keeps the additivity over shards below.

* SimKO (Peng et al. 2025, arXiv 2510.14807; CLR-Lab/SimKO `compute_policy_loss_simko`), with
  `simko_alpha` α > 0: on a response's high-entropy tokens (entropy above the q-quantile of its
  own response tokens' entropies), a positive-advantage token's ratio becomes

      ρ̃_t = (1 - α)·ρ_t + (α/K)·Σ_{i ≤ K} sg[ρ_t]·π_θ(v_i)/sg[π_θ(v_i)]     (`simko_ratio`)

  v_1..v_K the K most likely tokens at t: ρ̃_t = ρ_t in value (so the clip acts as before) while
  the share α of its gradient goes to raising the top-K candidates (sg = stop-gradient); and a
  negative-advantage token whose sampled token is the most likely one gets its advantage × c
  (`simko_negative_scale`, 1.1): the wrong mode is pushed down harder. SimKO declares no f(p)
  objective: it moves probability among tokens of the same responses.

Every policy here (π_θ, μ, π_old, π_ref) is a distribution at the rollouts' sampling
temperature T, softmax(logits / T): the engines report log μ at T and the learner computes
log π_θ, log π_ref and H at the same T (adarl/rollout/common.py, adarl/learner/logprobs.py).

Aggregation (`Agg`) over the tokens where m_t = 1 (rehearsal rows excluded), with N_tok the
number of response tokens and N_seq the number of sequences **in the whole training batch** (all
data-parallel ranks, all micro-batches; for Agg^R, the rehearsal rows' counts), and L_b the
response length of sequence b:

    token_mean:     Σ_b Σ_t m x / N_tok                 (DAPO; the Reinforce-Ada script)
    sequence_mean:  Σ_b (Σ_t m x / L_b) / N_seq         (GRPO, arXiv:2402.03300)
    sequence_sum:   Σ_b Σ_t m x / N_seq                 (Dr. GRPO without the constant, 2503.20783)

Each is a sum over sequences of a per-sequence quantity divided by a global count, so a shard of
the batch (a rank's share, one micro-batch) contributes exactly its part: summing the returned
losses and metrics over every shard gives the full-batch value, however the batch was split.
Normalising by a local count would not have this property (it is what makes some frameworks'
losses depend on the micro-batch size).

Pure torch: no config objects, no learner state. Shapes: B sequences, T tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

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
    """Per-token k1/k2/k3 estimate of KL(π_θ ‖ π_ref) on tokens sampled from π_θ (see above).

    k1 is unbiased but can be negative and its gradient has zero mean; k2 = δ²/2 is biased but
    low-variance; k3 = e^{-δ} - 1 + δ is unbiased and ≥ 0 (Schulman 2020).
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
    *,
    logprobs: torch.Tensor,  # [B, T] log π_θ(y_t | y_<t), with gradient
    behaviour_logprobs: torch.Tensor,  # [B, T] log μ(y_t | y_<t) reported by the rollout engine
    advantages: torch.Tensor,  # [B, T] per-token weight A_t
    response_mask: torch.Tensor,  # [B, T] bool, True on trained tokens
    global_num_tokens: float,  # response tokens in the whole batch (all ranks, micro-batches)
    global_num_sequences: float,  # sequences in the whole batch
    aggregation: Aggregation = "token_mean",
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    dual_clip: float | None = None,
    proximal_logprobs: torch.Tensor | None = None,  # [B, T] log π_old, no gradient
    tis_cap: float | None = None,
    ref_logprobs: torch.Tensor | None = None,  # [B, T] log π_ref, no gradient
    kl_coef: float = 0.0,
    kl_estimator: KLEstimator = "k3",
    entropy: torch.Tensor | None = None,  # [B, T] H(π_θ(· | y_<t)), with gradient if used
    entropy_coef: float = 0.0,
    top_logprobs: torch.Tensor | None = None,  # [B, T, K] log π_θ of the K likeliest tokens
    is_top1: torch.Tensor | None = None,  # [B, T] bool: y_t is the likeliest token
    simko_alpha: float = 0.0,
    simko_entropy_quantile: float = 0.8,
    simko_negative_scale: float = 1.1,
    rehearsal: torch.Tensor | None = None,  # [B] bool: rows trained only by the rehearsal term
    rehearsal_coef: float = 0.0,
    sequence_weights: torch.Tensor | None = None,  # [B] what each row counts in the normalisers
    global_num_rehearsal_tokens: float = 0.0,  # the rehearsal rows' response tokens, whole batch
    global_num_rehearsal_sequences: float = 0.0,  # the rehearsal rows, whole batch
) -> PolicyLossOutput:
    """L = Agg[w · ℓ^clip] + kl_coef · Agg[k] - entropy_coef · Agg[H]
    + rehearsal_coef · Agg^R[k3(log π_ref - log π_θ)]; see the module docstring.

    Values outside `response_mask` are ignored (they may be anything finite or not). Rows flagged
    in `rehearsal` count only in the rehearsal term (normalised by the rehearsal counts);
    `global_num_tokens` and `global_num_sequences` count the other rows, and may be 0 when the
    batch holds rehearsal rows only.

    Metrics (all additive shares, see `PolicyLossOutput`):
        train/loss, train/policy_loss; train/kl and train/kl_loss (with `ref_logprobs`);
        train/entropy and train/entropy_loss (with `entropy`); token means of:
        train/clip_fraction (tokens whose clipped branch is active: zero gradient),
        train/dual_clip_fraction, train/ratio_mean (ρ),
        train/mismatch_kl (k3 estimate of KL(μ ‖ π_θ) per token: how far the engine's
        sampling distribution is from the learner's, staleness included),
        train/is_weight_mean and train/is_truncated_fraction (with `tis_cap`),
        train/simko_token_fraction (tokens SimKO changes, with `simko_alpha`);
        train/rehearsal_kl and train/rehearsal_loss (with rehearsal rows in the whole batch).
    """
    _check_inputs(
        logprobs=logprobs,
        behaviour_logprobs=behaviour_logprobs,
        advantages=advantages,
        response_mask=response_mask,
        proximal_logprobs=proximal_logprobs,
        ref_logprobs=ref_logprobs,
        entropy=entropy,
        global_num_tokens=global_num_tokens,
        global_num_sequences=global_num_sequences,
        clip_low=clip_low,
        clip_high=clip_high,
        dual_clip=dual_clip,
        tis_cap=tis_cap,
        kl_coef=kl_coef,
        entropy_coef=entropy_coef,
        top_logprobs=top_logprobs,
        is_top1=is_top1,
        simko_alpha=simko_alpha,
        rehearsal=rehearsal,
        rehearsal_coef=rehearsal_coef,
        global_num_rehearsal_tokens=global_num_rehearsal_tokens,
        global_num_rehearsal_sequences=global_num_rehearsal_sequences,
    )
    mask = response_mask.bool()
    rehearsal_mask = None
    if rehearsal is not None:
        rehearsal_rows = rehearsal.to(mask.device, torch.bool).unsqueeze(1)  # [B, 1]
        rehearsal_mask, mask = mask & rehearsal_rows, mask & ~rehearsal_rows
    # A batch of rehearsal rows only has no other token: its terms are sums of zeros, each
    # divided by 1 instead of 0 (checked in _check_inputs: some token is in the batch).
    global_num_tokens = global_num_tokens if global_num_tokens > 0 else 1.0
    global_num_sequences = global_num_sequences if global_num_sequences > 0 else 1.0
    zeros = torch.zeros_like(logprobs)
    advantages = torch.where(mask, advantages.to(logprobs.dtype), zeros)
    # A row counts `sequence_weights[b]` in the normalisers (a whole pool of N trains as n
    # sequences' worth): every per-token term but the policy's (whose advantages the group
    # builder already scaled by it) is weighted the same, so a KL coefficient, an entropy bonus
    # or a logged token mean means per token what it means with kept groups.
    row_weight = (
        torch.ones_like(logprobs[:, :1])
        if sequence_weights is None
        else sequence_weights.to(logprobs.device, logprobs.dtype).unsqueeze(1)
    )  # [B, 1]

    def agg(values: torch.Tensor, *, weighted: bool = True) -> torch.Tensor:
        return aggregate(
            values * row_weight if weighted else values,
            mask,
            aggregation=aggregation,
            global_num_tokens=global_num_tokens,
            global_num_sequences=global_num_sequences,
        )

    def token_mean(values: torch.Tensor) -> float:
        weighted = torch.where(mask, values * row_weight, zeros)
        return float(weighted.sum().detach()) / global_num_tokens

    old_logprobs = behaviour_logprobs if proximal_logprobs is None else proximal_logprobs
    log_ratio = torch.where(mask, logprobs - old_logprobs.to(logprobs.dtype), zeros)
    ratio = torch.exp(log_ratio.clamp(-MAX_ABS_LOG_RATIO, MAX_ABS_LOG_RATIO))
    simko_tokens = None
    if simko_alpha > 0:
        assert entropy is not None and top_logprobs is not None and is_top1 is not None
        high = high_entropy_tokens(entropy.detach(), mask, quantile=simko_entropy_quantile)
        positive, negative_mode = high & (advantages > 0), high & (advantages < 0) & is_top1
        ratio = simko_ratio(ratio, top_logprobs, alpha=simko_alpha, where=positive)
        advantages = torch.where(negative_mode, advantages * simko_negative_scale, advantages)
        simko_tokens = (positive | negative_mode).to(logprobs.dtype)
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    token_loss = torch.maximum(unclipped, clipped)
    clip_active = (clipped > unclipped).to(logprobs.dtype)
    dual_active = zeros
    if dual_clip is not None:
        dual_bound = -advantages * dual_clip
        dual_active = ((advantages < 0) & (token_loss > dual_bound)).to(logprobs.dtype)
        token_loss = torch.where(advantages < 0, torch.minimum(token_loss, dual_bound), token_loss)

    metrics: dict[str, float] = {}
    if tis_cap is not None:
        assert proximal_logprobs is not None  # checked in _check_inputs
        mismatch_log_ratio = torch.where(
            mask, proximal_logprobs.to(logprobs.dtype) - behaviour_logprobs, zeros
        )
        raw_weight = torch.exp(mismatch_log_ratio.clamp(-MAX_ABS_LOG_RATIO, MAX_ABS_LOG_RATIO))
        is_weight = raw_weight.clamp(max=tis_cap).detach()
        token_loss = is_weight * token_loss
        metrics["train/is_weight_mean"] = token_mean(is_weight)
        metrics["train/is_truncated_fraction"] = token_mean((raw_weight > tis_cap).float())

    policy_term = agg(token_loss, weighted=False)
    loss = policy_term
    metrics["train/policy_loss"] = float(policy_term.detach())
    metrics["train/clip_fraction"] = token_mean(clip_active)
    if dual_clip is not None:
        metrics["train/dual_clip_fraction"] = token_mean(dual_active)
    metrics["train/ratio_mean"] = token_mean(ratio)
    if simko_tokens is not None:
        metrics["train/simko_token_fraction"] = token_mean(simko_tokens)
    # KL(μ ‖ π_θ) from samples of μ: k3 with δ = log μ - log π_θ.
    metrics["train/mismatch_kl"] = token_mean(
        kl_estimate(behaviour_logprobs.to(logprobs.dtype), logprobs.detach(), estimator="k3")
    )

    if ref_logprobs is not None:
        kl = agg(kl_estimate(logprobs, ref_logprobs.to(logprobs.dtype), estimator=kl_estimator))
        loss = loss + kl_coef * kl
        metrics["train/kl"] = float(kl.detach())
        metrics["train/kl_loss"] = kl_coef * float(kl.detach())
    if entropy is not None:
        mean_entropy = agg(entropy)
        loss = loss - entropy_coef * mean_entropy
        metrics["train/entropy"] = float(mean_entropy.detach())
        metrics["train/entropy_loss"] = -entropy_coef * float(mean_entropy.detach())
    if rehearsal_mask is not None and global_num_rehearsal_tokens > 0:
        assert ref_logprobs is not None  # checked in _check_inputs
        rehearsal_kl = aggregate(
            rehearsal_forward_kl(logprobs, ref_logprobs.to(logprobs.dtype)),
            rehearsal_mask,
            aggregation=aggregation,
            global_num_tokens=global_num_rehearsal_tokens,
            global_num_sequences=global_num_rehearsal_sequences,
        )
        loss = loss + rehearsal_coef * rehearsal_kl
        metrics["train/rehearsal_kl"] = float(rehearsal_kl.detach())
        metrics["train/rehearsal_loss"] = rehearsal_coef * float(rehearsal_kl.detach())
    metrics["train/loss"] = float(loss.detach())
    return PolicyLossOutput(loss=loss, metrics=metrics)


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
    """ρ̃_t = (1 - α)ρ_t + (α/K)Σ_i sg[ρ_t]·π_θ(v_i)/sg[π_θ(v_i)] where `where`, else ρ_t (module
    docstring, SimKO). Equal to ρ_t in value; its gradient is (1 - α)∇ρ_t + α·ρ_t·mean_i ∇log
    π_θ(v_i). (The reference code's ratio of old top-K probabilities cancels in both.)"""
    candidates = ratio.detach().unsqueeze(-1) * torch.exp(top_logprobs - top_logprobs.detach())
    mixed = (1.0 - alpha) * ratio + alpha * candidates.mean(dim=-1)
    return torch.where(where, mixed, ratio)


def _check_inputs(
    *,
    logprobs: torch.Tensor,
    behaviour_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    proximal_logprobs: torch.Tensor | None,
    ref_logprobs: torch.Tensor | None,
    entropy: torch.Tensor | None,
    global_num_tokens: float,
    global_num_sequences: float,
    clip_low: float,
    clip_high: float,
    dual_clip: float | None,
    tis_cap: float | None,
    kl_coef: float,
    entropy_coef: float,
    top_logprobs: torch.Tensor | None,
    is_top1: torch.Tensor | None,
    simko_alpha: float,
    rehearsal: torch.Tensor | None,
    rehearsal_coef: float,
    global_num_rehearsal_tokens: float,
    global_num_rehearsal_sequences: float,
) -> None:
    shape = logprobs.shape
    if logprobs.dim() != 2:
        raise ValueError(f"logprobs must be [B, T], got shape {tuple(shape)}")
    named = {
        "behaviour_logprobs": behaviour_logprobs,
        "advantages": advantages,
        "response_mask": response_mask,
        "proximal_logprobs": proximal_logprobs,
        "ref_logprobs": ref_logprobs,
        "entropy": entropy,
    }
    for name, tensor in named.items():
        if tensor is not None and tensor.shape != shape:
            raise ValueError(
                f"{name} has shape {tuple(tensor.shape)} but logprobs has {tuple(shape)}; "
                "every per-token input must be [B, T] on the same positions"
            )
    counts = (
        global_num_tokens,
        global_num_sequences,
        global_num_rehearsal_tokens,
        global_num_rehearsal_sequences,
    )
    if min(counts) < 0 or (
        (global_num_tokens <= 0 or global_num_sequences <= 0)
        and (global_num_rehearsal_tokens <= 0 or global_num_rehearsal_sequences <= 0)
    ):
        raise ValueError(
            f"global_num_tokens ({global_num_tokens}) and global_num_sequences "
            f"({global_num_sequences}), or the rehearsal rows' counts "
            f"({global_num_rehearsal_tokens}, {global_num_rehearsal_sequences}), must be > 0: "
            "pass the whole batch's counts, which include at least one response token"
        )
    if rehearsal is not None:
        if tuple(rehearsal.shape) != (shape[0],):
            raise ValueError(
                f"rehearsal has shape {tuple(rehearsal.shape)}; it must be [B] = ({shape[0]},), "
                "one flag per row"
            )
        if rehearsal_coef < 0:
            raise ValueError(
                f"rehearsal_coef must be >= 0 (DPH-RL's 0.01-0.05), got {rehearsal_coef}"
            )
        rehearsed = response_mask.bool() & rehearsal.to(response_mask.device, torch.bool)[:, None]
        if bool(rehearsed.any()) and global_num_rehearsal_tokens <= 0:
            raise ValueError(
                "the shard has rehearsal tokens but global_num_rehearsal_tokens is 0: pass the "
                "whole batch's rehearsal counts (BatchCounts.rehearsal_tokens)"
            )
        if ref_logprobs is None and bool(rehearsal.any()):
            raise ValueError(
                "rehearsal rows need ref_logprobs: their term is the forward KL to a frozen "
                "reference (the base model)"
            )
    if not 0.0 <= clip_low < 1.0 or clip_high < 0.0:
        raise ValueError(
            f"need 0 <= clip_low < 1 and clip_high >= 0, got clip_low={clip_low}, "
            f"clip_high={clip_high}"
        )
    if dual_clip is not None and dual_clip <= 1.0:
        raise ValueError(f"dual_clip must be > 1 (typically 3) or None, got {dual_clip}")
    if tis_cap is not None:
        if proximal_logprobs is None:
            raise ValueError(
                "tis_cap needs proximal_logprobs: without them the ratio is already taken against "
                "the behaviour policy and there is no separate engine/learner weight to truncate"
            )
        if tis_cap <= 0:
            raise ValueError(f"tis_cap must be > 0 (typically 2), got {tis_cap}")
    if kl_coef != 0.0 and ref_logprobs is None:
        raise ValueError(f"kl_coef={kl_coef} needs ref_logprobs (a frozen reference model)")
    if entropy_coef != 0.0 and entropy is None:
        raise ValueError(f"entropy_coef={entropy_coef} needs the per-token entropy")
    if simko_alpha != 0.0:
        if not 0.0 < simko_alpha < 1.0:
            raise ValueError(f"simko_alpha must be in [0, 1), got {simko_alpha}")
        if entropy is None or top_logprobs is None or is_top1 is None:
            raise ValueError(
                "simko_alpha > 0 needs the per-token entropy, the top-K log-probs and the top-1 "
                "flags (TokenScorer with top_k > 0)"
            )
        if top_logprobs.shape[:2] != shape or is_top1.shape != shape:
            raise ValueError(
                f"top_logprobs {tuple(top_logprobs.shape)} must be [B, T, K] and is_top1 "
                f"{tuple(is_top1.shape)} [B, T] on logprobs' {tuple(shape)} positions"
            )
