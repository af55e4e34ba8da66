"""The policy loss against values derived by hand (in the comments), and its split invariance.

Ratios are built as log π_θ = log μ + log ρ so every ρ below is exact; tolerances are float64
round-off (1e-12).
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from adarl.algo.loss import LossInputs, aggregate, kl_estimate, policy_loss
from adarl.algo.loss_terms import Entropy, KLAnchor

TOL = 1e-12
LOG2 = math.log(2.0)


def _tensor(rows: list[list[float]]) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float64)


def _logprobs_for_ratios(behaviour: torch.Tensor, ratios: torch.Tensor) -> torch.Tensor:
    return (behaviour + torch.log(ratios)).requires_grad_(True)


def _grad(loss: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    (g,) = torch.autograd.grad(loss, x)
    return g


def test_clip_inactive_is_the_plain_ratio_surrogate() -> None:
    # Position 0 is the prompt (masked). ρ = 1.1 with A = 2 and ρ = 0.9 with A = -1 are inside
    # [0.8, 1.2], so ℓ = -Aρ: [-2.2, 0.9]; token mean over 2 tokens = -0.65.
    # dℓ/dlog π = -Aρ/N: [-2·1.1/2, 1·0.9/2] = [-1.1, 0.45].
    behaviour = _tensor([[-1.0, -1.0, -1.0]])
    logprobs = _logprobs_for_ratios(behaviour, _tensor([[1.0, 1.1, 0.9]]))
    out = policy_loss(
        LossInputs(
            logprobs=logprobs,
            behaviour_logprobs=behaviour,
            advantages=_tensor([[0.0, 2.0, -1.0]]),
            response_mask=torch.tensor([[False, True, True]]),
            global_num_tokens=2,
            global_num_sequences=1,
        )
    )
    assert out.loss.item() == pytest.approx(-0.65, abs=TOL)
    torch.testing.assert_close(_grad(out.loss, logprobs), _tensor([[0.0, -1.1, 0.45]]))
    assert out.metrics["train/clip_fraction"] == 0.0
    assert out.metrics["train/ratio_mean"] == pytest.approx(1.0, abs=TOL)  # (1.1 + 0.9) / 2


def test_clip_active_branches_and_their_gradients() -> None:
    # ε = 0.2.  (ρ, A) → ℓ = max(-Aρ, -A clip(ρ)) and its gradient -Aρ·[unclipped branch]:
    #   (1.5, +1): max(-1.5, -1.2) = -1.2  clipped, grad 0
    #   (0.5, -1): max( 0.5,  0.8) =  0.8  clipped, grad 0
    #   (0.5, +1): max(-0.5, -0.8) = -0.5  unclipped, grad -0.5
    #   (1.5, -1): max( 1.5,  1.2) =  1.5  unclipped, grad  1.5
    # token mean: (-1.2 + 0.8 - 0.5 + 1.5)/4 = 0.15; grads /4; clip fraction 2/4.
    behaviour = _tensor([[-2.0, -2.0, -2.0, -2.0]])
    logprobs = _logprobs_for_ratios(behaviour, _tensor([[1.5, 0.5, 0.5, 1.5]]))
    out = policy_loss(
        LossInputs(
            logprobs=logprobs,
            behaviour_logprobs=behaviour,
            advantages=_tensor([[1.0, -1.0, 1.0, -1.0]]),
            response_mask=torch.ones(1, 4, dtype=torch.bool),
            global_num_tokens=4,
            global_num_sequences=1,
        )
    )
    assert out.loss.item() == pytest.approx(0.15, abs=TOL)
    torch.testing.assert_close(_grad(out.loss, logprobs), _tensor([[0.0, 0.0, -0.125, 0.375]]))
    assert out.metrics["train/clip_fraction"] == pytest.approx(0.5, abs=TOL)


def test_asymmetric_clip_high() -> None:
    # ε_low = 0.2, ε_high = 0.28 (DAPO). ρ = 1.25, A = 1: 1.25 < 1.28, unclipped: ℓ = -1.25.
    # With ε_high = 0.2 the same token is clipped: ℓ = -1.2.
    behaviour = _tensor([[-1.0]])
    inputs = LossInputs(
        logprobs=_logprobs_for_ratios(behaviour, _tensor([[1.25]])),
        behaviour_logprobs=behaviour,
        advantages=_tensor([[1.0]]),
        response_mask=torch.ones(1, 1, dtype=torch.bool),
        global_num_tokens=1,
        global_num_sequences=1,
    )
    high = policy_loss(inputs, clip_low=0.2, clip_high=0.28)
    symmetric = policy_loss(inputs, clip_low=0.2, clip_high=0.2)
    assert high.loss.item() == pytest.approx(-1.25, abs=TOL)
    assert symmetric.loss.item() == pytest.approx(-1.2, abs=TOL)


def test_dual_clip_bounds_negative_advantages_only() -> None:
    # c = 3, ε = 0.2.
    #   (ρ=4, A=-1): PPO ℓ = max(4, 1.2) = 4; dual: min(4, 3) = 3 (constant, grad 0)
    #   (ρ=2, A=-1): PPO ℓ = max(2, 1.2) = 2 < 3, kept; grad -Aρ = 2
    #   (ρ=4, A=+1): PPO ℓ = max(-4, -1.2) = -1.2 (clipped; dual clip does not apply to A > 0)
    # token mean: (3 + 2 - 1.2)/3 = 3.8/3; grads [0, 2/3, 0]; dual-clip fraction 1/3.
    behaviour = _tensor([[-3.0, -3.0, -3.0]])
    logprobs = _logprobs_for_ratios(behaviour, _tensor([[4.0, 2.0, 4.0]]))
    inputs = LossInputs(
        logprobs=logprobs,
        behaviour_logprobs=behaviour,
        advantages=_tensor([[-1.0, -1.0, 1.0]]),
        response_mask=torch.ones(1, 3, dtype=torch.bool),
        global_num_tokens=3,
        global_num_sequences=1,
    )
    out = policy_loss(inputs, dual_clip=3.0)
    assert out.loss.item() == pytest.approx(3.8 / 3, abs=TOL)
    torch.testing.assert_close(_grad(out.loss, logprobs), _tensor([[0.0, 2 / 3, 0.0]]))
    assert out.metrics["train/dual_clip_fraction"] == pytest.approx(1 / 3, abs=TOL)
    # Without the dual clip the first token contributes 4: (4 + 2 - 1.2)/3 = 1.6.
    assert policy_loss(inputs).loss.item() == pytest.approx(1.6, abs=TOL)


@pytest.mark.parametrize(
    ("estimator", "value_at_plus", "value_at_minus", "grad_at_plus", "grad_at_minus"),
    [
        # δ = +log 2 and -log 2.  k1 = δ, dk1/dδ = 1.
        ("k1", LOG2, -LOG2, 1.0, 1.0),
        # k2 = δ²/2 = (log 2)²/2 for both signs; dk2/dδ = δ.
        ("k2", LOG2**2 / 2, LOG2**2 / 2, LOG2, -LOG2),
        # k3 = e^{-δ} - 1 + δ: 1/2 - 1 + log 2 and 2 - 1 - log 2; dk3/dδ = 1 - e^{-δ}: 1/2, -1.
        ("k3", 0.5 - 1 + LOG2, 2 - 1 - LOG2, 0.5, -1.0),
    ],
)
def test_kl_estimators(
    estimator: str,
    value_at_plus: float,
    value_at_minus: float,
    grad_at_plus: float,
    grad_at_minus: float,
) -> None:
    ref = _tensor([[-1.0, -1.0]])
    logprobs = (ref + _tensor([[LOG2, -LOG2]])).requires_grad_(True)
    per_token = kl_estimate(logprobs, ref, estimator=estimator)  # type: ignore[arg-type]
    torch.testing.assert_close(per_token, _tensor([[value_at_plus, value_at_minus]]))
    # As a loss term: on-policy tokens (ρ = 1, A = 0) so only β·token_mean(k) remains.
    out = policy_loss(
        LossInputs(
            logprobs=logprobs,
            behaviour_logprobs=logprobs.detach(),
            advantages=torch.zeros(1, 2, dtype=torch.float64),
            response_mask=torch.ones(1, 2, dtype=torch.bool),
            global_num_tokens=2,
            global_num_sequences=1,
            ref_logprobs=ref,
        ),
        terms=(KLAnchor(coef=0.1, estimator=estimator),),
    )
    expected_kl = (value_at_plus + value_at_minus) / 2
    assert out.metrics["train/kl"] == pytest.approx(expected_kl, abs=TOL)
    assert out.metrics["train/kl_loss"] == pytest.approx(0.1 * expected_kl, abs=TOL)
    assert out.loss.item() == pytest.approx(0.1 * expected_kl, abs=TOL)
    torch.testing.assert_close(
        _grad(out.loss, logprobs), 0.1 / 2 * _tensor([[grad_at_plus, grad_at_minus]])
    )


# Two sequences: lengths 1 and 3, per-token values 4 | 1, 2, 3 (zeros are padding).
_VALUES = _tensor([[4.0, 0.0, 0.0], [1.0, 2.0, 3.0]])
_MASK = torch.tensor([[True, False, False], [True, True, True]])


@pytest.mark.parametrize(
    ("aggregation", "expected"),
    [
        ("token_mean", 10 / 4),  # (4 + 1 + 2 + 3) / 4 tokens
        ("sequence_mean", (4 / 1 + 6 / 3) / 2),  # mean of per-sequence means = (4 + 2)/2 = 3
        ("sequence_sum", (4 + 6) / 2),  # mean of per-sequence sums = 5
    ],
)
def test_aggregations(aggregation: str, expected: float) -> None:
    value = aggregate(
        _VALUES,
        _MASK,
        aggregation=aggregation,  # type: ignore[arg-type]
        global_num_tokens=4,
        global_num_sequences=2,
    )
    assert value.item() == pytest.approx(expected, abs=TOL)
    # A shard normalised by the global counts is that shard's share: the rows sum to the whole.
    shares = [
        aggregate(
            _VALUES[i : i + 1],
            _MASK[i : i + 1],
            aggregation=aggregation,  # type: ignore[arg-type]
            global_num_tokens=4,
            global_num_sequences=2,
        ).item()
        for i in range(2)
    ]
    assert sum(shares) == pytest.approx(expected, abs=TOL)


def test_padding_values_are_ignored() -> None:
    # Outside the mask logprobs may be garbage (even -inf); nothing leaks into loss or gradient.
    behaviour = _tensor([[-1.0, 0.0]])
    logprobs = torch.tensor([[-1.0, -math.inf]], dtype=torch.float64, requires_grad=True)
    out = policy_loss(
        LossInputs(
            logprobs=logprobs,
            behaviour_logprobs=behaviour,
            advantages=_tensor([[1.0, 7.0]]),
            response_mask=torch.tensor([[True, False]]),
            global_num_tokens=1,
            global_num_sequences=1,
            ref_logprobs=_tensor([[-1.0, 5.0]]),
            entropy=_tensor([[0.25, math.nan]]),
        ),
        terms=(
            KLAnchor(coef=0.5),
            Entropy(coef=0.1),
        ),
    )
    # ρ = 1, A = 1: ℓ = -1; KL = 0 (k3 at δ = 0); entropy 0.25: loss = -1 - 0.1·0.25 = -1.025.
    assert out.loss.item() == pytest.approx(-1.025, abs=TOL)
    grad = _grad(out.loss, logprobs)
    assert torch.isfinite(grad).all() and grad[0, 1] == 0.0
    assert out.metrics["train/entropy"] == pytest.approx(0.25, abs=TOL)
    assert out.metrics["train/entropy_loss"] == pytest.approx(-0.025, abs=TOL)


def test_truncated_importance_sampling() -> None:
    # Proximal = learner log-probs before the update (here = log π_θ, so the PPO ratio is 1).
    # π_old/μ = 3 on token 0 → w = min(3, C=2) = 2 (truncated); 0.5 on token 1 → w = 0.5.
    # ℓ = -w·A·ρ with A = [1, -2]: [-2, 1]; token mean = -0.5. grad = -w·A/N = [-1, 0.5].
    behaviour = _tensor([[-2.0, -2.0]])
    logprobs = (behaviour + torch.log(_tensor([[3.0, 0.5]]))).requires_grad_(True)
    inputs = LossInputs(
        logprobs=logprobs,
        behaviour_logprobs=behaviour,
        advantages=_tensor([[1.0, -2.0]]),
        response_mask=torch.ones(1, 2, dtype=torch.bool),
        global_num_tokens=2,
        global_num_sequences=1,
        proximal_logprobs=logprobs.detach(),
    )
    out = policy_loss(inputs, tis_cap=2.0)
    assert out.loss.item() == pytest.approx(-0.5, abs=TOL)
    torch.testing.assert_close(_grad(out.loss, logprobs), _tensor([[-1.0, 0.5]]))
    assert out.metrics["train/is_weight_mean"] == pytest.approx(1.25, abs=TOL)  # (2 + 0.5)/2
    assert out.metrics["train/is_truncated_fraction"] == pytest.approx(0.5, abs=TOL)
    # Against the behaviour policy instead, the same tokens have ρ = 3 and 0.5 and are clipped:
    # (ρ=3, A=1): max(-3, -1.2) = -1.2; (ρ=0.5, A=-2): max(1, 1.6) = 1.6; mean 0.2.
    plain = policy_loss(dataclasses.replace(inputs, proximal_logprobs=None))
    assert plain.loss.item() == pytest.approx(0.2, abs=TOL)


def test_mismatch_kl_metric() -> None:
    # log π_θ - log μ = log 2 on one token: KL(μ‖π) k3 with r = π/μ = 2: r - 1 - log r.
    behaviour = _tensor([[-1.0]])
    out = policy_loss(
        LossInputs(
            logprobs=(behaviour + LOG2).requires_grad_(True),
            behaviour_logprobs=behaviour,
            advantages=_tensor([[0.0]]),
            response_mask=torch.ones(1, 1, dtype=torch.bool),
            global_num_tokens=1,
            global_num_sequences=1,
        )
    )
    assert out.metrics["train/mismatch_kl"] == pytest.approx(1 - LOG2, abs=TOL)


@pytest.mark.parametrize("aggregation", ["token_mean", "sequence_mean", "sequence_sum"])
def test_loss_and_metrics_are_additive_over_any_split(aggregation: str) -> None:
    # Random batch; the full batch vs. a 3-way row split, each shard normalised by global counts:
    # losses, gradients and every metric must sum to the full-batch values.
    generator = torch.Generator().manual_seed(0)
    b, t = 7, 6
    behaviour = -torch.rand(b, t, generator=generator, dtype=torch.float64) * 3
    logprobs = behaviour + 0.3 * torch.randn(b, t, generator=generator, dtype=torch.float64)
    logprobs.requires_grad_(True)
    mask = torch.rand(b, t, generator=generator) < 0.7
    mask[:, 0] = True
    advantages = torch.randn(b, t, generator=generator, dtype=torch.float64)
    ref = behaviour + 0.1
    entropy = torch.rand(b, t, generator=generator, dtype=torch.float64)

    def run(rows: slice) -> tuple[torch.Tensor, dict[str, float]]:
        out = policy_loss(
            LossInputs(
                logprobs=logprobs[rows],
                behaviour_logprobs=behaviour[rows],
                advantages=advantages[rows],
                response_mask=mask[rows],
                global_num_tokens=int(mask.sum()),
                global_num_sequences=b,
                ref_logprobs=ref[rows],
                entropy=entropy[rows],
            ),
            aggregation=aggregation,  # type: ignore[arg-type]
            dual_clip=3.0,
            terms=(KLAnchor(coef=0.05), Entropy(coef=0.01)),
        )
        return out.loss, out.metrics

    full_loss, full_metrics = run(slice(None))
    full_grad = _grad(full_loss, logprobs)
    shards = [run(slice(0, 2)), run(slice(2, 3)), run(slice(3, 7))]
    split_loss = sum(loss for loss, _ in shards)
    assert isinstance(split_loss, torch.Tensor)
    torch.testing.assert_close(_grad(split_loss, logprobs), full_grad, rtol=0, atol=TOL)
    for key, value in full_metrics.items():
        assert sum(m[key] for _, m in shards) == pytest.approx(value, abs=TOL), key


def test_bad_inputs_name_the_fix() -> None:
    x = torch.zeros(2, 3)
    mask = torch.ones(2, 3, dtype=torch.bool)
    base = LossInputs(
        logprobs=x,
        behaviour_logprobs=x,
        advantages=x,
        response_mask=mask,
        global_num_tokens=6,
        global_num_sequences=2,
    )
    with pytest.raises(ValueError, match="advantages has shape"):
        policy_loss(dataclasses.replace(base, advantages=torch.zeros(2, 4)))
    with pytest.raises(ValueError, match="tis_cap needs proximal_logprobs"):
        policy_loss(base, tis_cap=2.0)
    with pytest.raises(ValueError, match=r"the kl_anchor term needs ref_logprobs"):
        policy_loss(base, terms=(KLAnchor(coef=0.1),))
    with pytest.raises(ValueError, match="dual_clip must be > 1"):
        policy_loss(base, dual_clip=0.5)
    with pytest.raises(ValueError, match="global_num_tokens"):
        policy_loss(dataclasses.replace(base, global_num_tokens=0))
    with pytest.raises(ValueError, match="aggregation must be one of"):
        policy_loss(base, aggregation="mean")  # type: ignore[arg-type]


def test_a_whole_pool_counts_per_token_as_a_kept_group() -> None:
    """A pool trained whole with sequence weight n/N (adarl/allocator/group_builder.py: its
    advantages scaled by n/N, its rows counting n/N in the normalisers) gives every term and
    metric the value a kept group of the same rows does: here one row, and the same row twice at
    weight ½ with half its advantage. Unweighted, the KL and the logged means of the pool would
    count its tokens N/n times over (the KL anchor then acts ~mean(N)/n times harder)."""
    generator = torch.Generator().manual_seed(3)
    logprobs = -torch.rand(1, 5, generator=generator, dtype=torch.float64)
    behaviour = logprobs - 0.1 * torch.rand(1, 5, generator=generator, dtype=torch.float64)
    reference = logprobs - 0.3 * torch.rand(1, 5, generator=generator, dtype=torch.float64)
    entropy = torch.rand(1, 5, generator=generator, dtype=torch.float64)
    advantages = torch.full((1, 5), 0.7, dtype=torch.float64)
    mask = torch.ones(1, 5, dtype=torch.bool)
    terms = (KLAnchor(coef=0.1), Entropy(coef=0.01))
    kept = policy_loss(
        LossInputs(
            logprobs=logprobs,
            behaviour_logprobs=behaviour,
            advantages=advantages,
            response_mask=mask,
            global_num_tokens=5.0,
            global_num_sequences=1.0,
            ref_logprobs=reference,
            entropy=entropy,
        ),
        terms=terms,
    )
    twice = policy_loss(
        LossInputs(
            logprobs=logprobs.repeat(2, 1),
            behaviour_logprobs=behaviour.repeat(2, 1),
            advantages=0.5 * advantages.repeat(2, 1),
            response_mask=mask.repeat(2, 1),
            global_num_tokens=5.0,  # Σ_b w_b·L_b = 2 × ½ × 5
            global_num_sequences=1.0,
            ref_logprobs=reference.repeat(2, 1),
            entropy=entropy.repeat(2, 1),
            sequence_weights=torch.tensor([0.5, 0.5], dtype=torch.float64),
        ),
        terms=terms,
    )
    torch.testing.assert_close(twice.loss, kept.loss)
    assert twice.metrics == pytest.approx(kept.metrics, rel=1e-12)
    assert kept.metrics["train/ratio_mean"] != 1.0 and kept.metrics["train/kl"] > 0
