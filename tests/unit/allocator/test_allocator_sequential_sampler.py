"""The Seq-Pos / Seq-Balance state machine on hand-written reward streams."""

from __future__ import annotations

import itertools
import math
import pickle
import random

import pytest
from _allocator_streams import StreamDriver, no_history
from hypothesis import given, settings
from hypothesis import strategies as st

from adarl.allocator.samplers.base import PromptStatus
from adarl.allocator.samplers.sequential import (
    SequentialSampler,
    resolve_probability,
    smallest_resolving_chunk,
)


def exit_index(stream: list[float], k_pos: int, k_neg: int) -> int | None:
    """1-based position at which the stream first holds k_pos positives and k_neg negatives."""
    pos = neg = 0
    for i, r in enumerate(stream, start=1):
        pos += r > 0.5
        neg += r <= 0.5
        if pos >= k_pos and neg >= k_neg:
            return i
    return None


def test_balance_resolves_exactly_at_quotas_without_speculation() -> None:
    # chunk_growth=0: every draw is the fewest samples that could resolve, so the stream is
    # consumed exactly up to its exit index. Stream "a": exit at 5 (1,1,1,0,0).
    streams = {"a": [1, 1, 1, 0, 0, 1, 1], "b": [0, 0, 0, 0, 1, 0, 1, 0], "c": [0] * 10}
    sampler = SequentialSampler(k_pos=2, k_neg=2, max_samples_per_prompt=10, chunk_growth=0)
    driver = StreamDriver(streams)
    driver.run_step(sampler)
    assert sampler.verdict("a") is PromptStatus.RESOLVED
    assert sampler.verdict("b") is PromptStatus.RESOLVED
    assert sampler.verdict("c") is PromptStatus.UNRESOLVED
    assert driver.served["a"] == 5  # (2 pos after 2, need 2 neg: draws 4 then 1)
    assert driver.served["b"] == 7  # b: 4 neg, then 1 pos at 5, 2nd pos at 7
    # c: 10 negatives are never mixed; draws of 2 (the 2 missing positives) up to the cap.
    assert driver.served["c"] == 10
    draws_c = [d.num_samples for d in driver.log if d.prompt_id == "c"]
    assert draws_c == [4, 2, 2, 2]


def test_seq_pos_is_k_positives() -> None:
    streams = {"a": [0, 0, 1, 0, 1, 1], "b": [0] * 8}
    sampler = SequentialSampler(k_pos=2, k_neg=0, max_samples_per_prompt=8, chunk_growth=0)
    assert sampler.name == "seq_pos"
    driver = StreamDriver(streams)
    driver.run_step(sampler)
    assert driver.served["a"] == 5 and sampler.verdict("a") is PromptStatus.RESOLVED
    assert driver.served["b"] == 8 and sampler.verdict("b") is PromptStatus.UNRESOLVED


def test_futile_draws_are_not_made() -> None:
    # 1 negative left before the cap but 2 positives still missing: no draw can resolve.
    sampler = SequentialSampler(k_pos=2, k_neg=1, max_samples_per_prompt=5, chunk_growth=0)
    driver = StreamDriver({"a": [0, 0, 0, 0, 0]})
    driver.run_step(sampler)
    # draws: 3 (k_pos + k_neg), then 2 (missing positives) would reach 5: allowed, = cap.
    assert [d.num_samples for d in driver.log] == [3, 2]
    sampler = SequentialSampler(k_pos=2, k_neg=1, max_samples_per_prompt=4, chunk_growth=0)
    driver = StreamDriver({"a": [0, 0, 0, 0]})
    driver.run_step(sampler)
    # after 3 negatives the cap leaves 1 sample but 2 positives are missing: stop at 3.
    assert [d.num_samples for d in driver.log] == [3]
    assert sampler.verdict("a") is PromptStatus.UNRESOLVED


def test_streaming_dispatches_the_moment_a_result_returns() -> None:
    # No barrier: prompt "a" gets its second draw before "b" has returned its first.
    sampler = SequentialSampler(k_pos=2, k_neg=2, max_samples_per_prompt=32)
    sampler.start_step(0, ["a", "b"], no_history(["a", "b"]))
    first = sampler.next()
    assert {d.prompt_id for d in first} == {"a", "b"}
    sampler.observe("a", [0, 0, 0, 0])
    follow_up = sampler.next()
    assert [d.prompt_id for d in follow_up] == ["a"]
    assert follow_up[0].index == 1


