"""The benchmark's continuous-batching simulator, against timings worked out by hand."""

from __future__ import annotations

import random

import pytest

from adarl.bench.sampler_world import PassRateMix
from adarl.rollout.simulated import ContinuousBatchingSimulator, LatencyModel


def model(**kw) -> LatencyModel:
    args = dict(
        engines=1,
        slots=4,
        decode_step_base_s=0.01,
        decode_step_per_seq_s=0.0,
        prefill_s_per_request=0.0,
        result_latency_s=0.0,
    )
    return LatencyModel(**{**args, **kw})


def test_one_request_finishes_with_its_longest_sample() -> None:
    sim = ContinuousBatchingSimulator(model(decode_step_per_seq_s=0.001, prefill_s_per_request=0.5))
    sim.submit("r", [10, 20], at_s=0.0)
    assert sim.next_completion() == "r"
    # prefill 0.5, then 10 iterations with 2 running (0.012 s) and 10 with 1 running (0.011 s)
    assert sim.now_s == pytest.approx(0.5 + 10 * 0.012 + 10 * 0.011)
    # slot-seconds: 2 x 0.12 + 1 x 0.11 over 4 slots x 0.73 s
    assert sim.utilisation() == pytest.approx((2 * 0.12 + 0.11) / (4 * 0.73))


def test_full_slots_queue_first_in_first_out() -> None:
    sim = ContinuousBatchingSimulator(model(slots=1))
    sim.submit("a", [10], at_s=0.0)
    sim.submit("b", [5], at_s=0.0)
    assert sim.next_completion() == "a" and sim.now_s == pytest.approx(0.10)
    assert sim.next_completion() == "b" and sim.now_s == pytest.approx(0.15)
    assert sim.utilisation() == pytest.approx(1.0)


def test_continuous_batching_admits_when_a_slot_frees() -> None:
    sim = ContinuousBatchingSimulator(model(slots=2))
    sim.submit("a", [10, 30], at_s=0.0)
    sim.submit("b", [10], at_s=0.0)  # waits for a's first sample (10 iterations)
    assert sim.next_completion() == "b" and sim.now_s == pytest.approx(0.20)
    assert sim.next_completion() == "a" and sim.now_s == pytest.approx(0.30)


def test_requests_spread_over_engines_by_load() -> None:
    sim = ContinuousBatchingSimulator(model(engines=2, slots=1))
    sim.submit("a", [10], at_s=0.0)
    sim.submit("b", [10], at_s=0.0)
    assert {sim.next_completion(), sim.next_completion()} == {"a", "b"}
    assert sim.now_s == pytest.approx(0.10)  # in parallel, not 0.20


def test_a_later_arrival_starts_when_it_arrives() -> None:
    sim = ContinuousBatchingSimulator(model())
    sim.submit("a", [100], at_s=0.0)
    sim.submit("b", [10], at_s=0.35)
    assert sim.next_completion() == "b"
    assert sim.now_s == pytest.approx(0.45, abs=0.011)  # joins at the next iteration boundary
    assert sim.next_completion() == "a" and sim.now_s == pytest.approx(1.0)


def test_response_lengths_follow_the_model() -> None:
    latency = LatencyModel()
    rng = random.Random(0)
    right = sorted(latency.response_tokens(rng, correct=True) for _ in range(4001))
    wrong = sorted(latency.response_tokens(rng, correct=False) for _ in range(4001))
    # medians within ~3% (the median of 4001 lognormal draws has sd ≈ 1.3%) and the cap holds
    assert right[2000] == pytest.approx(latency.median_response_tokens, rel=0.05)
    assert wrong[2000] == pytest.approx(
        latency.median_response_tokens * latency.incorrect_length_factor, rel=0.05
    )
    assert max(wrong) <= latency.max_response_tokens


def test_pass_rate_mix_shares() -> None:
    rng = random.Random(1)
    draws = [PassRateMix().draw(rng) for _ in range(20_000)]
    # shares 0.15 at p = 0 and at p = 1; sd of a share over 20k draws ≈ 0.0025 (4 sd below)
    assert draws.count(0.0) / len(draws) == pytest.approx(0.15, abs=0.01)
    assert draws.count(1.0) / len(draws) == pytest.approx(0.15, abs=0.01)


def test_benchmark_cli_runs_small(tmp_path, capsys) -> None:
    from adarl.bench.sampler_cli import main

    out = tmp_path / "b.md"
    args = ["--prompts", "12", "--steps", "1", "--sweep-engines", "--front", "0", "0.05"]
    assert main([*args, "--write-docs", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "Seq-Balance(2, 2), streaming" in printed and "rounds / streaming" in printed
    text = out.read_text()
    assert "## Sampler" in text and "Pareto front" in text and "drawn / E[T']" in text
