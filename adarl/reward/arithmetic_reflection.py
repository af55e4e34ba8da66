"""The unverifiable variant of the built-in arithmetic task: scored through the reference answer's
likelihood only (DRO's R3, adarl/reward/r3.py), with the exact verifier kept aside to check it.

The prompts, splits and held-out evaluation are the arithmetic task's (adarl/tasks/arithmetic.py);
what changes is the training reward (`dro.reward=r3`, experiment `dro`). R3 needs the reference
scored after each rollout's reasoning, but the tiny policy answers without reasoning: its response
is the answer itself. So the rollout's answer is *restated* as an expression whose value it is,

    context   = <bos> {rollout answer} +0=        reference = {reference answer} <eos>

and the policy's own arithmetic says how likely the reference is to follow from it: likely when
the rollout reached the reference, unlikely otherwise. (The mix's `3d+-0` and `3d*1` levels teach
the policy "x+0=" → x.) The original prompt is left out of the context: with it, the tiny policy
reads "12+7-3=15+0=" as a new expression and the reference's likelihood no longer tracks the
rollout (measured: correlation ≈ 0 with the exact verifier; restated: ≈ 0.7, docs/benchmarks.md
"DRO"). The masked-reasoning baseline restates nothing: "<bos>+0=".

This template lives with R3, not in adarl/tasks: tasks import the verifiers (reward), so a
reward module importing a task would close a cycle. It is also apart from adarl/tasks/arithmetic.py
on purpose: the tiny model's cache key hashes that module's source, and this variant does not
change the warm start.
"""

from __future__ import annotations

from transformers import PreTrainedTokenizerBase

from adarl.reward.exact import ExactMatchVerifier
from adarl.types import Rollout, TaskExample

RESTATEMENT_SUFFIX = "+0="


class ArithmeticRestatement:
    """`ReflectionTemplate` of the unverifiable arithmetic variant (module docstring)."""

    def __init__(self, *, tokenizer: PreTrainedTokenizerBase) -> None:
        if tokenizer.eos_token_id is None:
            raise ValueError("ArithmeticRestatement needs a tokenizer with an eos token")
        self.tokenizer = tokenizer
        # The rollout's answer as the exact verifier reads it (up to an end marker, stripped).
        self._reader = ExactMatchVerifier()

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def _bos(self) -> list[int]:
        bos = self.tokenizer.bos_token_id
        return [] if bos is None else [bos]

    def reference(self, example: TaskExample) -> tuple[int, ...]:
        return (*self._encode(example.answer), self.tokenizer.eos_token_id)

    def context(self, example: TaskExample, rollout: Rollout) -> tuple[int, ...]:
        answer = self._reader.extract_answer(rollout.completion.text)
        return (*self._bos(), *self._encode(answer + RESTATEMENT_SUFFIX))

    def masked_context(self, example: TaskExample, rollout: Rollout) -> tuple[int, ...]:
        return (*self._bos(), *self._encode(RESTATEMENT_SUFFIX))
