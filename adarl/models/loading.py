"""Resolve and load policies: built-in names are built and cached, everything else is plain HF.

`resolve_model_path` is the one place a model name becomes a path: for a built-in it returns the
cached build (building it the first time), for anything else the name unchanged, which the engines
and `load_policy` hand to the standard `from_pretrained` loaders exactly as on a cluster.
Built-ins: `adarl/tiny-arithmetic` (adarl/models/tiny.py) and `adarl/mid-math`
(adarl/models/mid.py). A built-in's tokenizer is rebuilt by name without building the model
(`load_tokenizer`, adarl/models/tokenizer_loading.py), so the data can be checked before any
model exists.

The tiny model learns the task the run trains on (`resolve_model_config(model, task=...)`,
`policy_tokenizer(config)`): on the built-in arithmetic task its own recipe and vocabulary
(unchanged: the same weights and cache key as always); on any other task the vocabulary and a
light warm start come from that task's training split (adarl/models/task_warm_start.py), and a
task whose prompts or answers do not fit its lengths is refused before anything is built.
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import json
import logging
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    PreTrainedTokenizerFast,
    Qwen2ForCausalLM,
)

from adarl.config.model import (
    BUILTIN_MODELS,
    MID_MATH,
    TINY_ARITHMETIC,
    ModelConfig,
    TinyModelConfig,
)
from adarl.models.mid import build_mid_model_dir
from adarl.models.tiny import AuxiliaryPairs, build_tiny_model_dir
from adarl.models.tokenizer import build_task_char_tokenizer
from adarl.models.tokenizer_loading import load_tokenizer

if TYPE_CHECKING:
    from adarl.config import AdarlConfig
    from adarl.config.tasks import ArithmeticConfig, TaskConfig
    from adarl.models.task_warm_start import TaskWarmStartData, TaskWarmStartStats
    from adarl.types import TaskExample

log = logging.getLogger(__name__)

CACHE_DIR_ENV = "ADARL_CACHE_DIR"


@dataclass
class Policy:
    """A loaded causal LM, its tokenizer and the path both came from."""

    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    path: str


def default_cache_dir() -> Path:
    """`$ADARL_CACHE_DIR`, else `~/.cache/adarl`."""
    configured = os.environ.get(CACHE_DIR_ENV)
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "adarl"


# Settings of the task warm start (adarl/models/task_warm_start.py) that the built-in recipe does
# not read: left out of its cache key, which stays what it always was.
TASK_RECIPE_KEYS = ("sft_max_steps", "sft_max_minutes", "sft_stop_lead", "sft_stop_lead_se")


def _arithmetic_split(arithmetic: ArithmeticConfig | None) -> dict[str, object]:
    """`sample_examples` keywords of the configured mix; {} for the documented default."""
    if arithmetic is None:
        return {}
    from adarl.tasks.arithmetic import DEFAULT_SPLIT_SEED, DEFAULT_TEST_FRACTION
    from adarl.tasks.build import arithmetic_levels

    split: dict[str, object] = {}
    if arithmetic.levels is not None:
        split["levels"] = arithmetic_levels(arithmetic)
    if arithmetic.split_seed != DEFAULT_SPLIT_SEED:
        split["split_seed"] = arithmetic.split_seed
    if arithmetic.test_fraction != DEFAULT_TEST_FRACTION:
        split["test_fraction"] = arithmetic.test_fraction
    return split


def _arithmetic_pairs(
    tiny: TinyModelConfig, split: dict[str, object] | None = None
) -> list[tuple[str, str]]:
    from adarl.models.hint_warm_start import task_pairs_with_hints
    from adarl.tasks.arithmetic import sample_examples

    # One fresh i.i.d. train-split draw per training example: nothing repeats to be memorised.
    # A share of them is shown with a hint (adarl/models/hint_warm_start.py).
    examples = sample_examples(
        "train",
        tiny.sft_steps * tiny.sft_batch_size,
        seed=tiny.sft_seed,
        **(split or {}),  # type: ignore[arg-type]
    )
    return task_pairs_with_hints(
        examples,
        share=tiny.sft_hinted_share,
        seed=tiny.sft_seed,
        worked=tiny.sft_response == "worked",
        steps=tiny.sft_response == "steps",
        prefix_hinted_levels=_prefix_hinted_levels(tiny, split),
    )


def _prefix_hinted_levels(
    tiny: TinyModelConfig, split: dict[str, object] | None
) -> frozenset[float]:
    """The difficulties (level indices) of the levels `model.tiny.sft_hinted_levels` names."""
    if not tiny.sft_hinted_levels:
        return frozenset()
    from adarl.tasks.arithmetic import DEFAULT_LEVELS

    levels = (split or {}).get("levels", DEFAULT_LEVELS)
    names = [level.name for level in levels]  # type: ignore[attr-defined]
    unknown = sorted(set(tiny.sft_hinted_levels) - set(names))
    if unknown:
        raise ValueError(
            f"model.tiny.sft_hinted_levels names {unknown}, which are not levels of the task "
            f"(its levels: {names}); name levels of task.arithmetic.levels"
        )
    return frozenset(float(i) for i, name in enumerate(names) if name in tiny.sft_hinted_levels)


def _arithmetic_fingerprint(split: dict[str, object] | None = None) -> str:
    # The generator's source and default mix stand in for the data: hashing ~40k generated
    # pairs would cost seconds on every load, this costs microseconds and still changes
    # whenever the task's code or levels do (and the hint rows', adarl/models/hint_warm_start.py).
    from adarl.models.hint_warm_start import hint_data_fingerprint
    from adarl.tasks import arithmetic

    digest = hashlib.sha256(inspect.getsource(arithmetic).encode())
    digest.update(repr(arithmetic.DEFAULT_LEVELS).encode())
    if split:  # a configured mix or split (the default adds nothing: the key stays as it was)
        digest.update(repr(sorted(split.items())).encode())
    return "arithmetic:" + digest.hexdigest()[:16] + "+" + hint_data_fingerprint()


def _arithmetic_hint_mode(tiny: TinyModelConfig) -> list[AuxiliaryPairs]:
    from adarl.models.hint_warm_start import arithmetic_hint_mode_auxiliary

    if tiny.sft_response == "steps":
        # Hint mode's rows are the bare task's template hints (the hint reader's format); a policy
        # that writes its steps is hinted by a prefix of them (sft_hinted_levels). With them the
        # worked task's warm start trained twice the rows, none of its own format.
        return []
    return arithmetic_hint_mode_auxiliary(tiny.sft_steps, seed=tiny.sft_seed)


def is_builtin_task(task: TaskConfig | None) -> bool:
    """Whether the tiny model takes the built-in task's recipe: no task given, or the arithmetic
    source (its configured mix and split included)."""
    return task is None or task.source == "arithmetic"


def _task_key(task: TaskConfig) -> str:
    """The task's settings and a hash of what each of its files holds (a file rewritten in
    place is new data; a `datasets` directory by its files' names, sizes and times)."""
    files = []
    for path in (task.path, task.test_path):
        if path and os.path.isfile(path):
            files.append((path, hashlib.sha256(Path(path).read_bytes()).hexdigest()))
        elif path and os.path.isdir(path):
            listing = sorted(
                (str(p), p.stat().st_size, p.stat().st_mtime_ns)
                for p in Path(path).rglob("*")
                if p.is_file()
            )
            files.append((path, hashlib.sha256(repr(listing).encode()).hexdigest()))
    return json.dumps([dataclasses.asdict(task), files], sort_keys=True, default=str)


