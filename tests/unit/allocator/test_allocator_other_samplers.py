"""uniform, dynamic_filter, ada_est and gvm samplers on synthetic reward streams."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from _allocator_streams import StreamDriver, no_history

from adarl.algo.allocation import ada_est_allocation, gvm_allocation
from adarl.allocator.samplers.base import PromptHistory, PromptStatus, StepBudget, derive_seed
from adarl.allocator.samplers.dynamic_filter import DynamicFilterSampler
from adarl.allocator.samplers.estimation import AdaEstSampler, GvmSampler
from adarl.allocator.samplers.uniform import UniformSampler


def test_uniform_draws_n_once_per_prompt() -> None:
    streams = {"a": [1, 0, 0], "b": [0, 0, 0]}
    sampler = UniformSampler(samples_per_prompt=3)
    driver = StreamDriver(streams)
    driver.run_step(sampler)
    assert [(d.prompt_id, d.num_samples) for d in driver.log] == [("a", 3), ("b", 3)]
    assert sampler.verdict("a") is sampler.verdict("b") is PromptStatus.RESOLVED
    assert sampler.target_groups() is None and sampler.needs_prompts() == 0


def test_uniform_budget_trims_then_skips() -> None:
    sampler = UniformSampler(samples_per_prompt=4, max_samples_per_step=6)
    sampler.start_step(0, ["a", "b", "c"], no_history("abc"))
    assert [(d.prompt_id, d.num_samples) for d in sampler.next()] == [("a", 4), ("b", 2)]
    assert sampler.verdict("c") is PromptStatus.UNRESOLVED


def test_step_budget_grants_never_exceed_the_cap() -> None:
    budget = StepBudget(10)
    assert [budget.grant(4), budget.grant(4), budget.grant(4), budget.grant(1)] == [4, 4, 2, 0]
    assert budget.exhausted and budget.used == 10
    assert StepBudget(None).grant(10**9) == 10**9


def test_derive_seed_is_stable_and_distinct() -> None:
    assert derive_seed(0, 1, "p", 2) == derive_seed(0, 1, "p", 2)
    seeds = {
        derive_seed(0, step, pid, draw) for step in range(5) for pid in "abc" for draw in range(4)
    }
    assert len(seeds) == 60
    assert 0 <= derive_seed("x") < 2**63


class TestDynamicFilter:
    def make(self, **kw) -> DynamicFilterSampler:
        args = dict(samples_per_prompt=4, target_groups=3, max_samples_per_step=40)
        return DynamicFilterSampler(**{**args, **kw})

    def test_keeps_mixed_groups_and_asks_for_more(self) -> None:
        sampler = self.make()
        sampler.start_step(0, ["a", "b", "c"], no_history("abc"))
        draws = sampler.next()
        sampler.observe("a", [1, 0, 0, 0])  # mixed: kept
        sampler.observe("b", [0, 0, 0, 0])  # all equal: filtered
        sampler.observe("c", [1, 1, 1, 1])  # all equal: filtered
        assert len(draws) == 3
        assert [sampler.verdict(p) for p in "abc"] == [
            PromptStatus.RESOLVED,
            PromptStatus.FILTERED,
            PromptStatus.FILTERED,
        ]
        # 2 groups missing; measured keep rate (1 + 1)/(3 + 2) = 0.4: ask for ⌈2/0.4⌉ = 5.
        assert sampler.needs_prompts() == 5
        assert not sampler.done()
        sampler.add_prompts([], {})  # the source is empty: the step ends with what it has
        assert sampler.needs_prompts() == 0 and sampler.done()

    def test_in_flight_prompts_count_towards_the_target(self) -> None:
        sampler = self.make(target_groups=4)
        sampler.start_step(0, ["a", "b"], no_history("ab"))
        # nothing finished yet: keep rate (0 + 1)/(0 + 2) = 0.5; 2 in flight are worth 1 group
        # so ⌈(4 - 1)/0.5⌉ = 6 more.
        assert sampler.needs_prompts() == 6

    def test_budget_limits_the_refill_and_the_step_ends(self) -> None:
        sampler = self.make(max_samples_per_step=12)
        sampler.start_step(0, ["a", "b"], no_history("ab"))
        sampler.next()
        assert sampler.needs_prompts() == 1  # 12 - 8 = 4 samples left: one more prompt
        sampler.add_prompts(["c"], no_history("c"))
        sampler.next()
        for pid in "abc":
            sampler.observe(pid, [0, 0, 0, 0])
        assert sampler.needs_prompts() == 0 and sampler.done()
        assert sampler.metrics()["sampling/budget_exhausted"] == 1.0

    def test_pass_rate_band(self) -> None:
        sampler = self.make(min_pass_rate=0.3, max_pass_rate=0.7)
        sampler.start_step(0, ["a", "b"], no_history("ab"))
        sampler.next()
        sampler.observe("a", [1, 0, 0, 0])  # p̃ = 0.25: outside the band
        sampler.observe("b", [1, 1, 0, 0])  # p̃ = 0.5
        assert sampler.verdict("a") is PromptStatus.FILTERED
        assert sampler.verdict("b") is PromptStatus.RESOLVED

    def test_carried_groups_reduce_the_need(self) -> None:
        sampler = self.make(target_groups=3)
        sampler.start_step(0, ["a"], no_history("a"), carried_groups=3)
        sampler.next()
        assert sampler.needs_prompts() == 0

    def test_keep_rate_persists_through_state_dict(self) -> None:
        sampler = self.make()
        sampler.start_step(0, ["a", "b"], no_history("ab"))
        sampler.next()
        sampler.observe("a", [1, 0, 0, 0])
        restored = self.make()
        restored.load_state_dict(pickle.loads(pickle.dumps(sampler.state_dict())))
        assert restored.keep_rate() == sampler.keep_rate() == 2 / 3
        assert restored.needs_prompts() == sampler.needs_prompts()
        restored.observe("b", [0, 1, 0, 0])
        assert restored.verdict("b") is PromptStatus.RESOLVED


def test_ada_est_allocates_by_estimated_pass_rate() -> None:
    """Prompts seen recently are allocated from their EMA at once, with no pilot."""
    sampler = AdaEstSampler(
        mean_samples_per_prompt=4, min_samples_per_prompt=2, max_samples_per_prompt=16, epsilon=0.05
    )
    history = {
        pid: PromptHistory(pass_rate=p, samples=10, grad_norm=None, last_step=4)
        for pid, p in {"hard": 0.05, "mid": 0.5, "easy": 0.95}.items()
    }
    sampler.start_step(5, list(history), history)
    counts = {d.prompt_id: d.num_samples for d in sampler.next()}
    expected = ada_est_allocation(
        np.array([0.05, 0.5, 0.95]), budget=12, eps=0.05, min_samples=2, max_samples=16
    )
    assert [counts[p] for p in history] == list(expected)
    assert counts["hard"] > counts["mid"] > counts["easy"]
    assert all(sampler.pilot_samples(pid) == 0 for pid in history)
    assert sampler.pass_rate_estimate("hard") == 0.05
    for pid, n in counts.items():
        sampler.observe(pid, [0.0] * n)
    assert sampler.done()
    assert sampler.metrics()["sampling/estimate_age_mean_steps"] == 1.0


def test_ada_est_pilots_unseen_and_stale_prompts_within_the_budget() -> None:
    """An unseen prompt (and one last seen more than max_age_steps ago) gets a pilot of 2 first;
    p̂ = (positives + α)/(2 + α + β); the pilot is paid from the step's budget of 4 × 3."""
    sampler = AdaEstSampler(
        mean_samples_per_prompt=4,
        min_samples_per_prompt=1,
        max_samples_per_prompt=16,
        epsilon=0.05,
        pilot_samples=2,
        max_age_steps=50,
    )
    history = {
        "new": PromptHistory(pass_rate=0.5, samples=0, grad_norm=None),
        "stale": PromptHistory(pass_rate=0.9, samples=40, grad_norm=None, last_step=10),
        "seen": PromptHistory(pass_rate=0.2, samples=40, grad_norm=None, last_step=99),
    }
    sampler.start_step(100, list(history), history)
    pilot = {d.prompt_id: d.num_samples for d in sampler.next()}
    assert pilot == {"new": 2, "stale": 2}  # "seen" waits for the allocation
    sampler.observe("new", [1.0, 0.0])
    assert sampler.next() == []  # the allocation waits for every pilot
    sampler.observe("stale", [0.0, 0.0])
    estimates = {pid: sampler.pass_rate_estimate(pid) for pid in history}
    assert estimates == {"new": 2 / 4, "stale": 1 / 4, "seen": 0.2}
    second = {d.prompt_id: d.num_samples for d in sampler.next()}
    expected = ada_est_allocation(
        np.array([0.5, 0.25, 0.2]), budget=12 - 4, eps=0.05, min_samples=1, max_samples=16
    )
    assert [second[p] for p in history] == list(expected)
    assert (sampler.pilot_samples("new"), sampler.pilot_samples("seen")) == (2, 0)
    for pid, n in second.items():
        sampler.observe(pid, [0.0] * n)
    assert sampler.done()
    metrics = sampler.metrics()
    assert metrics["sampling/pilot_samples"] == 4 and metrics["sampling/budget_used"] == 12


