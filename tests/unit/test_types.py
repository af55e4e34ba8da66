"""The TrainBatch collation contract every component relies on."""

import torch

from adarl.types import Completion, FinishReason, Group, Rollout, ScoredRollout, TrainBatch


def _scored(prompt: tuple[int, ...], response: tuple[int, ...], reward: float) -> ScoredRollout:
    completion = Completion(
        token_ids=response,
        logprobs=tuple(-0.1 * (i + 1) for i in range(len(response))),
        finish_reason=FinishReason.STOP,
    )
    rollout = Rollout(
        request_id="r",
        prompt_id="p",
        prompt_token_ids=prompt,
        completion=completion,
        weight_version=3,
    )
    return ScoredRollout(rollout=rollout, reward=reward)


def test_from_groups_places_response_quantities_at_their_token_positions() -> None:
    g0 = Group(
        prompt_id="a",
        rollouts=(_scored((5, 6), (7,), 1.0), _scored((5, 6), (8, 9), 0.0)),
        advantages=(0.5, -0.5),
        pool_size=2,
        pool_positives=1,
        resolved=True,
    )
    g1 = Group(
        prompt_id="b",
        rollouts=(_scored((4,), (1, 2, 3), 1.0),),
        advantages=(2.0,),
        pool_size=1,
        pool_positives=1,
        resolved=True,
    )
    batch = TrainBatch.from_groups([g0, g1], pad_token_id=0)

    assert batch.input_ids.tolist() == [[5, 6, 7, 0], [5, 6, 8, 9], [4, 1, 2, 3]]
    assert batch.response_mask.tolist() == [
        [False, False, True, False],
        [False, False, True, True],
        [False, True, True, True],
    ]
    assert batch.attention_mask.sum(dim=1).tolist() == [3, 4, 4]
    # advantages broadcast over the response tokens only
    assert batch.advantages[1].tolist() == [0.0, 0.0, -0.5, -0.5]
    assert torch.allclose(batch.behaviour_logprobs[2, 1:], torch.tensor([-0.1, -0.2, -0.3]))
    assert batch.prompt_index.tolist() == [0, 0, 1]
    assert batch.weight_versions.tolist() == [3, 3, 3]
    assert batch.num_response_tokens == 6

    sub = batch.select([0])
    assert sub.input_ids.tolist() == [[5, 6, 7]]  # trimmed to its own length


def test_group_rejects_mismatched_advantages() -> None:
    import pytest

    with pytest.raises(ValueError, match="2 rollouts but 1 advantages"):
        Group(
            prompt_id="a",
            rollouts=(_scored((1,), (2,), 1.0), _scored((1,), (3,), 0.0)),
            advantages=(1.0,),
            pool_size=2,
            pool_positives=1,
            resolved=True,
        )


def test_a_terms_groups_are_its_rows_and_they_survive_a_selection() -> None:
    group = Group(
        prompt_id="a",
        rollouts=(_scored((5, 6), (7,), 1.0), _scored((5, 6), (8, 9), 0.0)),
        advantages=(0.5, -0.5),
        pool_size=2,
        pool_positives=1,
        resolved=True,
    )
    rehearsed = Group(
        prompt_id="b",
        rollouts=(_scored((4,), (1, 2, 3), 1.0),),
        advantages=(0.0,),
        pool_size=0,
        pool_positives=0,
        resolved=True,
        trained_by="rehearsal",
    )
    assert TrainBatch.from_groups([group], pad_token_id=0).term_rows == {}  # no term's rows
    batch = TrainBatch.from_groups([group, rehearsed], pad_token_id=0)
    assert list(batch.term_rows) == ["rehearsal"]
    assert batch.term_rows["rehearsal"].tolist() == [False, False, True]
    assert batch.select([2, 0]).term_rows["rehearsal"].tolist() == [True, False]
