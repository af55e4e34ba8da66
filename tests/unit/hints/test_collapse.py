"""The collapse rule: no positive after `collapse_after_samples` samples of one condition."""

from __future__ import annotations

import pytest

from adarl.config.hints import HintsConfig
from adarl.hints.collapse import CollapseRule, build_collapse_rule


def test_collapsed_once_k_samples_hold_no_positive() -> None:
    rule = build_collapse_rule(HintsConfig(collapse_after_samples=4))
    assert rule == CollapseRule(after_samples=4)
    assert not rule.collapsed(samples=3, positives=0)  # too few samples to judge
    assert rule.collapsed(samples=4, positives=0)
    assert rule.collapsed(samples=9, positives=0)
    assert not rule.collapsed(samples=9, positives=1)  # the gate is open


def test_bad_counts_and_settings_are_named() -> None:
    with pytest.raises(ValueError, match="positives"):
        CollapseRule(after_samples=2).collapsed(samples=2, positives=3)
    with pytest.raises(ValueError, match="after_samples"):
        CollapseRule(after_samples=0)
    with pytest.raises(ValueError, match="collapse_after_samples"):
        build_collapse_rule(HintsConfig(collapse_after_samples=0))
