"""The one builder of a run's `Evaluator`, used by training (adarl/session.py) and by
`python -m adarl.evaluate`, so that both evaluate the same prompts with the same settings and
seeds: the first `eval.num_prompts` held-out prompts of the task, `eval.*` sampling, the guesser
drawing from the training answers, and the best constant answer scored by the task's verifier.
"""

from __future__ import annotations

from collections.abc import Sequence

from adarl.config import AdarlConfig
from adarl.config.seeds import seed_or_default
from adarl.config.tasks import TaskConfig
from adarl.evaluation.evaluator import Evaluator, difficulty_label
from adarl.reward.base import Verifier
from adarl.rollout.codec import PromptCodec
from adarl.tasks.baselines import constant_answer_applies
from adarl.tasks.build import arithmetic_levels, build_test_examples
from adarl.tasks.files import PromptCheck
from adarl.types import TaskExample


def build_evaluator(
    config: AdarlConfig,
    *,
    codec: PromptCodec,
    verifier: Verifier,
    check_prompt: PromptCheck | None,
    train_examples: Sequence[TaskExample],
) -> Evaluator | None:
    """The held-out evaluation of `config`'s task, for a policy that `codec` encodes for; None
    when the task has no held-out set (a file task without `task.test_path` or
    `task.test_fraction`). `verifier` and `check_prompt` are the run's (the held-out rows are
    vetted as the training rows are); `train_examples` are its training split."""
    examples = build_test_examples(config.task, verifier=verifier, check_prompt=check_prompt)
    if config.eval.num_prompts:
        examples = examples[: config.eval.num_prompts]
    if not examples:
        return None
    return Evaluator(
        examples=examples,
        codec=codec,
        samples_per_prompt=config.eval.samples_per_prompt,
        final_samples_per_prompt=config.eval.final_samples_per_prompt,
        temperature=config.eval.temperature,
        max_new_tokens=config.eval.max_new_tokens,
        greedy=config.eval.greedy,
        completions_to_log=config.eval.completions_to_log,
        seed=seed_or_default(config.eval.seed),
        train_examples=train_examples,  # the guesser draws their answers
        # ...and the best constant answer is scored by the task's own verifier
        verifier=verifier if constant_answer_applies(config.task.verifier_name) else None,
    )


def level_names(task: TaskConfig) -> dict[str, str]:
    """Each difficulty label of `task`'s prompts (`difficulty_label`) -> its level's name, for
    tables: the arithmetic task's levels by name ("4" -> "2d+-2d"); empty for other sources,
    whose difficulties are their own numbers."""
    if task.source != "arithmetic":
        return {}
    levels = arithmetic_levels(task.arithmetic)
    return {difficulty_label(float(index)): level.name for index, level in enumerate(levels)}
