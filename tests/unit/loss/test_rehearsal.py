"""DPH-RL's rehearsal term of the generic loss (adarl/algo/loss_terms.py `Rehearsal`): the
forward KL k3(log π_ref - log π_θ) on its own rows, by hand and against the reference code's
formula, its own normalisers, its additivity over shards, and the other terms skipping its
rows."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from adarl.algo.loss import LossInputs, TermRows, policy_loss
from adarl.algo.loss_terms import KLAnchor, Rehearsal, rehearsal_forward_kl

TOL = 1e-12
LOG2 = math.log(2.0)


def _k3(u: float) -> float:
    """u - 1 - ln u: the forward-KL term's value at the ratio u = π_θ/π_ref."""
    return u - 1 - math.log(u)


def _grad(loss: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    (g,) = torch.autograd.grad(loss, x)
    return g


def test_forward_kl_by_hand() -> None:
    # u = π_θ/π_ref = 2 and 1/2: u - 1 - log u = 1 - ln 2 and ln 2 - 1/2; at u = 1 it is 0.
    ref = torch.tensor([[-1.0, -1.0, -2.0]], dtype=torch.float64)
    logprobs = (ref + torch.tensor([[LOG2, -LOG2, 0.0]], dtype=torch.float64)).requires_grad_()
    values = rehearsal_forward_kl(logprobs, ref)
    expected = torch.tensor([[1 - LOG2, LOG2 - 0.5, 0.0]], dtype=torch.float64)
    torch.testing.assert_close(values, expected, rtol=0, atol=TOL)
    # d/dlog π_θ (u - 1 - log u) = u - 1: [1, -1/2, 0].
    torch.testing.assert_close(
        _grad(values.sum(), logprobs), torch.tensor([[1.0, -0.5, 0.0]], dtype=torch.float64)
    )


def test_rehearsal_rows_take_only_the_forward_kl_term() -> None:
    # Row 0 (RL): position 0 is the prompt; ρ = 1.1 with A = 2 and ρ = 0.9 with A = -1, so the
    # clipped surrogate is (-2.2 + 0.9)/2 = -0.65 over its 2 tokens, gradient [-1.1, 0.45]; its
    # reference equals the policy, so its reverse KL and that KL's gradient are 0.
    # Row 1 (rehearsal): u = 2 and 1/2 against the reference: Agg^R = ((1 - ln 2) + (ln 2 -
    # 1/2))/2 = 1/4 over its own 2 tokens; gradient η(u - 1)/2 = [η/2, -η/4]. Its advantage (5)
    # and behaviour log-probs (far from the policy) must change nothing: the PPO, KL, ratio and
    # mismatch terms skip the row.
    eta, beta = 0.02, 0.1
    behaviour = torch.tensor([[-1.0, -1.0, -1.0], [-1.0, -9.0, -9.0]], dtype=torch.float64)
    ratios = torch.tensor([[1.0, 1.1, 0.9], [1.0, 1.0, 1.0]], dtype=torch.float64)
    logprobs = (behaviour + torch.log(ratios)).detach()
    logprobs[1] = torch.tensor([-1.0, -2.0, -2.0], dtype=torch.float64)
    logprobs.requires_grad_(True)
    ref = logprobs.detach().clone()
    ref[1] = torch.tensor([-1.0, -2.0 - LOG2, -2.0 + LOG2], dtype=torch.float64)
    out = policy_loss(
        LossInputs(
            logprobs=logprobs,
            behaviour_logprobs=behaviour,
            advantages=torch.tensor([[0.0, 2.0, -1.0], [0.0, 5.0, 5.0]], dtype=torch.float64),
            response_mask=torch.tensor([[False, True, True], [False, True, True]]),
            global_num_tokens=2,
            global_num_sequences=1,
            ref_logprobs=ref,
            term_rows={"rehearsal": TermRows(torch.tensor([False, True]), 2, 1)},
        ),
        terms=(
            KLAnchor(coef=beta),
            Rehearsal(coef=eta),
        ),
    )
    assert out.loss.item() == pytest.approx(-0.65 + eta * 0.25, abs=TOL)
    expected_grad = torch.tensor([[0.0, -1.1, 0.45], [0.0, eta / 2, -eta / 4]], dtype=torch.float64)
    torch.testing.assert_close(_grad(out.loss, logprobs), expected_grad)
    m = out.metrics
    assert m["train/rehearsal_kl"] == pytest.approx(0.25, abs=TOL)
    assert m["train/rehearsal_loss"] == pytest.approx(eta * 0.25, abs=TOL)
    assert m["train/policy_loss"] == pytest.approx(-0.65, abs=TOL)
    assert m["train/kl"] == pytest.approx(0.0, abs=TOL)
    assert m["train/ratio_mean"] == pytest.approx(1.0, abs=TOL)  # (1.1 + 0.9)/2: row 0 only
    assert m["train/mismatch_kl"] == pytest.approx(
        ((1.1 - 1 - math.log(1.1)) + (0.9 - 1 - math.log(0.9))) / 2, abs=TOL
    )


def test_sequence_mean_rehearsal_is_a_mean_per_row_then_over_rows() -> None:
    # Rehearsal rows of 2 and 1 tokens: ((k(2) + k(1/2))/2 + k(2))/2 with k(u) = u - 1 - ln u.
    ref = torch.full((2, 3), -1.0, dtype=torch.float64)
    logprobs = ref + torch.tensor([[0.0, LOG2, -LOG2], [0.0, LOG2, 0.0]], dtype=torch.float64)
    mask = torch.tensor([[False, True, True], [False, True, False]])
    out = policy_loss(
        LossInputs(
            logprobs=logprobs,
            behaviour_logprobs=logprobs,
            advantages=torch.zeros(2, 3, dtype=torch.float64),
            response_mask=mask,
            global_num_tokens=0,
            global_num_sequences=0,
            ref_logprobs=ref,
            term_rows={"rehearsal": TermRows(torch.tensor([True, True]), 3, 2)},
        ),
        aggregation="sequence_mean",
        terms=(Rehearsal(coef=1.0),),
    )
    expected = ((_k3(2) + _k3(0.5)) / 2 + _k3(2)) / 2
    assert out.loss.item() == pytest.approx(expected, abs=TOL)
    assert out.metrics["train/policy_loss"] == 0.0


def test_the_term_equals_the_reference_codes_forward_kl_on_a_fixed_input() -> None:
    # seamoke/DPH-RL dp_actor.py, sft_loss_mode "forward": kl_penalty(logprob=π₀'s log-probs,
    # ref_logprob=π_θ's, "low_var_kl") = verl's k3: kl = ref_logprob - logprob, ratio = e^kl,
    # kld = clamp(ratio - kl - 1, -10, 10); then agg_loss(token-mean over the response mask)
    # times sft_loss_coeff.
    generator = torch.Generator().manual_seed(3)
    theta = (torch.randn(3, 7, generator=generator, dtype=torch.float64) - 2).requires_grad_()
    base = torch.randn(3, 7, generator=generator, dtype=torch.float64) - 2
    mask = torch.rand(3, 7, generator=generator) < 0.7
    mask[:, 0] = False
    coeff = 0.05

    kl = theta - base
    reference = coeff * ((torch.exp(kl) - kl - 1).clamp(-10, 10) * mask).sum() / mask.sum()
    expected_grad = _grad(reference, theta)

    out = policy_loss(
        LossInputs(
            logprobs=theta,
            behaviour_logprobs=theta.detach(),
            advantages=torch.zeros(3, 7, dtype=torch.float64),
            response_mask=mask,
            global_num_tokens=0,
            global_num_sequences=0,
            ref_logprobs=base,
            term_rows={
                "rehearsal": TermRows(torch.ones(3, dtype=torch.bool), float(mask.sum()), 3.0)
            },
        ),
        terms=(Rehearsal(coef=coeff),),
    )
    torch.testing.assert_close(out.loss, reference)
    torch.testing.assert_close(_grad(out.loss, theta), expected_grad)


@pytest.mark.parametrize("aggregation", ["token_mean", "sequence_mean", "sequence_sum"])
def test_shards_sum_to_the_whole_batch_with_rehearsal_rows(aggregation: str) -> None:
    generator = torch.Generator().manual_seed(11)
    b, t = 6, 8
    behaviour = torch.randn(b, t, generator=generator, dtype=torch.float64) - 2
    logprobs = behaviour + 0.2 * torch.randn(b, t, generator=generator, dtype=torch.float64)
    logprobs.requires_grad_(True)
    ref = behaviour + 0.3 * torch.randn(b, t, generator=generator, dtype=torch.float64)
    advantages = torch.randn(b, 1, generator=generator, dtype=torch.float64).expand(b, t)
    lengths = torch.tensor([7, 3, 5, 6, 2, 4])
    mask = (torch.arange(t) >= 1) & (torch.arange(t) <= lengths[:, None])
    rehearsal = torch.tensor([False, True, False, True, False, True])

    def loss_of(rows: list[int]) -> tuple[torch.Tensor, dict[str, float]]:
        own = TermRows(rehearsal[rows], float(mask[rehearsal].sum()), float(rehearsal.sum()))
        out = policy_loss(
            LossInputs(
                logprobs=logprobs[rows],
                behaviour_logprobs=behaviour[rows],
                advantages=advantages[rows],
                response_mask=mask[rows],
                global_num_tokens=float(mask[~rehearsal].sum()),
                global_num_sequences=float((~rehearsal).sum()),
                ref_logprobs=ref[rows],
                term_rows={"rehearsal": own},
            ),
            aggregation=aggregation,  # type: ignore[arg-type]
            terms=(KLAnchor(coef=0.05), Rehearsal(coef=0.03)),
        )
        return out.loss, out.metrics

    whole, whole_metrics = loss_of(list(range(b)))
    # Shards with rehearsal rows only, RL rows only, and both.
    parts = [loss_of(rows) for rows in ([1, 5], [0, 4], [2, 3])]
    total = sum(loss for loss, _ in parts)
    torch.testing.assert_close(total, whole)
    torch.testing.assert_close(_grad(total, logprobs), _grad(whole, logprobs))
    for key in ("train/rehearsal_kl", "train/kl", "train/policy_loss"):
        assert sum(m.get(key, 0.0) for _, m in parts) == pytest.approx(whole_metrics[key])


def test_rehearsal_inputs_are_checked() -> None:
    x = torch.zeros(2, 3, dtype=torch.float64)
    mask = torch.tensor([[False, True, True], [False, True, True]])
    rows = TermRows(torch.tensor([False, True]), 2, 1)
    base = LossInputs(
        logprobs=x,
        behaviour_logprobs=x,
        advantages=x,
        response_mask=mask,
        global_num_tokens=2,
        global_num_sequences=1,
        term_rows={"rehearsal": rows},
    )
    terms = (Rehearsal(coef=0.02),)
    with pytest.raises(ValueError, match="the rehearsal term needs ref_logprobs"):
        policy_loss(base, terms=terms)
    with_ref = dataclasses.replace(base, ref_logprobs=x)
    with pytest.raises(ValueError, match="whole-batch token count is 0"):
        policy_loss(
            dataclasses.replace(with_ref, term_rows={"rehearsal": TermRows(rows.rows, 0, 1)}),
            terms=terms,
        )
    with pytest.raises(ValueError, match="one flag per row"):
        wrong = TermRows(torch.tensor([True]), 2, 1)
        policy_loss(dataclasses.replace(with_ref, term_rows={"rehearsal": wrong}), terms=terms)
    with pytest.raises(ValueError, match="no such term is given"):
        policy_loss(with_ref)  # rows of a term the loss was not given
    with pytest.raises(ValueError, match="must be > 0"):
        none = TermRows(torch.tensor([False, False]), 0, 0)
        policy_loss(
            dataclasses.replace(
                with_ref,
                global_num_tokens=0,
                global_num_sequences=0,
                term_rows={"rehearsal": none},
            ),
            terms=terms,
        )
    with pytest.raises(ValueError, match="rehearsal_coef must be >= 0"):
        Rehearsal(coef=-0.1)
