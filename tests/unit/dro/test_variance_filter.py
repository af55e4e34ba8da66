"""The DRO variance filter around a real sampler, on hand-made pool statistics: which prompts it
ranks lowest, what it filters now, what it skips later and replaces, what it carries forward."""

from __future__ import annotations

import pickle

import pytest

from adarl.allocator.samplers.base import PoolStatisticsObserver, PromptHistory, PromptStatus
from adarl.allocator.samplers.uniform import UniformSampler
from adarl.allocator.variance_filter import VarianceFilter, build_variance_filter
from adarl.config.dro import DroFilterConfig


def _history(pids: list[str]) -> dict[str, PromptHistory]:
    return {pid: PromptHistory(pass_rate=0.5, samples=0, grad_norm=None) for pid in pids}


def _filter(**kwargs) -> VarianceFilter:
    settings = {"drop_fraction": 0.4, "interval_steps": 1, "carry_forward_fraction": 0.5}
    return VarianceFilter(UniformSampler(samples_per_prompt=2), **(settings | kwargs))


def _sample(sampler: VarianceFilter, rewards: float = 1.0) -> list[str]:
    """Answer every draw; returns the prompts drawn."""
    drawn = []
    for draw in sampler.next():
        sampler.observe(draw.prompt_id, [rewards] * draw.num_samples)
        drawn.append(draw.prompt_id)
    return drawn


def _stats(table: dict[str, tuple[float, bool]]) -> dict[str, dict[str, float]]:
    return {
        pid: {"max_deviation": dev, "reaches_top_k": float(ok)} for pid, (dev, ok) in table.items()
    }


def test_an_application_drops_the_lowest_fraction_and_the_top_k_failures() -> None:
    sampler = _filter()
    assert isinstance(sampler, PoolStatisticsObserver)
    pids = ["a", "b", "c", "d", "e"]
    sampler.start_step(1, pids, _history(pids))
    assert sorted(_sample(sampler)) == pids and sampler.done()
    # ⌊0.4·5⌋ = 2 lowest deviations: d (0.05), b (0.1); e never reached the top k.
    sampler.observe_pool_statistics(
        _stats(
            {
                "a": (0.3, True),
                "b": (0.1, True),
                "c": (0.2, True),
                "d": (0.05, True),
                "e": (0.5, False),
            }
        )
    )
    verdicts = {pid: sampler.verdict(pid) for pid in sampler.prompt_ids()}
    assert verdicts == {
        "a": PromptStatus.RESOLVED,
        "b": PromptStatus.FILTERED,
        "c": PromptStatus.RESOLVED,
        "d": PromptStatus.FILTERED,
        "e": PromptStatus.FILTERED,
    }
    assert sampler.dropped == {"b": 0.1, "d": 0.05, "e": 0.5}
    metrics = sampler.metrics()
    assert metrics["signal/variance_filter_fraction"] == pytest.approx(3 / 5)
    assert metrics["signal/variance_filter_dropped_now"] == 3.0
    assert metrics["signal/variance_filter_top_k_failures"] == 1.0
    assert metrics["sampling/budget_used"] == 10.0  # the uniform sampler's own metrics pass on


def test_dropped_prompts_are_skipped_replaced_and_carried_forward() -> None:
    sampler = _filter()
    sampler.dropped = {"b": 0.1, "d": 0.05, "e": 0.5}
    sampler.steps_since_application = 0
    # The source serves b (dropped) and f: b is skipped undrawn and one replacement is asked for.
    sampler.start_step(2, ["b", "f"], _history(["b", "f"]))
    assert sampler.verdict("b") is PromptStatus.FILTERED
    assert _sample(sampler) == ["f"]
    assert sampler.needs_prompts() == 1 and not sampler.done()
    sampler.add_prompts(["g"], _history(["g"]))
    assert _sample(sampler) == ["g"]
    assert sampler.needs_prompts() == 0 and sampler.done()
    assert sampler.prompt_ids() == ["b", "f", "g"]
    # Interval 1: this step applies. ⌊0.4·2⌋ = 0 new drops by deviation. The old drop set sorted
    # by deviation is d (0.05), b (0.1), e (0.5): ⌊0.5·3⌋ = 1 carried (d), b and e re-admitted.
    sampler.observe_pool_statistics(_stats({"f": (0.3, True), "g": (0.2, True)}))
    assert sampler.dropped == {"d": 0.05}
    assert sampler.verdict("f") is PromptStatus.RESOLVED
    metrics = sampler.metrics()
    assert metrics["signal/variance_filter_skipped_prompts"] == 1.0
    assert metrics["signal/variance_filter_released"] == 2.0
    assert metrics["signal/variance_filter_fraction"] == pytest.approx(1 / 3)


