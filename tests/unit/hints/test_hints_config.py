"""HintsConfig validation names the key and the fix."""

from __future__ import annotations

import dataclasses

import pytest

from adarl.config.hints import HintsConfig


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"schedule": "always"}, "hints.schedule"),
        ({"source": "oracle"}, "hints.source"),
        ({"fallback": "random"}, "hints.fallback"),
        ({"retries": -1}, "hints.retries"),
        ({"temperature": -0.5}, "hints.temperature"),
        ({"max_hint_tokens": 0}, "hints.max_hint_tokens"),
        ({"prompt_template": "hint:{prompt}"}, "lacks {solution}"),
        ({"show_template": "[h]"}, "lacks {hint}"),
        ({"source": "model"}, "needs hints.model"),
        ({"model": "/dir"}, "hints.source=model to use it"),
        ({"up_threshold": 0.5, "down_threshold": 0.2}, "up_threshold <= down_threshold"),
        ({"collapse_after_samples": 0}, "collapse_after_samples"),
        ({"max_extra_rollouts_fraction": 0.0}, "max_extra_rollouts_fraction"),
        ({"write_ahead_min_collapse_probability": 1.5}, "write_ahead_min_collapse_probability"),
        ({"write_ahead": True}, "no hints to write"),
        ({"write_ahead": True, "schedule": "sage", "source": "template"}, "nothing to write"),
    ],
)
def test_bad_values_fail_with_the_key(change: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("{", r"\{").replace("}", r"\}")):
        dataclasses.replace(HintsConfig(), **change).validate()


def test_the_defaults_and_a_model_source_validate() -> None:
    HintsConfig().validate()
    HintsConfig(schedule="sage_light", source="model", model="/some/hint-model").validate()
