"""Structured config of the prompt source (`task`): where prompts come from and how rows map to
`TaskExample`s.

`TaskConfig`
    source: "arithmetic" (the built-in task, `arithmetic` below), "reasoning_gym" (a
        reasoning-gym generator, `reasoning_gym` below), or a local file source:
        "jsonl", "parquet", "datasets" (a directory written by `Dataset.save_to_disk`, read with
        `datasets.load_from_disk`; never the hub) or "auto" (inferred from `path`: `.jsonl`,
        `.parquet`, or a `save_to_disk` directory).
    verifier: name of the verifier that scores this task's responses ("exact_match", "math",
        "code", ...; see adarl/reward); stamped on every example as `TaskExample.task`. File
        sources: None (the default) follows the policy: "exact_match" for the built-in tiny
        policy, which writes the answer alone, "math" (the last `\\boxed{}` of a response) for
        any other model (`AdarlConfig.resolve_verifier`); a verifier that cannot score what the
        built-in policy is taught to write is refused at start (adarl/models/fit.py). The
        arithmetic source always uses "arithmetic", reasoning-gym its own.
    path: the training prompts (file sources).
    test_path: held-out prompts for evaluation (file sources; optional).
    test_fraction: with no `test_path`, hold out this fraction of `path`'s prompts for evaluation
        (file sources). None (the default): `DEFAULT_TEST_FRACTION` (0.1) of `path` without a
        `test_path`, none with one; 0 = no held-out set, and the run reports none. The held-out
        prompts are the round(fraction × prompts) ones with the smallest hash of (`split_seed`,
        prompt text): disjoint from training, the same in every run, identical prompts on the
        same side.
    split_seed: seed of that hash. Not derived from the root `seed` (like the data seeds of the
        arithmetic task), so runs of several seeds train and evaluate on the same split.
    split: the split to read when a `datasets` directory holds a `DatasetDict`.
    fields: which columns hold the example's parts (`FieldsConfig`).
    on_bad_row: "error" stops at the first bad row with a message naming the file, the row and
        the problem; "skip" drops bad rows and counts them per problem
        (`sampling/data_rows_skipped_<problem>` in the source's metrics).
    max_prompt_chars: a longer prompt (in characters) is a bad row.
    shuffle: visit the prompts in a seeded random order, reshuffled every epoch (else file order).
    seed: seed of that order; None (default) = derived from the root `seed`
        (adarl/config/seeds.py).
    chat_template: render each prompt with the tokenizer's own chat template (the model
        directory's `chat_template`) as one user turn, followed by the template's assistant
        header (its generation prompt). False (default) = raw text: `<bos>` + text, the layout
        the built-in tiny model is trained on. The same rendering is used in training,
        evaluation and hinted prompts (adarl/rollout/codec.py); a model without a template is
        refused when the run starts.
    system_prompt: text of a system turn before the user turn (needs `chat_template`); None =
        no system turn (a template may still insert its own default one).
    instruction_suffix: text appended to every prompt, after a hint if there is one (e.g.
        " Let's think step by step and output the final answer within \\boxed{}."); applied
        in both layouts. "" = none.
    arithmetic: the built-in task (`ArithmeticConfig`).
    reasoning_gym: reasoning-gym's generators (`ReasoningGymConfig`; `source: reasoning_gym`).

`FieldsConfig` (column names; a dotted path reads nested records: "reward_model.ground_truth",
"prompt.0.content")
    prompt: the prompt text (required in every row; must be a non-empty string).
    answer: what the verifier compares against (required; strings are kept, numbers are written
        with `str`, lists/dicts as JSON — the code verifier's tests).
    reference_solution: a worked solution for the hint generator (optional column).
    difficulty: a number (optional column).
    id: a unique prompt id (optional column; default `<file name>:<row>`).

`ArithmeticConfig` (adarl/tasks/arithmetic.py; the mix is documented in docs/tasks_and_rewards.md)
    num_train_prompts: distinct training prompts served by the prompt source.
    num_test_prompts: size of the fixed held-out split.
    seed: which training prompts are drawn (the held-out split does not depend on it).
    test_seed: which held-out prompts are drawn.
    split_seed, test_fraction: the train/test partition: a prompt is held out iff a hash of
        (split_seed, prompt) is below test_fraction. Changing them changes both splits.
    levels: the difficulty mix (`ArithmeticLevelConfig` list); None = the documented default.

`ReasoningGymConfig` (adarl/tasks/reasoning_gym.py; needs the optional extra `adarl[tasks]`)
    name: the generator, e.g. "leg_counting", "gcd", "basic_arithmetic" (an unknown name fails
        with the closest ones).
    config: the generator's own keys (its difficulty parameters), e.g. {max_animals: 3}; a key
        it does not have fails, naming those it has. Not `seed` or `size` (below).
    num_train_prompts: entries drawn for training (repeated questions and held-out questions
        are then dropped, so the source may hold fewer).
    num_test_prompts: entries drawn for the held-out set.
    seed, test_seed: the generator's seed for each split. Entry i is drawn from seed + i, so the
        ranges [seed, seed + num_train_prompts) and [test_seed, test_seed + num_test_prompts)
        must not overlap (checked). Not derived from the root `seed`.
    difficulty_key: a numeric metadata field (dotted path) that is the prompt's difficulty; None
        = the first declared difficulty attribute with a per-item value that is a level
        (docs/tasks_and_rewards.md).

`ArithmeticLevelConfig`
    name: label of the level.
    operand_ranges: inclusive [low, high] range of each operand, e.g. [[10, 99], [0, 9]] for
        two-digit plus one-digit ("47+8="); [[100, 999], [1, 1]] for "x+1", "x*1" forms.
    operators: the operators drawn from, a subset of "+-*".
    weight: the level's share of the mix (normalised over the levels).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

SOURCES = ("arithmetic", "reasoning_gym", "jsonl", "parquet", "datasets", "auto")
FILE_SOURCES = ("jsonl", "parquet", "datasets", "auto")
# The share of a file task's prompts held out for evaluation when it names no test file.
DEFAULT_TEST_FRACTION = 0.1
ON_BAD_ROW = ("error", "skip")


@dataclass
class FieldsConfig:
    prompt: str = "prompt"
    answer: str = "answer"
    reference_solution: str | None = None
    difficulty: str | None = None
    id: str | None = None


@dataclass
class ArithmeticLevelConfig:
    name: str = "level"
    operand_ranges: list[list[int]] = field(default_factory=lambda: [[0, 9], [0, 9]])
    operators: str = "+-"
    weight: float = 1.0


@dataclass
class ArithmeticConfig:
    num_train_prompts: int = 1024
    num_test_prompts: int = 256
    seed: int = 0
    test_seed: int = 1234
    split_seed: int = 0
    test_fraction: float = 0.2
    levels: list[ArithmeticLevelConfig] | None = None

    def validate(self) -> None:
        for key in ("num_train_prompts", "num_test_prompts"):
            if getattr(self, key) < 1:
                raise ValueError(f"task.arithmetic.{key}={getattr(self, key)} must be >= 1")
        if not 0 < self.test_fraction < 1:
            raise ValueError(
                f"task.arithmetic.test_fraction={self.test_fraction} must be in (0, 1)"
            )
        if self.levels is not None and not self.levels:
            raise ValueError(
                "task.arithmetic.levels is empty; give at least one level or null for the default"
            )
        for i, level in enumerate(self.levels or ()):
            ranges = level.operand_ranges
            if len(ranges) < 2 or not all(
                len(r) == 2 and 0 <= r[0] <= r[1] <= 9999 for r in ranges
            ):
                raise ValueError(
                    f"task.arithmetic.levels[{i}].operand_ranges={ranges} needs at least 2 "
                    "operands, each [low, high] with 0 <= low <= high <= 9999"
                )
            if not level.operators or set(level.operators) - set("+-*"):
                raise ValueError(
                    f"task.arithmetic.levels[{i}].operators={level.operators!r} must be a "
                    "non-empty subset of '+-*'"
                )
            if not level.weight > 0:
                raise ValueError(f"task.arithmetic.levels[{i}].weight={level.weight} must be > 0")


@dataclass
class ReasoningGymConfig:
    name: str | None = None
    config: dict[str, Any] = field(default_factory=dict)
    num_train_prompts: int = 4096
    num_test_prompts: int = 256
    seed: int = 0
    test_seed: int = 1_000_000_000
    difficulty_key: str | None = None

    def validate(self) -> None:
        if not self.name:
            raise ValueError(
                "task.source=reasoning_gym: set task.reasoning_gym.name to a generator, e.g. "
                "task.reasoning_gym.name=leg_counting"
            )
        for key in ("num_train_prompts", "num_test_prompts"):
            if getattr(self, key) < 1:
                raise ValueError(f"task.reasoning_gym.{key}={getattr(self, key)} must be >= 1")
        train = (self.seed, self.seed + self.num_train_prompts)
        test = (self.test_seed, self.test_seed + self.num_test_prompts)
        if train[0] < test[1] and test[0] < train[1]:
            raise ValueError(
                f"task.reasoning_gym: training entries draw seeds [{train[0]}, {train[1]}) and "
                f"held-out entries [{test[0]}, {test[1]}), which overlap (entry i is drawn from "
                "seed + i); move task.reasoning_gym.test_seed past the training range"
            )


@dataclass
class TaskConfig:
    source: str = "arithmetic"
    verifier: str | None = None
    path: str | None = None
    test_path: str | None = None
    test_fraction: float | None = None
    split_seed: int = 0
    split: str | None = None
    fields: FieldsConfig = field(default_factory=FieldsConfig)
    on_bad_row: str = "error"
    max_prompt_chars: int = 8192
    shuffle: bool = True
    seed: int | None = None
    chat_template: bool = False
    system_prompt: str | None = None
    instruction_suffix: str = ""
    arithmetic: ArithmeticConfig = field(default_factory=ArithmeticConfig)
    reasoning_gym: ReasoningGymConfig = field(default_factory=ReasoningGymConfig)

    def validate(self) -> None:
        if self.system_prompt is not None and not self.chat_template:
            raise ValueError(
                "task.system_prompt needs task.chat_template=true (a system turn exists only in "
                "a chat template); with raw text, put the instruction in "
                "task.instruction_suffix instead"
            )
        if self.source not in SOURCES:
            raise ValueError(f"task.source={self.source!r} must be one of {SOURCES}")
        if self.on_bad_row not in ON_BAD_ROW:
            raise ValueError(f"task.on_bad_row={self.on_bad_row!r} must be one of {ON_BAD_ROW}")
        if self.max_prompt_chars < 1:
            raise ValueError(f"task.max_prompt_chars={self.max_prompt_chars} must be >= 1")
        given = self.test_fraction or 0.0  # what the user set: None holds out the default
        if not 0.0 <= given < 1.0:
            raise ValueError(
                f"task.test_fraction={self.test_fraction} must be in [0, 1) (e.g. 0.1 holds out "
                "a tenth of task.path for evaluation; 0 = no held-out set)"
            )
        if self.source == "arithmetic" and given > 0:
            raise ValueError(
                f"task.test_fraction={self.test_fraction} applies to file sources; the arithmetic "
                "task holds out task.arithmetic.test_fraction of its prompts: set that instead"
            )
        if self.source == "reasoning_gym":
            if given > 0 or self.test_path or self.path:
                raise ValueError(
                    "task.source=reasoning_gym generates its prompts: unset task.path, "
                    "task.test_path and task.test_fraction (task.reasoning_gym.num_test_prompts "
                    "sizes the held-out set)"
                )
            if self.verifier not in (None, "reasoning_gym"):
                raise ValueError(
                    f"task.verifier={self.verifier!r}: reasoning-gym prompts are scored by their "
                    "dataset's own score_answer (verifier 'reasoning_gym'); leave task.verifier "
                    "unset"
                )
            self.reasoning_gym.validate()
            return
        if self.test_path and given > 0:
            raise ValueError(
                f"task.test_path and task.test_fraction={self.test_fraction} both name a held-out "
                "set; set one of them (unset test_fraction to evaluate on test_path)"
            )
        if self.source == "arithmetic":
            if self.verifier not in (None, "arithmetic"):
                raise ValueError(
                    f"task.verifier={self.verifier!r}: the arithmetic task is scored by the "
                    "'arithmetic' verifier; leave task.verifier unset"
                )
            self.arithmetic.validate()
            return
        if not self.path:
            raise ValueError(
                f"task.source={self.source!r} reads prompts from a file: set task.path"
            )
        if not self.verifier:
            raise ValueError(
                f"task.source={self.source!r}: set task.verifier to the verifier that scores "
                "these prompts (e.g. 'math' or 'code')"
            )
        if not self.fields.prompt or not self.fields.answer:
            raise ValueError("task.fields.prompt and task.fields.answer must name columns")

    @property
    def held_out_fraction(self) -> float:
        """The share of `path` held out for evaluation: `test_fraction`, its None resolved (the
        default share without a `test_path`, none with one or for a generated task)."""
        if self.test_fraction is not None:
            return self.test_fraction
        if self.source in FILE_SOURCES and not self.test_path:
            return DEFAULT_TEST_FRACTION
        return 0.0

    @property
    def verifier_name(self) -> str:
        """The verifier of this task (the arithmetic source implies 'arithmetic', reasoning-gym
        'reasoning_gym')."""
        if self.source in ("arithmetic", "reasoning_gym"):
            return self.source
        return str(self.verifier)
