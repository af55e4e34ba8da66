"""A scripted engine: each prompt has a known pass rate, for fast tests of everything above rollout.

`FakeEngine` implements the full `RolloutEngine` protocol without a model. For every request it
decodes the prompt token ids to text, looks the text up in `script`, and for each sample emits the
correct answer (then `<eos>`) with probability `pass_rate`, otherwise one of a few wrong answers
chosen uniformly. Log-probabilities are those of this scripted policy, spread evenly over the
response tokens: the correct response's log-probs sum to log(pass_rate), a wrong one's to
log((1 - pass_rate) / num_wrong_answers), so `score` and `generate` agree exactly and importance
ratios computed from them are meaningful. Weights are not modelled: `update_weights` only records
the version (the pass rates do not move), which is what version-tagging tests need.

Temperature 0 is greedy: the most probable response (the answer if pass_rate >=
(1 - pass_rate) / num_wrong_answers, else the first wrong answer). Any temperature > 0 samples the
script itself, so the script is the sampling distribution π_T at every T and its log-probs are
what `generate` reports and `score(..., temperature=T)` returns (adarl/rollout/common.py). Other
sampling parameters only matter through `max_new_tokens` (a longer response is cut and flagged
`LENGTH`) and `stop_token_ids`.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
from transformers import PreTrainedTokenizerBase

from adarl.types import Completion, FinishReason, GenerationRequest, GenerationResult


@dataclass(frozen=True)
class FakePrompt:
    """The scripted behaviour of one prompt: P(correct) and the correct answer text."""

    pass_rate: float
    answer: str

    def __post_init__(self) -> None:
        if not 0.0 <= self.pass_rate <= 1.0:
            raise ValueError(f"FakePrompt.pass_rate must be in [0, 1], got {self.pass_rate}")
        if not self.answer:
            raise ValueError("FakePrompt.answer must be a non-empty string")


def wrong_answers(answer: str, count: int) -> tuple[str, ...]:
    """`count` distinct plausible wrong answers: nearby integers for numbers, edits otherwise."""
    candidates: list[str] = []
    try:
        value = int(answer)
    except ValueError:
        candidates = [answer + str(d) for d in range(10)] + [answer[:-1] or "0"]
    else:
        offsets = [1, -1, 10, -10, 2, -2, 100, -100, 3, -3, 5, -5]
        candidates = [str(value + offset) for offset in offsets]
    distinct = [c for c in dict.fromkeys(candidates) if c != answer]
    if len(distinct) < count:
        raise ValueError(f"cannot derive {count} wrong answers from {answer!r}; use fewer")
    return tuple(distinct[:count])


class FakeEngine:
    """Scripted-pass-rate engine keyed by prompt text (see the module docstring)."""

    def __init__(
        self,
        *,
        tokenizer: PreTrainedTokenizerBase,
        script: Mapping[str, FakePrompt],
        seed: int = 0,
        num_wrong_answers: int = 3,
    ) -> None:
        if tokenizer.eos_token_id is None:
            raise ValueError("FakeEngine needs a tokenizer with an eos token")
        if num_wrong_answers < 1:
            raise ValueError(f"num_wrong_answers must be >= 1, got {num_wrong_answers}")
        self._tokenizer = tokenizer
        self._eos_token_id: int = tokenizer.eos_token_id
        self._script = dict(script)
        self._seed = seed
        self._num_wrong_answers = num_wrong_answers
        self._version = 0
        # Response candidates per prompt text: index 0 is the correct answer.
        self._responses: dict[str, tuple[tuple[int, ...], ...]] = {}
        self._samples_generated = 0

    # -- RolloutEngine -----------------------------------------------------------------------

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        results = []
        for request in requests:
            text = self._prompt_text(request.prompt_token_ids)
            entry = self._script[text]
            responses = self._candidates(text)
            # String seeds are hashed with SHA-512 by `random`, so this is stable across runs.
            rng = random.Random(f"{self._seed}/{request.seed}")
            completions = []
            for _ in range(request.num_samples):
                if request.sampling.temperature == 0.0:
                    wrong_rate = (1.0 - entry.pass_rate) / self._num_wrong_answers
                    pick = 0 if entry.pass_rate >= wrong_rate else 1
                elif rng.random() < entry.pass_rate:
                    pick = 0
                else:
                    pick = 1 + rng.randrange(self._num_wrong_answers)
                completions.append(self._completion(entry, responses, pick, request))
            self._samples_generated += request.num_samples
            results.append(
                GenerationResult(
                    request_id=request.request_id,
                    completions=tuple(completions),
                    weight_version=self._version,
                )
            )
        return results

    def score(
        self,
        prompt_token_ids: Sequence[Sequence[int]],
        response_token_ids: Sequence[Sequence[int]],
        *,
        temperature: float = 1.0,
    ) -> list[list[float]]:
        if not temperature > 0:
            raise ValueError(f"score: temperature must be > 0, got {temperature}")
        if len(prompt_token_ids) != len(response_token_ids):
            raise ValueError(
                f"score: {len(prompt_token_ids)} prompts but {len(response_token_ids)} responses"
            )
        scores = []
        for prompt, response in zip(prompt_token_ids, response_token_ids, strict=True):
            text = self._prompt_text(prompt)
            entry = self._script[text]
            candidates = self._candidates(text)
            response = tuple(response)
            pick = next(
                (i for i, full in enumerate(candidates) if full[: len(response)] == response),
                None,
            )
            if pick is None or not response:
                scores.append([-math.inf] * len(response))
                continue
            per_token = self._sequence_logprob(entry, pick) / len(candidates[pick])
            scores.append([per_token] * len(response))
        return scores

    def update_weights(self, version: int, weights: Mapping[str, torch.Tensor]) -> None:
        del weights  # the fake has no weights; only the version tag is observable
        self._version = int(version)

    def weight_version(self) -> int:
        return self._version

    # -- extras ------------------------------------------------------------------------------

    def metrics(self) -> dict[str, float]:
        return {"perf/rollout_samples_total": float(self._samples_generated)}

    # -- internals ---------------------------------------------------------------------------

    def _prompt_text(self, prompt_token_ids: Sequence[int]) -> str:
        text = self._tokenizer.decode(list(prompt_token_ids), skip_special_tokens=True)
        return self._check_known(text)

    def _check_known(self, text: str) -> str:
        if text not in self._script:
            known = ", ".join(repr(k) for k in list(self._script)[:5])
            more = "" if len(self._script) <= 5 else f", ... ({len(self._script)} in all)"
            raise KeyError(
                f"FakeEngine has no script for prompt {text!r}; add a FakePrompt for it to "
                f"`script` (known prompts: {known}{more})"
            )
        return text

    def _candidates(self, text: str) -> tuple[tuple[int, ...], ...]:
        if text not in self._responses:
            answer = self._script[text].answer
            texts = (answer, *wrong_answers(answer, self._num_wrong_answers))
            self._responses[text] = tuple(
                (*self._tokenizer.encode(t, add_special_tokens=False), self._eos_token_id)
                for t in texts
            )
        return self._responses[text]

    def _sequence_logprob(self, entry: FakePrompt, pick: int) -> float:
        probability = (
            entry.pass_rate if pick == 0 else (1.0 - entry.pass_rate) / self._num_wrong_answers
        )
        # Only `score` can ask about a response the script never samples (pass_rate 0 or 1).
        return math.log(probability) if probability > 0 else -math.inf

    def _completion(
        self,
        entry: FakePrompt,
        responses: tuple[tuple[int, ...], ...],
        pick: int,
        request: GenerationRequest,
    ) -> Completion:
        full = responses[pick]
        per_token = self._sequence_logprob(entry, pick) / len(full)
        stop_ids = {self._eos_token_id, *request.sampling.stop_token_ids}
        tokens: list[int] = []
        finish = FinishReason.LENGTH
        for token in full[: request.sampling.max_new_tokens]:
            tokens.append(token)
            if token in stop_ids:
                finish = FinishReason.STOP
                break
        return Completion(
            token_ids=tuple(tokens),
            logprobs=(per_token,) * len(tokens),
            finish_reason=finish,
            text=self._tokenizer.decode(tokens, skip_special_tokens=True),
        )
