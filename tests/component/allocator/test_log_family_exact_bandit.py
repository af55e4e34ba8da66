"""The log family on `make run`'s update, through the real allocator, uniform sampler, group
builder, reward pool, the driver's rollout phase and the learner's loss at its first mini-batch
(`adarl.bench.bandit.measure`): the mean gradient is the declared weight times ∇p.

- MaxRL, A = (r - r̄)/r̄: w(p) = (1 - (1-p)^(n-1))/p, log p truncated at n - 1;
- RAFT with positives normalisation, A = n/K on positives: w(p) = (1 - (1-p)^n)/p.

Power, stated once: 4 pass rates × 128 prompts × 30 steps, a quarter of each step's prompts in
the first mini-batch: 960 prompt-steps per p, and the SE of the effective weight ≤ 6% of the
target at every p (asserted), so an 18% bias in the weight fails the 3-SE check. At n = 4 MaxRL's
weight is below RAFT-positives' by 21% at p = 0.1 and 29% at p = 0.5 (the ratio
(1 - (1-p)^3)/(1 - (1-p)^4)), and at p ≤ 0.5 each test tells the two truncations apart (asserted).
"""

from __future__ import annotations

import numpy as np
import pytest
from hydra import compose, initialize_config_dir

from adarl.bench.bandit import measure
from adarl.config import AllocatorConfig
from adarl.launch import CONFIG_DIR, load_config
from adarl.rollout.simulated import LatencyModel

PASS_RATES = (0.1, 0.25, 0.5, 0.75)


def _allocator(*overrides: str) -> AllocatorConfig:
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        config = compose(config_name="config", overrides=list(overrides))
    return load_config(config).allocator


@pytest.mark.slow
@pytest.mark.parametrize(
    ("overrides", "weight"),
    [
        (
            ("allocator.group.advantage=maxrl",),
            lambda p, n: (1 - (1 - p) ** (n - 1)) / p,
        ),
        (
            ("allocator.group.advantage=raft", "allocator.group.raft_normalization=positives"),
            lambda p, n: (1 - (1 - p) ** n) / p,
        ),
    ],
    ids=["maxrl", "raft_positives"],
)
def test_log_family_first_mini_batch_estimates_its_declared_weight(overrides, weight) -> None:
    """E[ĝ] = w(p)·∇p within 3 SE at every p, for the declared w, and not for the other
    member's w."""
    other = {
        "maxrl": lambda p, n: (1 - (1 - p) ** n) / p,
        "raft": lambda p, n: (1 - (1 - p) ** (n - 1)) / p,
    }[overrides[0].split("=")[1]]
    config = _allocator("+experiment=grpo_anchored", *overrides)
    n = config.uniform_samples_per_prompt
    checks = measure(
        config,
        pass_rates=PASS_RATES,
        prompts_per_rate=128,
        steps=30,
        latency=LatencyModel(engines=1, slots=256),
        seed=11,
        mini_batches=4,
    )
    for check in checks:
        target = weight(check.p, n)
        assert check.trials == 128 // 4 * 30
        assert check.implied_weight == pytest.approx(target, rel=1e-9)  # declared = closed form
        assert check.se_effective_weight <= 0.06 * target, check  # the test's power
        assert abs(check.effective_weight - target) <= 3 * check.se_effective_weight, check
        assert np.all(np.abs(check.z_scores) <= 3), check
        assert check.samples_drawn == n
        if check.p <= 0.5:  # at p = 0.75 the two weights differ by 0.3% only
            wrong = other(check.p, n)
            assert abs(check.effective_weight - wrong) > 3 * check.se_effective_weight, check