def test_gvm_pilots_then_asks_for_gradient_norms_then_allocates() -> None:
    streams = {"a": [1, 0, 0, 0] + [0] * 20, "b": [1, 1, 1, 0] + [0] * 20, "c": [0] * 24}
    sampler = GvmSampler(
        presamples=4, mean_samples_per_prompt=4, min_samples_per_prompt=0, max_samples_per_prompt=20
    )
    sampler.start_step(0, list(streams), no_history(streams))
    driver = StreamDriver(streams)
    first = sampler.next()
    assert [d.num_samples for d in first] == [4, 4, 4]
    for d in first[:2]:
        sampler.observe(d.prompt_id, driver.answer(d))
    assert sampler.statistics_wanted() == [] and sampler.next() == []  # waits for the pilot
    sampler.observe("c", driver.answer(first[2]))
    # G_i is asked for this step's pilot, for the prompts with an accepted pilot sample only.
    assert sampler.statistics_wanted() == ["a", "b"]
    assert sampler.next() == []
    sampler.observe_statistics({"a": 2.0, "b": 1.5})
    second = {d.prompt_id: d.num_samples for d in sampler.next()}
    expected = gvm_allocation(
        np.array([2.0, 1.5, 0.0]),
        np.array([0.25, 0.75, 0.0]),
        budget=12,
        min_samples=0,
        max_samples=16,
    )
    assert second == {p: int(n) for p, n in zip("abc", expected, strict=True) if n}
    assert "c" not in second and sampler.verdict("c") is PromptStatus.UNRESOLVED  # nothing to train
    assert sampler.pilot_samples("a") == 4 and sampler.pass_rate_estimate("b") == 0.75
    for pid, n in second.items():
        sampler.observe(pid, [0.0] * n)
    assert sampler.done()


def test_estimation_samplers_take_no_prompts_mid_step() -> None:
    sampler = AdaEstSampler(
        mean_samples_per_prompt=4, min_samples_per_prompt=1, max_samples_per_prompt=8, epsilon=0.1
    )
    sampler.start_step(0, ["a"], no_history("a"))
    sampler.add_prompts([], {})
    with pytest.raises(ValueError, match="no prompts mid-step"):
        sampler.add_prompts(["b"], no_history("b"))
