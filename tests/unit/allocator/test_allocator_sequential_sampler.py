"""The Seq-Pos / Seq-Balance state machine on hand-written reward streams."""

from __future__ import annotations

import math
import pickle
import random

import pytest
from _allocator_streams import StreamDriver, no_history
from hypothesis import given, settings
from hypothesis import strategies as st

from adarl.algo.drawing import DrawRule
from adarl.algo.stopping import StoppingRule
from adarl.allocator.samplers.base import PromptHistory, PromptStatus
from adarl.allocator.samplers.sequential import SequentialSampler


def stop_index(stream: list[float], rule: StoppingRule) -> int | None:
    """Where the one-at-a-time rule stops on the stream (exit, cap or futility), 1-based."""
    return rule.stop_index([r > 0.5 for r in stream])


def test_balance_resolves_exactly_at_quotas_without_speculation() -> None:
    # max_overshoot_fraction=0: no draw may overshoot, so the stream is consumed exactly up to
    # the rule's stopping point. Stream "a": exit at 5 (1,1,1,0,0).
    streams = {"a": [1, 1, 1, 0, 0, 1, 1], "b": [0, 0, 0, 0, 1, 0, 1, 0], "c": [0] * 10}
    sampler = SequentialSampler(
        k_pos=2, k_neg=2, max_samples_per_prompt=10, max_overshoot_fraction=0
    )
    driver = StreamDriver(streams)
    driver.run_step(sampler)
    assert sampler.verdict("a") is PromptStatus.RESOLVED
    assert sampler.verdict("b") is PromptStatus.RESOLVED
    assert sampler.verdict("c") is PromptStatus.UNRESOLVED
    assert driver.served["a"] == 5  # (2 pos after 2, need 2 neg: draws 4 then 1)
    assert driver.served["b"] == 7  # b: 4 neg, then 1 pos at 5, 2nd pos at 7
    # c: 10 negatives are never mixed: it samples to the cap (one more sample could open its
    # gate), in draws of the 2 missing positives.
    assert driver.served["c"] == 10
    draws_c = [d.num_samples for d in driver.log if d.prompt_id == "c"]
    assert draws_c == [4, 2, 2, 2]


def test_seq_pos_is_k_positives() -> None:
    streams = {"a": [0, 0, 1, 0, 1, 1], "b": [0] * 8}
    sampler = SequentialSampler(
        k_pos=2, k_neg=0, max_samples_per_prompt=8, max_overshoot_fraction=0
    )
    assert sampler.name == "seq_pos"
    driver = StreamDriver(streams)
    driver.run_step(sampler)
    assert driver.served["a"] == 5 and sampler.verdict("a") is PromptStatus.RESOLVED
    assert driver.served["b"] == 8 and sampler.verdict("b") is PromptStatus.UNRESOLVED


def test_futility_stops_mixed_pools_only() -> None:
    # Seq-Balance(3, 1), cap 5. "mixed": after 1 positive and 3 negatives the cap leaves 1
    # sample but 2 positives are missing, and the gate is already open: stop at 4.
    # "one_label": 4 negatives, same shortfall, but one more sample could open the gate: it
    # draws to the cap.
    sampler = SequentialSampler(
        k_pos=3, k_neg=1, max_samples_per_prompt=5, max_overshoot_fraction=0
    )
    driver = StreamDriver({"mixed": [1, 0, 0, 0, 1], "one_label": [0, 0, 0, 0, 1]})
    driver.run_step(sampler)
    assert driver.served == {"mixed": 4, "one_label": 5}
    assert sampler.verdict("mixed") is PromptStatus.UNRESOLVED
    assert sampler.verdict("one_label") is PromptStatus.UNRESOLVED


def test_streaming_dispatches_the_moment_a_result_returns() -> None:
    # No barrier: prompt "a" gets its second draw before "b" has returned its first.
    sampler = SequentialSampler(k_pos=2, k_neg=2, max_samples_per_prompt=32)
    sampler.start_step(0, ["a", "b"], no_history(["a", "b"]))
    first = sampler.next()
    assert {d.prompt_id for d in first} == {"a", "b"}
    sampler.observe("a", [0] * first[0].num_samples)
    follow_up = sampler.next()
    assert [d.prompt_id for d in follow_up] == ["a"]
    assert follow_up[0].index == 1


