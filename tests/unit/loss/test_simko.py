"""SimKO in the generic loss (adarl/algo/loss.py): the entropy gate, the mixed ratio and the
negative top-1 scale, against the reference code's computation on a fixed input."""

from __future__ import annotations

import torch

from adarl.algo.loss import LossInputs, policy_loss
from adarl.algo.loss_terms import SimKO, high_entropy_tokens, simko_ratio
from adarl.config.learner import LearnerConfig, PolicyLossConfig
from adarl.learner.loss_terms import build_loss_terms

V, K = 6, 3


def _fixed_input() -> dict[str, torch.Tensor]:
    """Two responses of 6 tokens (the second 4 long), a positive and a negative advantage."""
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 6, V, generator=generator, dtype=torch.float64) * 2
    old_logits = logits + 0.3 * torch.randn(2, 6, V, generator=generator, dtype=torch.float64)
    tokens = torch.randint(0, V, (2, 6), generator=generator)
    tokens[1, 2] = int(logits[1, 2].argmax())  # a negative token that is the mode
    tokens[1, 3] = int(logits[1, 3].argmax())
    mask = torch.ones(2, 6, dtype=torch.bool)
    mask[1, 4:] = False
    advantages = torch.tensor([[0.8] * 6, [-0.5] * 6], dtype=torch.float64)
    return {
        "logits": logits,
        "old_logits": old_logits,
        "tokens": tokens,
        "mask": mask,
        "advantages": advantages,
    }


def _reference_loss(x: dict[str, torch.Tensor], theta: torch.Tensor, alpha: float) -> torch.Tensor:
    """The reference code's formula, written out (CLR-Lab/SimKO `compute_policy_loss_simko`):
    old top-K log-probs included, numerator/denominator detached, per-row 0.8-quantile of
    entropy, a negative's advantage × 1.1 where its token is the top-1, clip 0.2, token mean."""
    logp_all = torch.log_softmax(theta, dim=-1)
    old_all = torch.log_softmax(x["old_logits"], dim=-1)
    tokens, mask = x["tokens"], x["mask"]
    logp = logp_all.gather(-1, tokens[..., None])[..., 0]
    old = old_all.gather(-1, tokens[..., None])[..., 0]
    top_index = logp_all.detach().topk(K, dim=-1).indices
    top = logp_all.gather(-1, top_index)
    old_top = old_all.gather(-1, top_index)
    entropy = -(logp_all.exp() * logp_all).sum(-1).detach()
    threshold = torch.stack([torch.quantile(entropy[b][mask[b]], 0.8) for b in range(2)])[:, None]
    high = (entropy > threshold).double() * mask
    numerator = torch.exp((logp - old).detach())
    denominator = torch.exp((top - old_top).detach())
    top_sum = (numerator[..., None] / denominator * torch.exp(top - old_top)).sum(-1)
    correct = (x["advantages"] > 0) & mask
    mix = alpha * high
    ratio = torch.exp(logp - old)
    ratio = torch.where(correct, (1 - mix) * ratio + mix / K * top_sum, ratio)
    is_top1 = logp_all.detach().argmax(-1) == tokens
    negative = (x["advantages"] < 0) & is_top1 & (high > 0)
    advantages = x["advantages"] * torch.where(negative, 1.1, 1.0)
    losses = torch.maximum(-advantages * ratio, -advantages * ratio.clamp(0.8, 1.2))
    return (losses * mask).sum() / mask.sum()


def test_high_entropy_tokens_are_above_their_own_responses_quantile() -> None:
    entropy = torch.tensor([[0.1, 0.5, 0.9, 0.3, 0.7], [2.0, 1.0, 3.0, 9.0, 9.0]])
    mask = torch.tensor([[True] * 5, [True, True, True, False, False]])
    # Row 0: 0.8-quantile of (0.1, 0.3, 0.5, 0.7, 0.9) = 0.74 → only 0.9. Row 1 (3 tokens):
    # quantile of (1, 2, 3) = 2.6 → only 3.0; the masked 9s do not count.
    expected = torch.tensor(
        [[False, False, True, False, False], [False, False, True, False, False]]
    )
    assert torch.equal(high_entropy_tokens(entropy, mask, quantile=0.8), expected)


def test_the_mixed_ratio_keeps_its_value_and_moves_gradient_to_the_top_k() -> None:
    logits = torch.tensor([[1.0, 0.0, -1.0, 2.0]], requires_grad=True)
    logp = torch.log_softmax(logits, dim=-1)
    ratio = torch.exp(logp[:, 0] - (-1.0))[:, None]  # token 0, π_old(y) = e^-1
    top = logp.topk(2, dim=-1).values[:, None, :]  # tokens 3 and 0
    mixed = simko_ratio(ratio, top, alpha=0.25, where=torch.tensor([[True]]))
    assert torch.allclose(mixed, ratio)
    (gradient,) = torch.autograd.grad(mixed.sum(), logits)
    # By hand: (1 - α)∇ρ + α·ρ·mean(∇log π(3), ∇log π(0)), ∇log π(j) = e_j - π.
    pi = logp.detach().exp()[0]
    rho = float(ratio.detach())
    e = torch.eye(4)
    by_hand = 0.75 * rho * (e[0] - pi) + 0.25 * rho * 0.5 * ((e[3] - pi) + (e[0] - pi))
    torch.testing.assert_close(gradient[0], by_hand)


def _inputs(x: dict[str, torch.Tensor], theta: torch.Tensor) -> LossInputs:
    """The fixed input's loss inputs at logits `theta`, with everything SimKO reads."""
    logp_all = torch.log_softmax(theta, dim=-1)
    return LossInputs(
        logprobs=logp_all.gather(-1, x["tokens"][..., None])[..., 0],
        behaviour_logprobs=torch.log_softmax(x["old_logits"], -1).gather(
            -1, x["tokens"][..., None]
        )[..., 0],
        advantages=x["advantages"],
        response_mask=x["mask"],
        global_num_tokens=float(x["mask"].sum()),
        global_num_sequences=2.0,
        entropy=-(logp_all.exp() * logp_all).sum(-1),
        top_logprobs=logp_all.topk(K, dim=-1).values,
        is_top1=logp_all.detach().argmax(-1) == x["tokens"],
    )


def test_simko_loss_and_gradient_equal_the_reference_code() -> None:
    x = _fixed_input()
    for alpha in (0.01, 0.3):
        theta = x["logits"].clone().requires_grad_(True)
        expected = _reference_loss(x, theta, alpha)
        (expected_grad,) = torch.autograd.grad(expected, theta)

        theta = x["logits"].clone().requires_grad_(True)
        out = policy_loss(
            _inputs(x, theta),
            clip_low=0.2,
            clip_high=0.2,
            terms=(SimKO(alpha=alpha),),
        )
        (gradient,) = torch.autograd.grad(out.loss, theta)
        torch.testing.assert_close(out.loss, expected)
        torch.testing.assert_close(gradient, expected_grad)
        # Tokens changed: the high-entropy ones (one per row here and row 1's mode) — not none.
        assert 0 < out.metrics["train/simko_token_fraction"] < 1


def test_simko_off_builds_no_term_and_is_the_plain_loss() -> None:
    x = _fixed_input()
    inputs = _inputs(x, x["logits"])
    terms = build_loss_terms(LearnerConfig(loss=PolicyLossConfig(simko_alpha=0.0)))
    assert [term.name for term in terms] == ["entropy"]  # logged only, coefficient 0
    off = policy_loss(inputs, terms=terms)
    assert torch.equal(policy_loss(inputs).loss, off.loss)
    assert "train/simko_token_fraction" not in off.metrics