_SPLITS: dict[str, tuple[tuple[TaskExample, ...], tuple[TaskExample, ...]]] = {}


def task_splits(task: TaskConfig) -> tuple[tuple[TaskExample, ...], tuple[TaskExample, ...]]:
    """(training, held-out) examples of `task` as its builders make them with the default
    verifier and no prompt check (cached per task and file version in this process). The tiny
    model's vocabulary and warm start read the first only."""
    from adarl.tasks.build import build_prompt_source, build_test_examples

    key = _task_key(task)
    if key not in _SPLITS:
        if len(_SPLITS) >= 4:
            _SPLITS.clear()
        train = tuple(build_prompt_source(task).examples)
        _SPLITS[key] = (train, tuple(build_test_examples(task)))
    return _SPLITS[key]


def task_warm_start(
    tiny: TinyModelConfig, task: TaskConfig
) -> tuple[TaskWarmStartData, PreTrainedTokenizerFast]:
    """The warm-start data and the vocabulary of a task other than the built-in."""
    from adarl.models.task_warm_start import PROBE_PROMPTS, task_warm_start_data

    train, _ = task_splits(task)
    data = task_warm_start_data(
        train,
        instruction_suffix=task.instruction_suffix,
        worked=tiny.sft_response == "worked",
        probe_prompts=PROBE_PROMPTS,
    )
    return data, build_task_char_tokenizer(data.characters)


