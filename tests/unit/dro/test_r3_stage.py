"""The R3 stage's I/O (adarl/reward/r3.py): which pairs it scores, what it does with the scores,
what it reports; the scoring call is a hand-made log-prob table keyed by context."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pytest

from adarl.config.dro import DroConfig, DroFilterConfig
from adarl.models.tokenizer import build_char_tokenizer
from adarl.reward.arithmetic_reflection import ArithmeticRestatement
from adarl.reward.r3 import AnswerMarkerTemplate, R3PoolReward, build_pool_reward
from adarl.types import (
    Completion,
    FinishedPool,
    FinishReason,
    Rollout,
    ScoredRollout,
    TaskExample,
)

TOKENIZER = build_char_tokenizer()
EXAMPLE = TaskExample(prompt_id="p", prompt="4+4=", answer="8", task="arithmetic")


def _encode(text: str) -> tuple[int, ...]:
    return tuple(TOKENIZER.encode(text, add_special_tokens=False))


def _scored(text: str, reward: float) -> ScoredRollout:
    rollout = Rollout(
        request_id="r",
        prompt_id="p",
        prompt_token_ids=(TOKENIZER.bos_token_id, *_encode("4+4=")),
        completion=Completion(
            token_ids=(), logprobs=(), finish_reason=FinishReason.STOP, text=text
        ),
        weight_version=0,
    )
    return ScoredRollout(rollout=rollout, reward=reward)


class Table:
    """A scoring call answering from per-context log-prob rows (and recording what it got)."""

    def __init__(self, rows: dict[str, list[float]]) -> None:
        self.rows = rows
        self.calls: list[tuple[list[str], list[tuple[int, ...]], float]] = []

    def __call__(
        self, prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]], *, temperature
    ) -> list[list[float]]:
        texts = [TOKENIZER.decode(list(p), skip_special_tokens=True) for p in prompts]
        self.calls.append((texts, [tuple(r) for r in responses], temperature))
        return [list(self.rows[t]) for t in texts]


def test_answer_marker_template_splits_reasoning_from_the_answer() -> None:
    template = AnswerMarkerTemplate(tokenizer=TOKENIZER, marker="Answer:")
    reasoning = _scored("so 4+4 is 8. Answer: 8", 1.0).rollout
    prompt = reasoning.prompt_token_ids
    assert template.context(EXAMPLE, reasoning) == (*prompt, *_encode("so 4+4 is 8. Answer:"))
    # No marker: the whole completion is reasoning (a truncated response).
    cut = _scored("so 4+4 is", 0.0).rollout
    assert template.context(EXAMPLE, cut) == (*prompt, *_encode("so 4+4 isAnswer:"))
    assert template.masked_context(EXAMPLE, cut) == (*prompt, *_encode("Answer:"))
    assert template.reference(EXAMPLE) == (*_encode("8"), TOKENIZER.eos_token_id)


def test_r3_on_a_hand_table_with_the_masked_baseline() -> None:
    # Reference "8<eos>": 2 tokens. Restated answers "8" and "7"; the masked context is "+0=".
    # prob certainties: "8" → (0.8, 0.9), "7" → (0.2, 0.9), masked → (0.5, 0.5).
    rows = {
        "8+0=": [math.log(0.8), math.log(0.9)],
        "7+0=": [math.log(0.2), math.log(0.9)],
        "+0=": [math.log(0.5), math.log(0.5)],
    }
    table = Table(rows)
    stage = R3PoolReward(
        template=ArithmeticRestatement(tokenizer=TOKENIZER), contrast=True, top_k=1
    )
    pool = FinishedPool(
        prompt_id="p", example=EXAMPLE, rollouts=(_scored("8", 1.0), _scored("7", 0.0))
    )
    (rescored,) = stage.rescore([pool], score=table).values()
    # One batched call: both rollouts then the masked pair, at temperature 1.
    texts, references, temperature = table.calls[0]
    assert texts == ["8+0=", "7+0=", "+0="] and temperature == 1.0
    assert references == [(*_encode("8"), TOKENIZER.eos_token_id)] * 3
    # σ = (0.3, 0): all weight on token 0. R3 = 0.8 - 0.5, 0.2 - 0.5.
    np.testing.assert_allclose(rescored.rewards, [0.3, -0.3])
    # max σ = 0.3; top-1 needs p ≥ 1/2 on every token: "8" (0.8, 0.9) reaches it.
    assert rescored.statistics == {"max_deviation": pytest.approx(0.3), "reaches_top_k": 1.0}
    metrics = stage.metrics()
    assert metrics["sampling/r3_scored_pairs"] == 3.0
    # 3 references of 2 tokens, contexts "<bos>8+0=", "<bos>7+0=", "<bos>+0=".
    assert metrics["sampling/r3_scored_tokens"] == 3 * 2 + 5 + 5 + 4
    assert metrics["signal/r3_verifier_correlation"] == pytest.approx(1.0)
    assert metrics["signal/r3_max_deviation_q50"] == pytest.approx(0.3)
    assert metrics["signal/r3_reference_in_top_k_fraction"] == 1.0
    assert stage.metrics()["sampling/r3_pools"] == 0.0  # a new window


def test_verifier_mode_measures_without_changing_rewards() -> None:
    rows = {"8+0=": [math.log(0.9), 0.0], "9+0=": [math.log(0.1), 0.0]}
    stage = R3PoolReward(template=ArithmeticRestatement(tokenizer=TOKENIZER), replace_rewards=False)
    pool = FinishedPool(
        prompt_id="p", example=EXAMPLE, rollouts=(_scored("8", 1.0), _scored("9", 0.0))
    )
    (rescored,) = stage.rescore([pool], score=Table(rows)).values()
    assert rescored.rewards == (1.0, 0.0)  # the verifier's
    assert rescored.statistics["max_deviation"] == pytest.approx(0.4)  # |0.9 - 0.1| / 2
    assert "reaches_top_k" not in rescored.statistics  # no top-k rule asked for
    # σ = (0.4, 0): all weight on token 0, R3 = 0.9 and 0.1, measured but not trained on.
    assert stage.metrics()["signal/r3_mean"] == pytest.approx(0.5)


def test_an_empty_reference_names_the_prompt() -> None:
    stage = R3PoolReward(template=AnswerMarkerTemplate(tokenizer=TOKENIZER, marker=":"))
    pool = FinishedPool(prompt_id="p", example=EXAMPLE, rollouts=())
    with pytest.raises(ValueError, match="prompt 'p' has 2 reference tokens and 0 rollouts"):
        stage.rescore([pool], score=Table({}))


def test_the_builder_reads_the_dro_section() -> None:
    assert build_pool_reward(DroConfig(), tokenizer=TOKENIZER) is None  # nothing asks for a pass
    stage = build_pool_reward(
        DroConfig(reward="r3", template="arithmetic_restatement", weight_shape="softmax"),
        tokenizer=TOKENIZER,
    )
    assert isinstance(stage.template, ArithmeticRestatement)
    assert stage.replace_rewards and stage.weight_shape == "softmax" and stage.top_k is None
    filtering = build_pool_reward(
        DroConfig(filter=DroFilterConfig(enabled=True, top_k=5)), tokenizer=TOKENIZER
    )
    assert not filtering.replace_rewards and filtering.top_k == 5
    assert isinstance(filtering.template, AnswerMarkerTemplate)
