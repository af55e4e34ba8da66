"""Structured config of the policy model: which weights, where built-ins are cached, and how the
built-in tiny model is built and warm-started.

`ModelConfig`
    name_or_path: a Hugging Face model directory or hub name, loaded with the standard
        `AutoModelForCausalLM`/tokenizer code, or a built-in name, built locally and cached:
        `adarl/tiny-arithmetic` (≈0.4M parameters, character tokenizer, warm-started from `tiny`
        on the task the run trains on: the built-in arithmetic task by default, or any other
        task, whose training split then gives its vocabulary and warm-start data) or
        `adarl/mid-math` (a fixed ≈32M-parameter Qwen2 with a byte-level BPE tokenizer trained
        locally and a ChatML chat template, randomly initialised: it exercises real lengths and
        the chat template on CPU, it does not solve anything; adarl/models/mid.py).
    cache_dir: where built-in models are cached (`<cache_dir>/models/<config hash>`); None means
        `$ADARL_CACHE_DIR` or, if unset, `~/.cache/adarl`.
    tiny: architecture and warm start of the built-in tiny model (ignored for other models).

Precision is not a model key: each side that holds weights says its own. `learner.precision`
("fp32" or "bf16": the learners load and train in it; adarl/config/learner.py) and
`rollout.dtype` ("float32", "bfloat16", "float16": the engines' weights; adarl/config/rollout.py).
On CPU keep the defaults (fp32 / float32); a real model on GPUs usually wants
`model=hf model.name_or_path=... learner.precision=bf16 rollout.dtype=bfloat16`. The built-in
tiny model is always built and cached in float32.

`TinyModelConfig` (a `Qwen2ForCausalLM`, the architecture vLLM's CPU and GPU builds both load)
    hidden_size, intermediate_size, num_hidden_layers, num_attention_heads, num_key_value_heads:
        transformer shape; defaults give ≈0.42M parameters.
    max_position_embeddings: longest sequence (prompt + response) in tokens.
    init_seed: seed of the random initialisation.
    sft_steps: optimiser steps of the supervised warm start on the built-in task's train split
        (0: no warm start, a random policy). The default is tuned so the base policy has a spread
        of pass rates at temperature 1 (many prompts at p≈0 and p≈1 and a band between).
    sft_max_steps, sft_max_minutes: tasks other than the built-in (files, `datasets`,
        reasoning-gym): the warm start's budget, the most steps and the most minutes (0 steps: no
        warm start). The minutes become a step budget through the measured cost of a step on the
        task's prompt lengths (the same steps, and weights, on any machine: longer prompts, fewer
        steps), and a machine slower than that is stopped by the wall clock. It stops earlier once
        its policy is clearly above the answers' prior (adarl/models/task_warm_start.py).
    sft_stop_lead, sft_stop_lead_se: tasks other than the built-in: the warm start stops at the
        first check (every 25 steps) where training prompts held aside from it (128, never
        trained on), sampled 4 times each at temperature 1, pass above both the best constant
        answer and the guesser on the same prompts by at least `sft_stop_lead` (a share: 0.05
        is 5 points) and `sft_stop_lead_se` paired standard errors: the task learned, not its
        prior.
    sft_batch_size: (prompt, answer) pairs per warm-start step.
    sft_learning_rate: peak AdamW learning rate (built-in task: linear warm-up over 5% of steps,
        cosine decay; other tasks: warm-up over 20 steps, then constant, as they stop early).
    sft_weight_decay: AdamW weight decay.
    sft_response: what the warm start teaches the policy to write: "answer" (the answer alone,
        the default) or "worked" (its worked solution `47*30=1410,47*8=376,1410+376=1786`, the
        steps the hint levels are read from, adarl/hints/arithmetic.py, so a hint is the start of
        the policy's own solution). "worked" needs `reward.exact_match.answer_marker="="` and
        responses of up to ~34 tokens; the preset `model=tiny_worked` sets all three. On another
        task "worked" teaches each example's reference solution (`task.fields.reference_solution`).
        "steps": the built-in task's reference steps as given, one `a<op>b=c` per operation in
        evaluation order (`47+38=85,85+15=100`; a one-step problem is its one step), scored on
        the answer after the last "=" (`task=worked` sets it up).
    sft_hinted_share: share of the warm start's task pairs shown with a hint of a random usable
        level (adarl/models/hint_warm_start.py), so hinted prompts are a format the policy knows.
        The built-in task only (its hints are arithmetic).
    sft_hinted_levels: names of the built-in task's levels the warm start never shows whole:
        each of their pairs shows a prefix of the steps as a hint (1 to n-2 of n steps) and the
        whole solution as the response, so the policy has written those lengths only after
        being given their start (the worked task's gap: `task=worked`). [] = none.
    sft_length_buckets: batch pairs of similar length together (less padding: about 3x faster on
        the worked task, whose responses run from 9 to 77 tokens); false keeps the recipe's
        batches as they always were (the built-in default's weights unchanged).
    sft_seed: seed of the warm-start data (i.i.d. train-split draws) and their order.
    sft_num_threads: torch threads during the warm start (1 keeps it fair on shared cores).
"""

