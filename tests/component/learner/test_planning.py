"""Batch cutting (ranks, micro-batches), batch validation and weight buckets: pure functions."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from adarl.learner.batching import (
    BatchCounts,
    plan_micro_batches,
    plan_mini_batch_shards,
    sequence_lengths,
    shard_batch,
    split_across_ranks,
    split_mini_batches,
    validate_train_batch,
)
from adarl.learner.synthetic import concatenate, synthetic_train_batch
from adarl.types import TrainBatch
from adarl.weight_transport import flatten_bucket, plan_buckets, unflatten_bucket

from .conftest import small_batch


def test_split_balances_tokens_and_covers_every_row_once() -> None:
    lengths = [10, 9, 8, 3, 2, 2, 1]
    shards = split_across_ranks(lengths, 2)
    # Longest first onto the lighter rank: 10→r0, 9→r1, 8→r1 (9<10), 3→r0 (10<17), 2→r0, 2→r0
    # (15<17? 10+3+2=15 < 17 → r0 → 17), then 1 → r0 (17 = 17, tie → lower rank).
    assert shards == [[0, 3, 4, 5, 6], [1, 2]]
    assert sorted(i for s in shards for i in s) == list(range(len(lengths)))
    # More ranks than rows: some ranks get nothing.
    assert split_across_ranks([4], 3) == [[0], [], []]


def test_micro_batches_respect_the_token_budget() -> None:
    lengths = [7, 3, 5, 5, 2, 9]
    plan = plan_micro_batches(lengths, max_tokens=12)
    # Sorted: 9 | 7 | 5 5 (2×5=10 ≤ 12; a third would be 15) | 3 2 (2×3=6)
    assert plan == [[5], [0], [2, 3], [1, 4]]
    for rows in plan:
        assert len(rows) * max(lengths[i] for i in rows) <= 12
    # A row longer than the budget travels alone.
    assert plan_micro_batches([20, 1], max_tokens=8) == [[0], [1]]


def test_batch_counts_and_shards_keep_every_response_token() -> None:
    batch = small_batch()
    counts = BatchCounts.of(batch)
    assert counts.num_tokens == int(batch.response_mask.sum())
    assert counts.num_sequences == batch.num_sequences
    shards = shard_batch(batch, 3)
    assert sum(BatchCounts.of(s).num_tokens for s in shards) == counts.num_tokens
    assert sum(s.num_sequences for s in shards) == batch.num_sequences


def _valid_batch() -> TrainBatch:
    return synthetic_train_batch(
        num_prompts=1,
        samples_per_prompt=2,
        prompt_length=(2, 2),
        response_length=(2, 3),
        vocab_size=20,
        seed=0,
    )


def _batch_of_groups(sizes: list[int]) -> TrainBatch:
    """One group (prompt index g) of `sizes[g]` samples each, in order."""
    return concatenate(
        [
            synthetic_train_batch(
                num_prompts=1,
                samples_per_prompt=n,
                prompt_length=(3, 5),
                response_length=(2, 6),
                vocab_size=30,
                seed=g,
            )
            for g, n in enumerate(sizes)
        ]
    )


def test_mini_batches_hold_whole_groups_in_order_and_equal_numbers() -> None:
    sizes = [3, 1, 5, 2, 4, 1, 2]  # pools of unequal size, as adaptive sampling trains them
    batch = _batch_of_groups(sizes)
    starts = [sum(sizes[:g]) for g in range(len(sizes) + 1)]
    minis = split_mini_batches(batch, 3)
    # ⌊7k/3⌋ = 0, 2, 4, 7: groups 0-1 | 2-3 | 4-6, whatever their sizes or outcomes.
    for mini, (first, last) in zip(minis, [(0, 2), (2, 4), (4, 7)], strict=True):
        rows = torch.arange(starts[first], starts[last])  # whole groups, in batch order
        expected = batch.select(rows)
        for name in ("input_ids", "response_mask", "advantages", "prompt_index"):
            assert torch.equal(getattr(mini, name), getattr(expected, name)), name
    assert split_mini_batches(batch, 1) == [batch]
    assert len(split_mini_batches(batch, 20)) == 7  # at most one mini-batch per group
    # Every rank gets its shard of every mini-batch, normalised by the mini-batch's counts.
    plans = plan_mini_batch_shards(batch, num_mini_batches=3, world_size=2, max_tokens=40)
    assert [len(plan) for plan in plans] == [3, 3]
    for k, mini in enumerate(minis):
        assert {plan[k].global_num_tokens for plan in plans} == {BatchCounts.of(mini).loss_tokens}
        assert sum(plan[k].shard.num_sequences for plan in plans) == mini.num_sequences
        assert len({plan[k].num_micro_batches for plan in plans}) == 1
    interleaved = batch.select(torch.tensor([0, 3, 1, 2]))  # group 0, group 1, group 0 again
    with pytest.raises(ValueError, match="prompt_index is not contiguous"):
        split_mini_batches(interleaved, 2)


def _with_rehearsal(batch: TrainBatch, rows: list[int]) -> TrainBatch:
    flags = torch.zeros(batch.num_sequences, dtype=torch.bool)
    flags[rows] = True
    return dataclasses.replace(batch, term_rows={"rehearsal": flags})


def test_a_terms_own_rows_are_counted_apart_and_survive_every_cut() -> None:
    # Groups of 3, 2 and 4 samples, then three rows the rehearsal term trains alone (rows 9, 10,
    # 11), each a group of its own, as TrainBatch.from_groups lays them out.
    plain = _batch_of_groups([3, 2, 4, 1, 1, 1])
    batch = _with_rehearsal(plain, [9, 10, 11])
    lengths = batch.response_mask.sum(dim=1)
    counts = BatchCounts.of(batch)
    assert counts.num_tokens == int(lengths[:9].sum())
    assert counts.num_sequences == 9 and counts.loss_tokens == float(lengths[:9].sum())
    assert counts.term_rows == {"rehearsal": (int(lengths[9:].sum()), 3)}

    # Mini-batches: the groups are cut as without the rehearsal rows (⌊3k/2⌋ = 0, 1, 3: group 0
    # | groups 1-2), and the rehearsal rows are dealt in turn: 9, 11 | 10.
    minis = split_mini_batches(batch, 2)
    for mini, rows in zip(minis, [[0, 1, 2, 9, 11], [3, 4, 5, 6, 7, 8, 10]], strict=True):
        expected = batch.select(torch.tensor(rows))
        assert torch.equal(mini.input_ids, expected.input_ids)
        assert torch.equal(mini.term_rows["rehearsal"], expected.term_rows["rehearsal"])
    without = split_mini_batches(plain.select(torch.arange(9)), 2)
    for mini, rl in zip(minis, without, strict=True):
        keep = ~mini.term_rows["rehearsal"]
        assert torch.equal(mini.select(keep.nonzero().flatten()).input_ids, rl.input_ids)
    # Fewer rehearsal rows than mini-batches: the first optimizer step rehearses.
    one = split_mini_batches(_with_rehearsal(plain.select(torch.arange(10)), [9]), 3)
    assert [int(m.term_rows["rehearsal"].sum()) for m in one] == [1, 0, 0]

    # Ranks and micro-batches: every cut keeps each row's flag, and the per-mini-batch counts
    # every rank is given are the mini-batch's.
    plans = plan_mini_batch_shards(batch, num_mini_batches=2, world_size=2, max_tokens=20)
    for k, mini in enumerate(minis):
        mini_counts = BatchCounts.of(mini)
        shards = [plan[k] for plan in plans]
        for shard in shards:
            assert shard.term_rows == mini_counts.term_rows
            assert shard.global_num_tokens == mini_counts.loss_tokens
        rows = mini.term_rows["rehearsal"]
        assert sum(int(s.shard.term_rows["rehearsal"].sum()) for s in shards) == int(rows.sum())
        assert sum(BatchCounts.of(s.shard).term_rows["rehearsal"].tokens for s in shards) == (
            mini_counts.term_rows["rehearsal"].tokens
        )
    for shard in shard_batch(batch, 3):
        for rows in plan_micro_batches(sequence_lengths(shard), 12):
            micro = shard.select(rows)
            assert torch.equal(
                micro.term_rows["rehearsal"], micro.prompt_index >= 3
            )  # groups 3-5 rehearse

    with pytest.raises(ValueError, match="flags part of a group"):
        split_mini_batches(_with_rehearsal(plain, [0]), 2)


def test_validation_names_the_broken_field() -> None:
    validate_train_batch(_valid_batch())
    broken = _valid_batch()
    broken.response_mask[:, 0] = True
    broken.attention_mask[:, 0] = True
    with pytest.raises(ValueError, match="position 0"):
        validate_train_batch(broken)
    broken = _valid_batch()
    broken.advantages = broken.advantages[:, :-1]
    with pytest.raises(ValueError, match="advantages has shape"):
        validate_train_batch(broken)
    broken = _valid_batch()
    broken.response_mask[:] = False
    with pytest.raises(ValueError, match="no response tokens"):
        validate_train_batch(broken)
    broken = _valid_batch()
    broken.attention_mask[0, 0] = False  # a hole: not right-padded
    broken.response_mask[0, 0] = False
    with pytest.raises(ValueError, match="right-padded"):
        validate_train_batch(broken)


class _Spec:
    def __init__(self, name: str, shape: tuple[int, ...], dtype: torch.dtype) -> None:
        self.name, self.shape, self.dtype = name, shape, dtype

    @property
    def num_bytes(self) -> int:
        return int(torch.empty(self.shape, dtype=self.dtype).nbytes)


def test_buckets_are_bounded_and_round_trip() -> None:
    specs = [
        _Spec("a", (4, 4), torch.float32),  # 64 B
        _Spec("b", (8,), torch.bfloat16),  # 16 B
        _Spec("c", (10,), torch.float32),  # 40 B
        _Spec("big", (50,), torch.float32),  # 200 B > bound: alone
        _Spec("d", (2,), torch.int64),  # 16 B
    ]
    layouts = plan_buckets(specs, bucket_size_bytes=128)
    # a+b = 80, +c = 120 ≤ 128 | big alone | d
    assert [layout.names for layout in layouts] == [["a", "b", "c"], ["big"], ["d"]]
    assert [layout.num_bytes for layout in layouts] == [120, 200, 16]
    generator = torch.Generator().manual_seed(0)
    tensors = {s.name: (torch.randn(s.shape, generator=generator) * 100).to(s.dtype) for s in specs}
    for layout in layouts:
        buffers = flatten_bucket(layout, tensors, device=torch.device("cpu"))
        assert len(buffers) == len({tensors[n].dtype for n in layout.names})  # one per dtype
        restored = unflatten_bucket(layout, buffers)
        for name in layout.names:
            assert torch.equal(restored[name], tensors[name])
    with pytest.raises(ValueError, match="bucket plan says"):
        flatten_bucket(layouts[0], {**tensors, "a": tensors["a"].T[:2]}, device=torch.device("cpu"))
