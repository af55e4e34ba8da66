"""Fixtures for the estimator-core tests: a small tabular softmax bandit."""

from __future__ import annotations

import numpy as np
import pytest

from ._bandit import Bandit


@pytest.fixture(scope="session")
def bandit() -> Bandit:
    """3 prompts × 4 actions; pass rates ≈ 0.128, 0.472, 0.711 (hard, balanced, easy)."""
    logits = np.array([[-0.2, 0.9, 0.4, 0.5], [0.6, -0.3, 0.5, 0.2], [0.8, 0.3, 0.6, -0.1]])
    rewards = np.array([[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 0, 1]], dtype=np.float64)
    return Bandit(logits=logits, rewards=rewards)