def resolve_model_path(
    name_or_path: str,
    *,
    cache_dir: str | Path | None = None,
    tiny: TinyModelConfig | None = None,
    task: TaskConfig | None = None,
) -> str:
    """A path or hub name `from_pretrained` understands; builds (once) and caches built-ins.
    `task`: the task the tiny model is warm-started on (None: the built-in task)."""
    if name_or_path not in BUILTIN_MODELS:
        return name_or_path
    root = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    if name_or_path == MID_MATH:
        return str(build_mid_model_dir(root))
    if name_or_path != TINY_ARITHMETIC:
        raise AssertionError(f"built-in {name_or_path!r} has no recipe")
    tiny = tiny or TinyModelConfig()
    if not is_builtin_task(task):
        assert task is not None
        return str(_build_task_model(tiny, task, root, name_or_path))
    split = _arithmetic_split(None if task is None else task.arithmetic)
    return str(
        build_tiny_model_dir(
            tiny,
            train_pairs=lambda: _arithmetic_pairs(tiny, split),
            auxiliary=lambda: _arithmetic_hint_mode(tiny),
            data_fingerprint=_arithmetic_fingerprint(split),
            cache_root=root,
            name=name_or_path,
            ignore_keys=TASK_RECIPE_KEYS,
        )
    )


def _build_task_model(tiny: TinyModelConfig, task: TaskConfig, root: Path, name: str) -> Path:
    from adarl.models.task_warm_start import (
        CHECK_EVERY_STEPS,
        task_step_budget,
        warm_start_until_above_prior,
    )

    data, tokenizer = task_warm_start(tiny, task)
    built: list[TaskWarmStartStats] = []

    def train(model: Qwen2ForCausalLM, tokenizer: PreTrainedTokenizerBase) -> TaskWarmStartStats:
        steps = task_step_budget(
            model,
            data,
            max_steps=tiny.sft_max_steps,
            max_minutes=tiny.sft_max_minutes,
            batch_size=tiny.sft_batch_size,
        )
        log.info(
            "warm-starting the tiny model on %s: %d training prompts, %d characters, at most %d "
            "steps (model.tiny.sft_max_steps=%d, or what model.tiny.sft_max_minutes=%g buys on "
            "these prompts), until held-aside training prompts pass clearly above the best "
            "constant answer and the guesser (by %g points and %g SE: model.tiny.sft_stop_lead, "
            "sft_stop_lead_se)",
            _task_label(task),
            len(data.pairs) + len(data.probe),
            len(data.characters),
            steps,
            tiny.sft_max_steps,
            tiny.sft_max_minutes,
            100 * tiny.sft_stop_lead,
            tiny.sft_stop_lead_se,
        )
        stats = warm_start_until_above_prior(
            model,
            tokenizer,
            data,
            min_lead=tiny.sft_stop_lead,
            min_lead_in_se=tiny.sft_stop_lead_se,
            max_steps=steps,
            max_minutes=tiny.sft_max_minutes,
            check_every_steps=CHECK_EVERY_STEPS,
            batch_size=tiny.sft_batch_size,
            learning_rate=tiny.sft_learning_rate,
            weight_decay=tiny.sft_weight_decay,
            seed=tiny.sft_seed,
        )
        built.append(stats)
        return stats

    path = build_tiny_model_dir(
        tiny,
        tokenizer=tokenizer,
        train=train,
        data_fingerprint=data.fingerprint,
        cache_root=root,
        name=name,
    )
    for stats in built:
        log.info(
            "warm start on %s: %d of %d steps in %.1f minutes (stopped by %s); held-aside "
            "training prompts pass at %.1f%%, the best constant answer (%r) at %.1f%%, the "
            "guesser at %.1f%%: %s; cached in %s",
            _task_label(task),
            stats.steps,
            stats.step_budget,
            stats.minutes,
            stats.stopped_by,
            100 * stats.held_aside_accuracy,
            stats.best_constant_answer,
            100 * stats.best_constant_accuracy,
            100 * stats.guesser_accuracy,
            "clearly above both"
            if stats.above_prior
            else f"not clearly above them (lead {100 * stats.lead_over_constant:+.1f} points, "
            f"{_in_se(stats.lead_over_constant, stats.lead_over_constant_se)} SE over the "
            f"constant; {100 * stats.lead_over_guesser:+.1f}, "
            f"{_in_se(stats.lead_over_guesser, stats.lead_over_guesser_se)} SE over the guesser)",
            path,
        )
    return path


