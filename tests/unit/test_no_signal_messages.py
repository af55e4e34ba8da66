"""When a run stops because its policy starts below the answers' prior, and what it says."""

from __future__ import annotations

from adarl.no_signal import below_prior_message

BASE = {
    "pass_at_k": {"1": 0.104, "64": 0.945},
    "best_constant": {"answer": "15", "accuracy": 0.129},
}


def test_a_warm_start_that_ran_out_of_budget_stops_the_run() -> None:
    record = {
        "held_aside_accuracy": 0.115,
        "best_constant_accuracy": 0.156,
        "guesser_accuracy": 0.103,
        "steps": 585,
        "stopped_by": "max_steps",
    }
    lead = {"lead": -0.025, "se": 0.004, "prompts": 256.0}
    message = below_prior_message(base=BASE, lead=lead, warm_start=record, builtin_model=True)
    assert message is not None
    assert "its warm start ran out of budget" in message
    assert "held-aside accuracy 11.5%, best constant answer 15.6%" in message
    assert "pass@1 10.4%, pass@64 94.5%, best constant answer '15' 12.9%" in message
    assert "(pass@1 -2.5 points over it, paired SE 0.4)" in message
    assert "model.tiny.sft_max_minutes" in message and "trainer.stop_below_prior=false" in message


def test_a_policy_above_the_prior_or_level_with_it_at_zero_runs() -> None:
    above = {"stopped_by": "above_prior"}
    lead = {"lead": 0.05, "se": 0.01, "prompts": 256.0}
    assert below_prior_message(base=BASE, lead=lead, warm_start=above, builtin_model=True) is None
    # No warm-start record (the built-in task, a real model): the base evaluation decides.
    assert below_prior_message(base=BASE, lead=lead, warm_start=None, builtin_model=False) is None
    # A policy and a constant that both score 0 are left to the mixed-group check.
    zero = {"lead": 0.0, "se": 0.0, "prompts": 256.0}
    assert below_prior_message(base=BASE, lead=zero, warm_start=None, builtin_model=False) is None


def test_a_real_model_below_the_constant_answer_stops() -> None:
    lead = {"lead": -0.03, "se": 0.01, "prompts": 256.0}
    message = below_prior_message(base=BASE, lead=lead, warm_start=None, builtin_model=False)
    assert message is not None and "its held-out pass@1 is below" in message
    assert "model.tiny" not in message and "model=hf" in message