def test_one_replacement_round_per_step() -> None:
    """A replacement that is itself dropped is replaced too, but a step asks for at most as many
    replacements as it started with prompts, so it never scans the whole source."""
    sampler = _filter()
    sampler.dropped = {p: 0.0 for p in ("a", "b", "c")}
    sampler.steps_since_application = 0
    sampler.start_step(1, ["a", "y"], _history(["a", "y"]))  # 2 prompts: up to 2 replacements
    assert sampler.needs_prompts() == 1
    sampler.add_prompts(["b"], _history(["b"]))  # skipped: the 2nd replacement is asked for
    assert sampler.needs_prompts() == 1
    sampler.add_prompts(["c"], _history(["c"]))  # skipped: the round is spent
    assert sampler.needs_prompts() == 0
    assert _sample(sampler) == ["y"] and sampler.done()
    assert sampler.metrics()["signal/variance_filter_skipped_prompts"] == 3.0


def test_an_empty_refill_ends_the_replacements() -> None:
    sampler = _filter()
    sampler.dropped = {"a": 0.0}
    sampler.steps_since_application = 0
    sampler.start_step(1, ["a", "b"], _history(["a", "b"]))
    _sample(sampler)
    assert sampler.needs_prompts() == 1
    sampler.add_prompts([], {})  # the source has nothing left
    assert sampler.needs_prompts() == 0 and sampler.done()


def test_between_applications_measured_prompts_are_trained_and_ranked_later() -> None:
    sampler = _filter(interval_steps=2, drop_fraction=0.5)
    sampler.start_step(1, ["a", "b"], _history(["a", "b"]))
    _sample(sampler)
    sampler.observe_pool_statistics(_stats({"a": (0.4, True), "b": (0.1, True)}))  # applies
    assert sampler.dropped == {"b": 0.1} and sampler.verdict("b") is PromptStatus.FILTERED
    # Step 2: not due (1 step since). c has the lowest deviation yet is trained now.
    sampler.start_step(2, ["c", "d"], _history(["c", "d"]))
    _sample(sampler)
    sampler.observe_pool_statistics(_stats({"c": (0.0, True), "d": (0.9, True)}))
    assert sampler.verdict("c") is PromptStatus.RESOLVED
    assert sampler.metrics()["signal/variance_filter_applied"] == 0.0
    # Step 3 applies over the window {c, d, e, f}: ⌊0.5·4⌋ = 2 lowest: c (0.0), e (0.2).
    sampler.start_step(3, ["e", "f"], _history(["e", "f"]))
    _sample(sampler)
    sampler.observe_pool_statistics(_stats({"e": (0.2, True), "f": (0.3, True)}))
    assert sampler.verdict("e") is PromptStatus.FILTERED  # measured now: filtered now
    assert sampler.verdict("f") is PromptStatus.RESOLVED
    # b was the whole old drop set: ⌊0.5·1⌋ = 0 carried.
    assert sampler.dropped == {"c": 0.0, "e": 0.2}


def test_resume_mid_step_continues_exactly() -> None:
    sampler = _filter()
    sampler.dropped = {"a": 0.0}
    sampler.steps_since_application = 0
    sampler.start_step(1, ["a", "b", "c"], _history(["a", "b", "c"]))
    restored = _filter()
    restored.load_state_dict(pickle.loads(pickle.dumps(sampler.state_dict())))
    for s in (sampler, restored):
        _sample(s, rewards=0.0)
        s.add_prompts(["d"], _history(["d"]))
        _sample(s, rewards=1.0)
        s.observe_pool_statistics(_stats({"b": (0.1, True), "c": (0.3, True), "d": (0.2, False)}))
    assert restored.state_dict() == sampler.state_dict()
    assert restored.metrics() == sampler.metrics()
    assert {p: restored.verdict(p) for p in "abcd"} == {p: sampler.verdict(p) for p in "abcd"}


def test_the_wrapper_pickles_and_forwards_the_inner_samplers_protocol() -> None:
    sampler = pickle.loads(pickle.dumps(_filter()))  # a Ray actor receives it pickled
    assert sampler.name == "variance_filter(uniform)"
    assert sampler.target_groups() is None and sampler.sequential_law() is None
    with pytest.raises(AttributeError):
        _ = sampler.no_such_method


def test_the_builder_wraps_only_when_enabled_and_refuses_bad_values() -> None:
    inner = UniformSampler(samples_per_prompt=2)
    assert build_variance_filter(DroFilterConfig(enabled=False), inner) is inner
    assert isinstance(build_variance_filter(DroFilterConfig(enabled=True), inner), VarianceFilter)
    with pytest.raises(ValueError, match=r"dro\.filter\.carry_forward_fraction=1\.0"):
        build_variance_filter(DroFilterConfig(enabled=True, carry_forward_fraction=1.0), inner)


def test_statistics_without_a_deviation_name_the_missing_stage() -> None:
    sampler = _filter()
    sampler.start_step(1, ["a"], _history(["a"]))
    _sample(sampler)
    with pytest.raises(ValueError, match="no 'max_deviation' statistic"):
        sampler.observe_pool_statistics({"a": {}})