def _in_se(lead: float, se: float) -> str:
    if se > 0:
        return f"{lead / se:+.1f}"
    return "0" if lead == 0 else f"{math.copysign(math.inf, lead):+}"


def _task_label(task: TaskConfig) -> str:
    if task.source == "reasoning_gym":
        return f"reasoning-gym {task.reasoning_gym.name!r}"
    return f"{task.path} ({task.source})"


def resolve_model_config(config: ModelConfig, *, task: TaskConfig | None = None) -> str:
    """`resolve_model_path` for a `ModelConfig`; `task`: the task the run trains on (the tiny
    model is warm-started on it; None: the built-in task)."""
    config.validate()
    return resolve_model_path(
        config.name_or_path, cache_dir=config.cache_dir, tiny=config.tiny, task=task
    )


def policy_tokenizer(config: AdarlConfig) -> PreTrainedTokenizerBase:
    """The tokenizer of the run's policy, before any model is built: the built-in tiny model's
    vocabulary for the run's task, or the model's own. A tiny model whose task's prompts or
    answers do not fit its lengths (and a reasoning-gym task whose answers do not fit
    `rollout.max_new_tokens` on any model) is refused here, naming the sizes and keys."""
    model, task = config.model, config.task
    if model.name_or_path == TINY_ARITHMETIC and not is_builtin_task(task):
        _, tokenizer = task_warm_start(model.tiny, task)
        assert isinstance(tokenizer, PreTrainedTokenizerBase)
        check_policy_lengths(config, tokenizer, *task_splits(task))
        return tokenizer
    tokenizer = load_tokenizer(model.name_or_path)
    if task.source == "reasoning_gym":
        check_policy_lengths(config, tokenizer, *task_splits(task))
    return tokenizer


@dataclass(frozen=True)
class TaskLengths:
    """What a task asks of a policy's lengths, in its tokenizer's tokens."""

    response: int  # the longest response it is taught to write (answer or solution), with <eos>
    prompt: int  # the longest prompt as the model sees it (<bos>, instruction suffix)
    longest_response: TaskExample  # the example that response belongs to
    # The response is the reference solution (model.tiny.sft_response=worked or steps).
    worked: bool

    @property
    def shown(self) -> str:
        """The longest response's text, as the messages quote it."""
        example = self.longest_response
        return (example.reference_solution or "") if self.worked else example.answer

    def context(self, max_new_tokens: int) -> int:
        """Positions a rollout of the longest prompt needs with `max_new_tokens` of response."""
        return self.prompt + max(self.response, max_new_tokens)


def task_lengths(
    config: AdarlConfig, tokenizer: PreTrainedTokenizerBase, examples: Sequence[TaskExample]
) -> TaskLengths | None:
    """The longest response and prompt of `examples` under `tokenizer` (None without examples)."""
    if not examples:
        return None
    worked = config.model.name_or_path == TINY_ARITHMETIC and config.model.tiny.sft_response in (
        "worked",
        "steps",
    )
    eos = 1 if tokenizer.eos_token_id is not None else 0
    bos = 1 if tokenizer.bos_token_id is not None else 0
    suffix = config.task.instruction_suffix

    def response_tokens(example: TaskExample) -> int:
        text = (example.reference_solution or "") if worked else example.answer
        return len(tokenizer.encode(text, add_special_tokens=False)) + eos

    longest_response = max(examples, key=response_tokens)
    prompt = bos + max(
        len(tokenizer.encode(e.prompt + suffix, add_special_tokens=False)) for e in examples
    )
    return TaskLengths(
        response=response_tokens(longest_response),
        prompt=prompt,
        longest_response=longest_response,
        worked=worked,
    )


