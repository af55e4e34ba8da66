"""Prompt text <-> engine tokens: the one place that knows how a task prompt is laid out.

Every prompt an engine sees is made here, for training rollouts, evaluation and hinted prompts
alike, so the three can never disagree. The user text is `prompt + hint + instruction_suffix`
(the hint, when the hint generator gives one, sits between the prompt and the instruction, so
the instruction stays last). Two layouts:

* raw text (default; `task.chat_template=false`): `<bos>` (when the tokenizer has one) followed
  by the user text. This is what the built-in tiny model is warm-started on
  (`adarl.models.tiny`): `<bos> prompt [hint]`, answered by `answer <eos>`.
* chat (`task.chat_template=true`): the tokenizer's own chat template renders an optional
  system turn (`task.system_prompt`) and one user turn holding the user text, followed by the
  template's generation prompt (the assistant header). The rendered text is tokenised without
  adding special tokens (the template writes its own), as transformers' `apply_chat_template`
  does. Generation then also stops at the template's end-of-turn token (`<|im_end|>` for
  ChatML), found by rendering a probe conversation (`end_of_turn_token_id`).

Token ids are cached per user text (`prompt + hint`): the layout settings are fixed when the
codec is made, so the text determines the ids.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from transformers import PreTrainedTokenizerBase

from adarl.types import (
    GenerationRequest,
    GenerationResult,
    PromptRequest,
    Rollout,
    SamplingParams,
    TaskExample,
)

if TYPE_CHECKING:
    from adarl.config.rollout import RolloutConfig
    from adarl.config.tasks import TaskConfig

log = logging.getLogger(__name__)

# What the math verifier reads (adarl/reward/math_verifier.py): a prompt must ask for it.
BOXED_INSTRUCTION = "\\boxed"
_PROBE = "ADARL-END-OF-TURN-PROBE"


@dataclass
class PromptCodec:
    tokenizer: PreTrainedTokenizerBase
    sampling: SamplingParams
    chat_template: bool = False
    system_prompt: str | None = None
    instruction_suffix: str = ""
    # User text -> token ids: a prompt is drawn several times per step (streaming follow-ups)
    # and again in later epochs; tokenizing it once saves the driver's time. Bounded.
    _token_cache: dict[str, tuple[int, ...]] = field(default_factory=dict, repr=False)
    _cache_limit: int = 100_000

    def __post_init__(self) -> None:
        if self.chat_template:
            _require_chat_template(self.tokenizer)
        if self.system_prompt is not None and not self.chat_template:
            raise ValueError(
                "a system prompt needs the chat template (task.chat_template=true); with raw "
                "text put the instruction in task.instruction_suffix"
            )

    @property
    def pad_token_id(self) -> int:
        pad = self.tokenizer.pad_token_id
        return int(pad if pad is not None else self.tokenizer.eos_token_id)

    def render(self, text: str) -> str:
        """The text the tokenizer encodes for user text `text` (prompt + hint), suffix included;
        in the raw layout without `<bos>`, which is added as a token."""
        user = text + self.instruction_suffix
        if not self.chat_template:
            return user
        messages = [{"role": "user", "content": user}]
        if self.system_prompt is not None:
            messages.insert(0, {"role": "system", "content": self.system_prompt})
        rendered = self.tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True
        )
        assert isinstance(rendered, str)
        return rendered

    def prompt_token_ids(self, text: str) -> tuple[int, ...]:
        """Token ids of the prompt for user text `text` (prompt + hint), in this codec's layout."""
        cached = self._token_cache.get(text)
        if cached is not None:
            return cached
        ids = self.tokenizer.encode(self.render(text), add_special_tokens=False)
        bos = self.tokenizer.bos_token_id
        if not self.chat_template and bos is not None:
            ids = [bos, *ids]
        tokens = tuple(int(i) for i in ids)
        if len(self._token_cache) >= self._cache_limit:
            self._token_cache.clear()
        self._token_cache[text] = tokens
        return tokens

    def generation_request(
        self, request: PromptRequest, *, sampling: SamplingParams | None = None
    ) -> GenerationRequest:
        text = request.example.prompt + (request.hint or "")
        return GenerationRequest(
            request_id=request.request_id,
            prompt_token_ids=self.prompt_token_ids(text),
            num_samples=request.num_samples,
            sampling=sampling or self.sampling,
            seed=request.seed,
        )

    @staticmethod
    def rollouts(
        request: PromptRequest, sent: GenerationRequest, result: GenerationResult
    ) -> list[Rollout]:
        """One `Rollout` per completion of `sent` (the engine request made from `request`)."""
        return [
            Rollout(
                request_id=request.request_id,
                prompt_id=request.example.prompt_id,
                prompt_token_ids=sent.prompt_token_ids,
                completion=completion,
                weight_version=result.weight_version,
                hint_level=request.hint_level,
            )
            for completion in result.completions
        ]


