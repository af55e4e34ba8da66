"""The built-in tiny policy fitted to the run's task, before anything starts.

adarl builds the tiny policy from the task it trains on (its vocabulary and warm start come from
the task's training split: adarl/models/task_warm_start.py), so on any task but the built-in
arithmetic one it also takes its lengths from the task and checks that the task's verifier can
score what it is taught to write. `python -m adarl.launch` calls `fit_builtin_policy` after
validation and before it writes `config.yaml`, so the resolved config holds what the run uses:

* **Lengths.** `rollout.max_new_tokens` and `eval.max_new_tokens` are raised to the longest
  response the policy is taught to write (the answer, or the reference solution with
  `model.tiny.sft_response=worked`) with its `<eos>`; `rollout.max_model_len` to the longest
  prompt as the model sees it plus that response; `model.tiny.max_position_embeddings` to the
  context. A value that already fits is kept (the presets' values, e.g. task=reasoning_gym's,
  are those of the measured runs), and a key the command line sets is never changed: if it is too
  small, the run is refused, naming the keys and the values that fit
  (`adarl.models.loading.check_policy_lengths`).
* **Verifier.** The policy's taught response to each of the first `VERIFIER_PROBE` training
  examples is scored by the run's verifier; if fewer than half of them earn full reward (e.g.
  `task.verifier=math`, which reads a `\\boxed{}` answer, on a policy taught to write `66`), no
  response the policy learns could be rewarded, and the run is refused naming `task.verifier`.
  The code verifier, which runs each response as a program, is not probed.

A real model's lengths are the user's to set (its responses are its own reasoning, not the
task's answers): `adarl.config.real_model` refuses the tiny defaults on it, and a prompt longer
than its context is a bad row when the data are read. Callers of `adarl.run.run` other than the
launcher call `fit_builtin_policy` themselves when they want the same.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING

from adarl.config.model import TINY_ARITHMETIC
from adarl.errors import InputError

if TYPE_CHECKING:
    from adarl.config import AdarlConfig
    from adarl.types import TaskExample

log = logging.getLogger("adarl")

VERIFIER_PROBE = 64  # training examples whose taught response the verifier must reward
LENGTH_KEYS = (
    "rollout.max_new_tokens",
    "eval.max_new_tokens",
    "rollout.max_model_len",
    "model.tiny.max_position_embeddings",
)


def fits_builtin_policy(config: AdarlConfig) -> bool:
    """Whether `fit_builtin_policy` has anything to do: the built-in tiny policy on a task other
    than the built-in arithmetic one (whose lengths its own defaults and presets hold)."""
    from adarl.models.loading import is_builtin_task

    return config.model.name_or_path == TINY_ARITHMETIC and not is_builtin_task(config.task)


def fit_builtin_policy(config: AdarlConfig, *, explicit: Collection[str] = ()) -> list[str]:
    """Fit `config` (in place) to its task when its policy is the built-in tiny one (module
    docstring); returns the changes as `key old -> new`. `explicit`: the keys the user set,
    which are checked but never changed. Raises `InputError` naming the keys to set."""
    if not fits_builtin_policy(config):
        return []
    from adarl.models.loading import (
        check_policy_lengths,
        task_lengths,
        task_splits,
        task_warm_start,
    )

    try:
        _, tokenizer = task_warm_start(config.model.tiny, config.task)
        train, test = task_splits(config.task)
    except (ValueError, OSError) as error:  # a missing file, a bad row: the user's input
        raise InputError(str(error)) from error
    check_verifier(config, train)
    lengths = task_lengths(config, tokenizer, [*train, *test])
    if lengths is None:
        return []
    rollout, evaluation, tiny = config.rollout, config.eval, config.model.tiny
    changes: list[str] = []

    def raise_to(key: str, owner: object, attribute: str, needed: int) -> None:
        current = getattr(owner, attribute)
        if key in explicit or (current is not None and current >= needed):
            return
        setattr(owner, attribute, needed)
        changes.append(f"{key} {current} -> {needed}")

    raise_to("rollout.max_new_tokens", rollout, "max_new_tokens", lengths.response)
    raise_to("eval.max_new_tokens", evaluation, "max_new_tokens", lengths.response)
    responses = max(rollout.max_new_tokens, evaluation.max_new_tokens)
    if rollout.max_model_len is not None:
        raise_to("rollout.max_model_len", rollout, "max_model_len", lengths.context(responses))
    context = rollout.max_model_len or lengths.context(responses)
    raise_to("model.tiny.max_position_embeddings", tiny, "max_position_embeddings", context)
    try:
        config.validate()
        check_policy_lengths(config, tokenizer, train, test)
    except ValueError as error:  # an explicit key too small for the task
        raise InputError(
            f"{error} (the run sizes {', '.join(LENGTH_KEYS)} to the task itself unless the "
            "command line sets them)"
        ) from error
    if changes:
        log.info(
            "the built-in tiny policy is sized to the task (its longest %s is %d tokens, its "
            "longest prompt %d): %s; set a key on the command line to fix its value",
            "reference solution" if lengths.worked else "answer",
            lengths.response,
            lengths.prompt,
            ", ".join(changes),
        )
    return changes


def check_verifier(config: AdarlConfig, train: Sequence[TaskExample]) -> None:
    """Refuse a verifier that scores what the built-in policy is taught to write as wrong."""
    from adarl.models.task_warm_start import response_of
    from adarl.reward.registry import build_verifier

    name = config.task.verifier_name
    if name == "code" or not train:
        return
    worked = config.model.tiny.sft_response == "worked"
    verifier = build_verifier(name, config.reward)
    probe = train[:VERIFIER_PROBE]
    scored = [(e, verifier.verify(response_of(e, worked=worked), e).reward) for e in probe]
    missed = [example for example, reward in scored if reward < 1.0]
    if 2 * len(missed) <= len(probe):
        return
    example = missed[0]
    what = "its worked solution" if worked else "the answer alone"
    shown = response_of(example, worked=worked)
    raise InputError(
        f"task.verifier={name} gives {len(missed)} of the first {len(probe)} training examples "
        f"no reward for the response the built-in tiny policy is taught to write ({what}: "
        f"{shown!r} for the answer {example.answer!r}), so nothing it learns would be rewarded: "
        "set task.verifier=exact_match (what an unset task.verifier gives the built-in policy), "
        "or train a model that answers in that verifier's format (model.name_or_path=DIR)"
    )