def check_policy_lengths(
    config: AdarlConfig,
    tokenizer: PreTrainedTokenizerBase,
    train: Sequence[TaskExample],
    test: Sequence[TaskExample],
) -> None:
    """Refuse a task whose responses (the answer, or the reference solution the tiny model is
    taught with `sft_response=worked`) need more tokens than the run generates, or whose prompts
    leave no room for them, naming the longest of each and the keys that fix it."""
    lengths = task_lengths(config, tokenizer, [*train, *test])
    if lengths is None:
        return
    tiny = config.model.name_or_path == TINY_ARITHMETIC
    response = lengths.response
    rollout, evaluation = config.rollout, config.eval
    positions = config.model.tiny.max_position_embeddings if tiny else None
    context = rollout.max_model_len or positions
    problems, fixes = [], []
    short = [
        f"{key}={tokens}"
        for key, tokens in (
            ("rollout.max_new_tokens", rollout.max_new_tokens),
            ("eval.max_new_tokens", evaluation.max_new_tokens),
        )
        if tokens < response
    ]
    if short:
        what = "reference solution" if lengths.worked else "answer"
        problems.append(
            f"its longest {what} is {response} tokens with <eos> "
            f"({lengths.longest_response.prompt_id!r}: {lengths.shown!r}) but {' and '.join(short)}"
        )
        fixes += [f"{item.split('=')[0]}={response}" for item in short]
    # The prompt must leave room for a whole response (rollout.max_new_tokens, after the fix).
    needed = lengths.context(rollout.max_new_tokens)
    if context is not None and needed > context:
        limit = (
            f"rollout.max_model_len={rollout.max_model_len}"
            if rollout.max_model_len
            else f"the model's max positions ({context})"
        )
        problems.append(
            f"its longest prompt is {lengths.prompt} tokens as the model sees it, and with "
            f"{needed - lengths.prompt} response tokens needs {needed} positions but {limit}"
        )
        fixes.append(f"rollout.max_model_len={needed}")
        if positions is not None and needed > positions:
            fixes.append(f"model.tiny.max_position_embeddings={needed}")
    if problems:
        raise ValueError(
            f"the task does not fit the policy's lengths: {'; '.join(problems)}. To fix: set "
            + " ".join(fixes)
            + " (or choose shorter prompts/answers, e.g. a smaller generator config)"
        )


def model_max_positions(config: ModelConfig) -> int | None:
    """The model's longest sequence (`max_position_embeddings`) without loading its weights:
    from the recipe for built-ins, from its `config.json` otherwise (None if it has none)."""
    if config.builtin_max_positions is not None:
        return config.builtin_max_positions
    hf_config = AutoConfig.from_pretrained(config.name_or_path)
    positions = getattr(hf_config, "max_position_embeddings", None)
    return int(positions) if positions is not None else None


def load_policy(
    name_or_path: str,
    *,
    cache_dir: str | Path | None = None,
    tiny: TinyModelConfig | None = None,
    dtype: str = "float32",
) -> Policy:
    """Load model and tokenizer the way a cluster does (`AutoModelForCausalLM`), in eval mode."""
    path = resolve_model_path(name_or_path, cache_dir=cache_dir, tiny=tiny)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype))
    model.eval()
    return Policy(model=model, tokenizer=load_tokenizer(path), path=path)


def build_policy(config: ModelConfig) -> Policy:
    """`load_policy` for a `ModelConfig`, in float32 (precision is not a model key: the learner
    and the engines set their own, `learner.precision` and `rollout.dtype`)."""
    config.validate()
    return load_policy(config.name_or_path, cache_dir=config.cache_dir, tiny=config.tiny)