def _require_chat_template(tokenizer: PreTrainedTokenizerBase) -> None:
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError(
            f"task.chat_template=true but the tokenizer of "
            f"{getattr(tokenizer, 'name_or_path', '') or 'this model'!r} has no chat template; "
            "set task.chat_template=false (raw text) or use a model directory whose "
            "tokenizer_config.json (or chat_template.jinja) defines one"
        )


def end_of_turn_token_id(tokenizer: PreTrainedTokenizerBase) -> int | None:
    """The special token the chat template closes an assistant turn with (None if it closes it
    with ordinary text or nothing): read from a rendered probe conversation."""
    rendered = tokenizer.apply_chat_template(
        [{"role": "user", "content": "1"}, {"role": "assistant", "content": _PROBE}],
        tokenize=False,
    )
    assert isinstance(rendered, str)
    _, found, after = rendered.partition(_PROBE)
    if not found or not after:
        return None
    ids = tokenizer.encode(after, add_special_tokens=False)
    special = set(tokenizer.all_special_ids) | {
        int(i) for i, token in tokenizer.added_tokens_decoder.items() if token.special
    }
    return int(ids[0]) if ids and ids[0] in special else None


def stop_token_ids(tokenizer: PreTrainedTokenizerBase, *, chat_template: bool) -> tuple[int, ...]:
    """Tokens that end a response: `<eos>`, and with the chat template its end-of-turn token
    (a base model such as Qwen2.5-Math has `<|endoftext|>` as eos but closes turns with
    `<|im_end|>`)."""
    stops: list[int] = []
    if tokenizer.eos_token_id is not None:
        stops.append(int(tokenizer.eos_token_id))
    if chat_template:
        _require_chat_template(tokenizer)
        end = end_of_turn_token_id(tokenizer)
        if end is not None and end not in stops:
            stops.append(end)
    return tuple(stops)


def build_prompt_codec(
    task: TaskConfig, rollout: RolloutConfig, tokenizer: PreTrainedTokenizerBase
) -> PromptCodec:
    """The run's codec: `task`'s prompt layout, `rollout`'s sampling, `tokenizer`'s stops."""
    stops = stop_token_ids(tokenizer, chat_template=task.chat_template)
    codec = PromptCodec(
        tokenizer=tokenizer,
        sampling=rollout.sampling_params(stop_token_ids=stops),
        chat_template=task.chat_template,
        system_prompt=task.system_prompt,
        instruction_suffix=task.instruction_suffix,
    )
    if task.chat_template:
        log.info("prompts use the tokenizer's chat template; responses stop at tokens %s", stops)
    return codec


@dataclass(frozen=True)
class PromptCheck:
    """Per-example checks made when the data are read, on the prompt as the engines will see it.

    `max_prompt_tokens`: the context left for the prompt (`rollout.max_model_len`, or the
    model's maximum, minus `rollout.max_new_tokens`); a longer prompt would have its response
    cut short by the context. `required_text`: text the rendered prompt must contain (the math
    verifier reads `\\boxed{...}`, so a prompt that never asks for it earns no reward).
    Returns (problem, detail) or None; the file loader turns a problem into a bad row.
    """

    codec: PromptCodec
    max_prompt_tokens: int | None
    required_text: str | None = None
    context_keys: str = "rollout.max_model_len"

    def __call__(self, example: TaskExample) -> tuple[str, str] | None:
        if self.required_text is not None:
            rendered = self.codec.render(example.prompt)
            if self.required_text not in rendered:
                return (
                    "no_answer_instruction",
                    f"the prompt as the model sees it never mentions {self.required_text}{{}}, "
                    "where the task's verifier reads the answer",
                )
        if self.max_prompt_tokens is not None:
            length = len(self.codec.prompt_token_ids(example.prompt))
            if length > self.max_prompt_tokens:
                return (
                    "prompt_too_many_tokens",
                    f"the prompt is {length} tokens as the model sees it, but only "
                    f"{self.max_prompt_tokens} fit before the response ({self.context_keys} "
                    f"minus rollout.max_new_tokens={self.codec.sampling.max_new_tokens})",
                )
        return None


def build_prompt_check(
    task: TaskConfig,
    rollout: RolloutConfig,
    codec: PromptCodec,
    *,
    model_max_positions: int | None,
) -> Callable[[TaskExample], tuple[str, str] | None]:
    """The `PromptCheck` of a run: the context is `rollout.max_model_len`, or the model's own
    maximum (`model_max_positions`) when that is unset."""
    context = rollout.max_model_len or model_max_positions
    keys = "rollout.max_model_len" if rollout.max_model_len else "the model's max positions"
    return PromptCheck(
        codec=codec,
        max_prompt_tokens=None if context is None else context - rollout.max_new_tokens,
        required_text=BOXED_INSTRUCTION if task.verifier_name == "math" else None,
        context_keys=keys,
    )