def test_draw_sizes_follow_the_draw_rule_and_history() -> None:
    # The sampler's draws are exactly DrawRule.chunk's, whatever the engines hold: a prompt
    # showing only negatives soon takes the rest of its cap; one seen hopeless in earlier steps
    # (EMA pseudo-counts 0/14) starts with a much larger draw.
    rule = StoppingRule(k_pos=2, k_neg=2, max_samples=32)
    draw = DrawRule(rule=rule, max_overshoot_fraction=0.03)  # the default
    expected, pos, neg = [], 0, 0
    while not rule.stops(pos, neg):
        expected.append(draw.chunk(positives=pos, negatives=neg))
        neg += expected[-1]
    sampler = SequentialSampler(k_pos=2, k_neg=2, max_samples_per_prompt=32)
    driver = StreamDriver({"a": [0] * 32})
    driver.run_step(sampler)
    assert [d.num_samples for d in driver.log] == expected
    assert len(expected) <= 4 and max(expected) > 8  # few waits: most of the tail at once

    seen = {"a": PromptHistory(pass_rate=0.06, samples=16, grad_norm=None, ema_negatives=14.0)}
    sampler = SequentialSampler(k_pos=2, k_neg=2, max_samples_per_prompt=32)
    sampler.start_step(0, ["a"], seen)
    first = draw.chunk(positives=0, negatives=0, history=(0.0, 14.0))
    assert [d.num_samples for d in sampler.next()] == [first]
    assert first >= 2 * expected[0]
    blind = SequentialSampler(k_pos=2, k_neg=2, max_samples_per_prompt=32, use_history=False)
    blind.start_step(0, ["a"], seen)
    assert [d.num_samples for d in blind.next()] == [expected[0]]


def test_rounds_mode_barrier_and_counts() -> None:
    # Reference rounds: 4 samples per round, 3 rounds; "a" resolves in round 1 (all 4 counted),
    # "b" in round 2, "c" never (12 samples).
    streams = {"a": [1, 1, 0, 0], "b": [0, 0, 0, 0, 1, 1, 0, 0], "c": [0] * 12}
    sampler = SequentialSampler(
        k_pos=2, k_neg=2, max_samples_per_prompt=12, mode="rounds", round_repeat=4, max_rounds=3
    )
    sampler.start_step(0, list(streams), no_history(streams))
    driver = StreamDriver(streams)
    round_1 = sampler.next()
    assert [d.num_samples for d in round_1] == [4, 4, 4]
    sampler.observe("a", driver.answer(round_1[0]))
    sampler.observe("b", driver.answer(round_1[1]))
    assert sampler.next() == []  # barrier: "c" is still out
    sampler.observe("c", driver.answer(round_1[2]))
    round_2 = sampler.next()
    assert [(d.prompt_id, d.index) for d in round_2] == [("b", 1), ("c", 1)]
    driver.log.extend(round_1 + round_2)
    for d in round_2:
        sampler.observe(d.prompt_id, driver.answer(d))
    driver.run_open(sampler)
    assert driver.served == {"a": 4, "b": 8, "c": 12}
    assert [sampler.verdict(p) for p in streams] == [
        PromptStatus.RESOLVED,
        PromptStatus.RESOLVED,
        PromptStatus.UNRESOLVED,
    ]
    assert sampler.metrics()["sampling/rounds"] == 3


def test_rounds_mode_rejects_inconsistent_cap() -> None:
    with pytest.raises(ValueError, match="round_repeat \\* max_rounds"):
        SequentialSampler(
            k_pos=2, k_neg=2, max_samples_per_prompt=10, mode="rounds", round_repeat=4, max_rounds=3
        )


def test_global_budget_stops_prompts_and_counts_them() -> None:
    streams = {p: [0] * 32 for p in "abcd"}
    sampler = SequentialSampler(
        k_pos=2, k_neg=2, max_samples_per_prompt=32, max_samples_per_step=30
    )
    driver = StreamDriver(streams)
    driver.run_step(sampler)
    assert sum(driver.served.values()) <= 30
    assert all(sampler.verdict(p) is PromptStatus.UNRESOLVED for p in streams)
    metrics = sampler.metrics()
    assert metrics["sampling/budget_used"] == sum(driver.served.values())
    assert metrics["sampling/unresolved_by_budget"] >= 1