from __future__ import annotations

from dataclasses import dataclass, field

TINY_ARITHMETIC = "adarl/tiny-arithmetic"
SFT_RESPONSES = ("answer", "worked", "steps")
# Longest worked solution of the default arithmetic mix, in characters (= tokens of the character
# tokenizer) with <eos>: 86*90=7740,86*4=344,7740+344=8084 (checked by enumeration in the tests).
WORKED_RESPONSE_TOKENS = 34
MID_MATH = "adarl/mid-math"
BUILTIN_MODELS: tuple[str, ...] = (TINY_ARITHMETIC, MID_MATH)
# The mid-size built-in's longest sequence (its recipe is fixed: adarl/models/mid.py). Here so that
# validation can check lengths against it without importing torch.
MID_MATH_MAX_POSITIONS = 4096


@dataclass
class TinyModelConfig:
    hidden_size: int = 128
    intermediate_size: int = 384
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    max_position_embeddings: int = 256
    init_seed: int = 0
    sft_steps: int = 800
    sft_batch_size: int = 64
    sft_learning_rate: float = 1e-3
    sft_weight_decay: float = 0.01
    sft_response: str = "answer"
    sft_hinted_share: float = 0.25
    sft_hinted_levels: list[str] = field(default_factory=list)
    sft_length_buckets: bool = False
    sft_seed: int = 0
    sft_num_threads: int = 1
    sft_max_steps: int = 10_000
    sft_max_minutes: float = 4.0
    sft_stop_lead: float = 0.05
    sft_stop_lead_se: float = 3.0

    def validate(self) -> None:
        positive = (
            "hidden_size",
            "intermediate_size",
            "num_hidden_layers",
            "num_attention_heads",
            "num_key_value_heads",
            "max_position_embeddings",
            "sft_batch_size",
            "sft_num_threads",
        )
        for key in positive:
            if getattr(self, key) < 1:
                raise ValueError(f"model.tiny.{key} must be >= 1, got {getattr(self, key)}")
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"model.tiny.hidden_size ({self.hidden_size}) must be divisible by "
                f"model.tiny.num_attention_heads ({self.num_attention_heads})"
            )
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"model.tiny.num_attention_heads ({self.num_attention_heads}) must be divisible "
                f"by model.tiny.num_key_value_heads ({self.num_key_value_heads})"
            )
        for key in ("sft_steps", "sft_max_steps"):
            if getattr(self, key) < 0:
                raise ValueError(f"model.tiny.{key} must be >= 0, got {getattr(self, key)}")
        if self.sft_response not in SFT_RESPONSES:
            raise ValueError(
                f"model.tiny.sft_response={self.sft_response!r} must be one of {SFT_RESPONSES}"
            )
        if not 0.0 <= self.sft_hinted_share <= 1.0:
            raise ValueError(
                f"model.tiny.sft_hinted_share={self.sft_hinted_share} must be in [0, 1]"
            )
        if not self.sft_max_minutes > 0:
            raise ValueError(f"model.tiny.sft_max_minutes must be > 0, got {self.sft_max_minutes}")
        # A lead of 0 would stop a policy that writes the answers' prior.
        if not 0.0 < self.sft_stop_lead <= 1.0:
            raise ValueError(f"model.tiny.sft_stop_lead={self.sft_stop_lead} must be in (0, 1]")
        if self.sft_stop_lead_se < 0:
            raise ValueError(
                f"model.tiny.sft_stop_lead_se must be >= 0, got {self.sft_stop_lead_se}"
            )
        if self.sft_learning_rate <= 0:
            raise ValueError(
                f"model.tiny.sft_learning_rate must be > 0, got {self.sft_learning_rate}"
            )


@dataclass
class ModelConfig:
    name_or_path: str = TINY_ARITHMETIC
    cache_dir: str | None = None
    tiny: TinyModelConfig = field(default_factory=TinyModelConfig)

    @property
    def is_builtin(self) -> bool:
        return self.name_or_path in BUILTIN_MODELS

    @property
    def builtin_max_positions(self) -> int | None:
        """A built-in model's longest sequence in tokens (None for other models)."""
        if self.name_or_path == TINY_ARITHMETIC:
            return self.tiny.max_position_embeddings
        if self.name_or_path == MID_MATH:
            return MID_MATH_MAX_POSITIONS
        return None

    def validate(self) -> None:
        if not self.name_or_path:
            raise ValueError(
                f"model.name_or_path is empty; set it to a model directory, a hub name or one "
                f"of the built-ins {list(BUILTIN_MODELS)}"
            )
        if self.name_or_path.startswith("adarl/") and not self.is_builtin:
            raise ValueError(
                f"model.name_or_path {self.name_or_path!r} is not a built-in model; "
                f"built-ins are {list(BUILTIN_MODELS)}"
            )
        self.tiny.validate()