def test_chunks_grow_with_evidence_and_at_most_by_growth() -> None:
    # A p = 0 prompt, no spare slots: 4, then min(growth·4, what 0.9 confidence wants), then
    # the rest of the cap (docstring example: 4, 16, 12).
    sampler = SequentialSampler(k_pos=2, k_neg=2, max_samples_per_prompt=32, chunk_growth=4)
    driver = StreamDriver({"a": [0] * 32})
    driver.run_step(sampler)
    assert [d.num_samples for d in driver.log] == [4, 16, 12]
    # With idle slots for a first draw of 8 (T = 16 for 2 prompts) it takes two waits: 8, 24.
    sampler = SequentialSampler(
        k_pos=2, k_neg=2, max_samples_per_prompt=32, target_in_flight_samples=16
    )
    driver = StreamDriver({"a": [0] * 32, "b": [1, 0] * 16})
    driver.run_step(sampler)
    assert [d.num_samples for d in driver.log if d.prompt_id == "a"] == [8, 24]


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
    growth=st.sampled_from([0.0, 1.0, 2.0, 4.0]),
    target=st.one_of(st.none(), st.integers(1, 64)),
    mode=st.sampled_from(["streaming", "rounds"]),
)
def test_invariants_on_random_streams(
    data, k_pos, k_neg, cap, budget, growth, target, mode
) -> None:
    """Caps and the step budget are never exceeded; a prompt is resolved iff its stream meets the
    quotas within what was drawn; exit indices are where the rule says."""
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
        chunk_growth=growth,
        target_in_flight_samples=target,
        round_repeat=round_repeat,
        max_rounds=max_rounds,
    )
    driver = StreamDriver(streams, seed=data.draw(st.integers(0, 10)))
    driver.run_step(sampler)
    if budget is not None:
        assert sum(driver.served.values()) <= budget
    for pid, stream in streams.items():
        drawn = driver.served[pid]
        assert drawn <= cap
        exit_at = exit_index(stream[:drawn], k_pos, k_neg)
        verdict = sampler.verdict(pid)
        assert verdict is (
            PromptStatus.RESOLVED if exit_at is not None else PromptStatus.UNRESOLVED
        )
        if mode == "streaming" and growth == 0 and exit_at is not None:
            assert drawn == exit_at  # exact mode never overshoots
        if verdict is PromptStatus.UNRESOLVED and budget is None and mode == "streaming":
            # Unresolved only at the cap, or when even the whole rest of it could not resolve.
            missing = max(0, k_pos - sum(stream[:drawn])) + max(
                0, k_neg - (drawn - sum(stream[:drawn]))
            )
            assert drawn == cap or cap - drawn < missing


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


def test_resolve_probability_is_the_beta_binomial() -> None:
    # Jeffreys prior, no data: P(one sample is positive) = E[p] = 1/2.
    assert resolve_probability(
        1, positives=0, negatives=0, need_pos=1, need_neg=0
    ) == pytest.approx(0.5)
    # After 1 positive, 1 negative: p ~ Beta(1.5, 1.5); P(2 samples hold >= 1 of each)
    # = 2·E[p(1-p)] = 2·ab/((a+b)(a+b+1)) = 2·2.25/(3·4) = 0.375.
    assert resolve_probability(
        2, positives=1, negatives=1, need_pos=1, need_neg=1
    ) == pytest.approx(0.375)
    # Impossible chunk: fewer samples than the quotas need.
    assert resolve_probability(2, positives=0, negatives=0, need_pos=2, need_neg=1) == 0.0
    # Monotone in the chunk size, tending to 1.
    probs = [
        resolve_probability(c, positives=1, negatives=7, need_pos=2, need_neg=0)
        for c in range(1, 80)
    ]
    assert all(b >= a - 1e-12 for a, b in itertools.pairwise(probs))
    assert probs[-1] > 0.9


def test_smallest_resolving_chunk_matches_a_linear_scan() -> None:
    for positives, negatives, need_pos, need_neg in [(0, 4, 2, 0), (1, 7, 1, 1), (3, 0, 0, 2)]:
        for confidence in (0.5, 0.9):
            scan = next(
                (
                    c
                    for c in range(need_pos + need_neg, 41)
                    if resolve_probability(
                        c,
                        positives=positives,
                        negatives=negatives,
                        need_pos=need_pos,
                        need_neg=need_neg,
                    )
                    >= confidence
                ),
                40,
            )
            found = smallest_resolving_chunk(
                positives=positives,
                negatives=negatives,
                need_pos=need_pos,
                need_neg=need_neg,
                confidence=confidence,
                low=need_pos + need_neg,
                high=40,
            )
            assert found == scan


def test_validation_names_the_problem() -> None:
    with pytest.raises(ValueError, match="no prompt could ever resolve"):
        SequentialSampler(k_pos=4, k_neg=4, max_samples_per_prompt=6)
    with pytest.raises(ValueError, match="chunk_growth"):
        SequentialSampler(k_pos=1, k_neg=1, max_samples_per_prompt=6, chunk_growth=0.5)
    assert math.isfinite(SequentialSampler(k_pos=1, k_neg=1, max_samples_per_prompt=6).chunk_growth)
