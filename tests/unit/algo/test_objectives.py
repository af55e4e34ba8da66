"""Objectives: f, w = f' (checked by autograd), registry errors, clipping and smoothing."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from adarl.algo.objectives import (
    OBJECTIVES,
    beta_smoothed_pass_rate,
    clip_pass_rate,
    get_objective,
    objective_value,
    objective_weight,
    power_objective,
    selection_weight,
)

P_GRID = np.array([0.01, 0.1, 0.3, 0.5, 0.7, 0.9, 0.99])


@pytest.mark.parametrize("name", list(OBJECTIVES))
def test_weight_is_the_derivative_of_f(name: str) -> None:
    objective = get_objective(name, alpha=0.3)
    p = torch.tensor(P_GRID, dtype=torch.float64, requires_grad=True)
    (grad,) = torch.autograd.grad(objective.f(p).sum(), p)
    np.testing.assert_allclose(grad.numpy(), objective.w(P_GRID), rtol=1e-12)


def test_closed_forms() -> None:
    p = P_GRID
    np.testing.assert_allclose(objective_weight(p, objective="linear"), np.ones_like(p))
    np.testing.assert_allclose(objective_weight(p, objective="log"), 1 / p)
    np.testing.assert_allclose(objective_weight(p, objective="arcsin"), 1 / np.sqrt(p * (1 - p)))
    np.testing.assert_allclose(objective_weight(p, objective="power", alpha=0.25), 0.25 * p**-0.75)
    np.testing.assert_allclose(objective_weight(p, objective="logit"), 1 / p + 1 / (1 - p))
    # logit = log p + (-log(1 - p)): the coverage term and the accuracy term; 0 at p = 1/2.
    assert objective_value(0.5, objective="logit") == 0.0
    # 2 arcsin √(1/2) = π/2; log 1 = 0.
    assert objective_value(0.5, objective="arcsin") == pytest.approx(np.pi / 2)
    assert objective_value(1.0, objective="log") == 0.0
    assert objective_value(np.array([0.2]), objective="linear").dtype == np.float64


def test_unknown_objective_lists_valid_names() -> None:
    with pytest.raises(ValueError, match="linear, log, arcsin, logit, power"):
        get_objective("probit")
    with pytest.raises(ValueError, match="alpha > 0"):
        power_objective(0.0)


def test_clip_and_beta_smoothing() -> None:
    np.testing.assert_array_equal(
        clip_pass_rate(np.array([0.0, 0.5, 1.0]), delta=0.01), [0.01, 0.5, 0.99]
    )
    with pytest.raises(ValueError, match="delta"):
        clip_pass_rate(0.3, delta=0.5)
    # (k + a)/(N + a + b): (0+1)/(8+2) = 0.1, (8+1)/(8+2) = 0.9.
    np.testing.assert_allclose(
        beta_smoothed_pass_rate(np.array([0, 8]), np.array([8, 8]), a=1.0, b=1.0), [0.1, 0.9]
    )
    with pytest.raises(ValueError, match="positives"):
        beta_smoothed_pass_rate(3, 2, a=1.0, b=1.0)


@pytest.mark.parametrize("name", list(OBJECTIVES))
def test_selection_weight_is_w_times_bernoulli_variance(name: str) -> None:
    p = P_GRID
    expected = objective_weight(p, objective=name, alpha=0.3) * p * (1 - p)
    np.testing.assert_allclose(selection_weight(p, objective=name, alpha=0.3), expected)
    ends = selection_weight(np.array([0.0, 1.0]), objective=name, alpha=0.3)
    assert np.all(np.isfinite(ends))  # no clipping needed at the ends
