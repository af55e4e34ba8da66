"""PromptSource: seeded per-epoch shuffles and a cursor that resumes exactly."""

from __future__ import annotations

import pytest

from adarl.tasks.source import PromptSource
from adarl.types import TaskExample


def make_examples(n: int) -> list[TaskExample]:
    return [TaskExample(prompt_id=f"p{i}", prompt=f"q{i}", answer=str(i)) for i in range(n)]


def ids(batch: list[TaskExample]) -> list[str]:
    return [e.prompt_id for e in batch]


def test_each_epoch_is_a_permutation_and_epochs_differ() -> None:
    source = PromptSource(examples=make_examples(10), seed=3)
    first, second = ids(source.next_batch(10)), ids(source.next_batch(10))
    assert sorted(first) == sorted(second) == sorted(f"p{i}" for i in range(10))
    assert first != second  # reshuffled (10! orders; a collision would be a 1-in-3.6M event)
    assert source.epoch == 2 and source.position == 0


def test_same_seed_same_order_other_seed_other_order() -> None:
    a = ids(PromptSource(examples=make_examples(20), seed=1).next_batch(45))
    b = ids(PromptSource(examples=make_examples(20), seed=1).next_batch(45))
    c = ids(PromptSource(examples=make_examples(20), seed=2).next_batch(45))
    assert a == b
    assert a != c


def test_batches_cross_epoch_boundaries_without_losing_examples() -> None:
    source = PromptSource(examples=make_examples(7), seed=0)
    batches = [ids(source.next_batch(5)), ids(source.next_batch(5)), ids(source.next_batch(4))]
    served = [prompt for batch in batches for prompt in batch]
    assert all(len(set(batch)) == len(batch) for batch in batches)
    # Batches only reorder within an epoch (to keep them distinct): epochs stay complete.
    reference = ids(PromptSource(examples=make_examples(7), seed=0).next_batch(14))
    assert sorted(served[:7]) == sorted(reference[:7]) == sorted(served[7:])
    assert source.epoch == 2 and source.position == 0


def test_unshuffled_source_serves_file_order() -> None:
    source = PromptSource(examples=make_examples(4), seed=9, shuffle=False)
    assert ids(source.next_batch(6)) == ["p0", "p1", "p2", "p3", "p0", "p1"]


@pytest.mark.parametrize(
    "consumed",
    [0, 3, 10, 13, 20, 27],  # start, mid-epoch, exactly at boundaries, mid later epochs
)
def test_resume_gives_the_uninterrupted_sequence(consumed: int) -> None:
    uninterrupted = PromptSource(examples=make_examples(10), seed=5)
    expected = ids(uninterrupted.next_batch(consumed + 25))[consumed:]

    original = PromptSource(examples=make_examples(10), seed=5)
    for size in (3, 4, 1, 2, 7, 5, 6):  # uneven batches on the way to `consumed`
        original.next_batch(min(size, consumed - original.epoch * 10 - original.position))
    original.next_batch(consumed - original.epoch * 10 - original.position)
    state = original.state_dict()
    assert state["epoch"] * 10 + state["position"] == consumed

    resumed = PromptSource(examples=make_examples(10), seed=5)
    resumed.load_state_dict(state)
    assert ids(resumed.next_batch(25)) == expected


def test_state_dict_refuses_other_data_or_seed() -> None:
    state = PromptSource(examples=make_examples(10), seed=5).state_dict()
    with pytest.raises(ValueError, match="seed"):
        PromptSource(examples=make_examples(10), seed=6).load_state_dict(state)
    with pytest.raises(ValueError, match="num_examples"):
        PromptSource(examples=make_examples(11), seed=5).load_state_dict(state)
    other = [TaskExample(prompt_id=f"x{i}", prompt="q", answer="a") for i in range(10)]
    with pytest.raises(ValueError, match="fingerprint"):
        PromptSource(examples=other, seed=5).load_state_dict(state)


def test_rejects_empty_sources_duplicate_ids_and_negative_batches() -> None:
    with pytest.raises(ValueError, match="no examples"):
        PromptSource(examples=[], seed=0)
    twice = [*make_examples(2), TaskExample(prompt_id="p0", prompt="again", answer="0")]
    with pytest.raises(ValueError, match="duplicate prompt_id 'p0'"):
        PromptSource(examples=twice, seed=0)
    with pytest.raises(ValueError, match="num_examples"):
        PromptSource(examples=make_examples(2), seed=0).next_batch(-1)


def test_metrics_report_progress_and_skipped_rows() -> None:
    source = PromptSource(
        examples=make_examples(4), seed=0, rows_skipped={"empty_prompt": 2, "missing_answer": 1}
    )
    source.next_batch(6)
    metrics = source.metrics()
    assert metrics["sampling/data_epoch"] == 1.0
    assert metrics["sampling/data_epoch_progress"] == 0.5
    assert metrics["sampling/data_rows_skipped"] == 3.0
    assert metrics["sampling/data_rows_skipped_empty_prompt"] == 2.0
    assert metrics["sampling/data_rows_skipped_missing_answer"] == 1.0


def test_batches_straddling_epochs_never_repeat_a_prompt_and_resume_exactly() -> None:
    """10 prompts in batches of 4: every batch distinct, every epoch covers each prompt once,
    and a source restored mid-epoch (after a straddling batch's swap) continues identically."""
    from adarl.tasks.source import PromptSource
    from adarl.types import TaskExample

    examples = [TaskExample(prompt_id=f"p{i}", prompt=f"{i}=", answer=str(i)) for i in range(10)]
    for seed in range(20):  # some seeds put a prompt at both ends of consecutive epochs
        source = PromptSource(examples=examples, seed=seed)
        drawn: list[str] = []
        for _ in range(10):  # 40 draws = 4 epochs
            batch = [e.prompt_id for e in source.next_batch(4)]
            assert len(set(batch)) == 4, f"seed {seed}: duplicate in {batch}"
            drawn += batch
        for epoch in range(4):
            assert sorted(drawn[10 * epoch : 10 * epoch + 10]) == sorted(f"p{i}" for i in range(10))

        replay = PromptSource(examples=examples, seed=seed)
        replay.next_batch(12)  # into epoch 1, past its straddling batch
        state = replay.state_dict()
        restored = PromptSource(examples=examples, seed=seed)
        restored.load_state_dict(state)
        assert [e.prompt_id for e in restored.next_batch(28)] == [
            e.prompt_id for e in replay.next_batch(28)
        ]