@settings(max_examples=60, deadline=None)
@given(
    data=st.data(),
    k_pos=st.integers(0, 3),
    k_neg=st.integers(0, 3),
    cap=st.integers(6, 40),
    budget=st.one_of(st.none(), st.integers(0, 120)),
    epsilon=st.sampled_from([0.0, 0.05, 0.3, math.inf]),
    mode=st.sampled_from(["streaming", "rounds"]),
)
def test_invariants_on_random_streams(data, k_pos, k_neg, cap, budget, epsilon, mode) -> None:
    """Caps and the step budget are never exceeded; a prompt is resolved iff its stream meets the
    quotas within what was drawn; streaming prompts stop exactly where the one-at-a-time rule
    does, plus at most the last draw's overshoot."""
    if k_pos + k_neg == 0:
        k_pos = 1
    round_repeat, max_rounds = 1, 1
    if mode == "rounds":
        round_repeat = data.draw(st.integers(1, 8))
        max_rounds = data.draw(st.integers(1, 5))
        max_rounds = max(max_rounds, math.ceil((k_pos + k_neg) / round_repeat))
        cap = round_repeat * max_rounds
    assert cap >= k_pos + k_neg
    n_prompts = data.draw(st.integers(1, 6))
    streams = {
        f"p{i}": data.draw(st.lists(st.sampled_from([0.0, 1.0]), min_size=cap, max_size=cap))
        for i in range(n_prompts)
    }
    sampler = SequentialSampler(
        k_pos=k_pos,
        k_neg=k_neg,
        max_samples_per_prompt=cap,
        max_samples_per_step=budget,
        mode=mode,
        max_overshoot_fraction=epsilon,
        round_repeat=round_repeat,
        max_rounds=max_rounds,
    )
    driver = StreamDriver(streams, seed=data.draw(st.integers(0, 10)))
    driver.run_step(sampler)
    if budget is not None:
        assert sum(driver.served.values()) <= budget
    exit_rule = StoppingRule(k_pos=k_pos, k_neg=k_neg, max_samples=cap, futility=False)
    rule = StoppingRule(k_pos=k_pos, k_neg=k_neg, max_samples=cap)
    for pid, stream in streams.items():
        drawn = driver.served[pid]
        assert drawn <= cap
        positives = sum(stream[:drawn])
        resolved = positives >= k_pos and drawn - positives >= k_neg
        verdict = sampler.verdict(pid)
        assert verdict is (PromptStatus.RESOLVED if resolved else PromptStatus.UNRESOLVED)
        if mode == "streaming" and budget is None:
            stop = stop_index(stream, rule)
            assert stop is not None and drawn >= stop  # never before the rule stops
            draws = [d.num_samples for d in driver.log if d.prompt_id == pid]
            assert drawn - stop < draws[-1]  # only the last draw overshoots
            if epsilon == 0:
                assert drawn == stop  # ε = 0 never overshoots
        if mode == "rounds" and resolved:
            assert drawn - stop_index(stream, exit_rule) < round_repeat


def test_state_dict_mid_step_makes_the_same_decisions() -> None:
    streams = {
        f"p{i}": [float(random.Random(i * 7 + j).random() < 0.2) for j in range(32)]
        for i in range(8)
    }

    def make() -> SequentialSampler:
        return SequentialSampler(
            k_pos=2, k_neg=2, max_samples_per_prompt=32, max_samples_per_step=150
        )

    reference = make()
    ref_driver = StreamDriver(streams, seed=3)
    ref_driver.run_step(reference)

    # Same run, interrupted after a few results: the state is pickled and loaded into a fresh
    # sampler, which must continue with the same draws.
    sampler = make()
    driver = StreamDriver(streams, seed=3)
    sampler.start_step(0, list(streams), no_history(streams))
    open_draws = sampler.next()
    driver.log.extend(open_draws)
    for _ in range(5):
        draw = open_draws.pop(driver.rng.randrange(len(open_draws)))
        sampler.observe(draw.prompt_id, driver.answer(draw))
        new = sampler.next()
        driver.log.extend(new)
        open_draws.extend(new)
    restored = make()
    restored.load_state_dict(pickle.loads(pickle.dumps(sampler.state_dict())))
    for _ in range(10_000):
        if restored.done():
            break
        draw = open_draws.pop(driver.rng.randrange(len(open_draws)))
        restored.observe(draw.prompt_id, driver.answer(draw))
        new = restored.next()
        driver.log.extend(new)
        open_draws.extend(new)
    assert driver.log == ref_driver.log
    assert restored.metrics() == reference.metrics()
    assert [restored.verdict(p) for p in streams] == [reference.verdict(p) for p in streams]


def test_observe_rejects_partial_results() -> None:
    sampler = SequentialSampler(k_pos=1, k_neg=1, max_samples_per_prompt=8)
    sampler.start_step(0, ["a"], no_history(["a"]))
    sampler.next()
    with pytest.raises(ValueError, match="pass every rollout of one request together"):
        sampler.observe("a", [1.0])


def test_duplicate_prompt_ids_are_refused() -> None:
    sampler = SequentialSampler(k_pos=1, k_neg=1, max_samples_per_prompt=8)
    with pytest.raises(ValueError, match="appears twice"):
        sampler.start_step(0, ["a", "a"], no_history(["a"]))


def test_validation_names_the_problem() -> None:
    with pytest.raises(ValueError, match="no prompt could ever resolve"):
        SequentialSampler(k_pos=4, k_neg=4, max_samples_per_prompt=6)
    with pytest.raises(ValueError, match="max_overshoot_fraction must be >= 0"):
        SequentialSampler(k_pos=1, k_neg=1, max_samples_per_prompt=6, max_overshoot_fraction=-1)
