"""The reasoning-gym verifier (`reward.reasoning_gym`, task.source=reasoning_gym): each example's
entry is drawn again from its prompt id and scored by its dataset's own `score_answer`, mapped to
a binary pass (adarl/tasks/reasoning_gym.py builds the splits and says how; docs/
tasks_and_rewards.md). Here too: the generator access both sides share (the optional package,
the ids, a generator's creation and its checks), so that the tasks package depends on reward and
never the other way round.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from adarl.reward.base import VerifierResult
from adarl.types import TaskExample

TASK_NAME: Final = "reasoning_gym"  # TaskExample.task: the verifier registered under this name
INSTALL_HINT: Final = (
    'install the optional extra: pip install -e ".[tasks]" (make setup installs it)'
)
# Text that ends a response when the engine decodes the end-of-sequence token as text. No
# newline: reasoning-gym answers may span lines (grids, lists).
END_MARKERS: Final = ("<eos>", "</s>", "<|endoftext|>", "<|im_end|>")
_ID = re.compile(
    r"reasoning_gym/(?P<name>[^/]+)/(?P<index>\d+)/seed=(?P<seed>-?\d+),"
    r"size=(?P<size>\d+),config=(?P<config>.*)",
    re.DOTALL,
)


def _package() -> Any:
    try:
        import reasoning_gym
    except ImportError as error:  # the optional extra is missing: say how to get it
        raise ImportError(
            f"task.source=reasoning_gym needs reasoning-gym: {INSTALL_HINT}"
        ) from error
    return reasoning_gym


def canonical_config(config: Mapping[str, Any]) -> str:
    """The generator's configuration as compact JSON with sorted keys (part of every id)."""
    return json.dumps(_plain(config), sort_keys=True, separators=(",", ":"))


def _plain(value: Any) -> Any:
    """OmegaConf containers and tuples as plain JSON-able Python values."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


@dataclass(frozen=True)
class DatasetSpec:
    """One call of `create_dataset`: the generator, its seed and size, its config as JSON."""

    name: str
    seed: int
    size: int
    config_json: str = "{}"

    def prompt_id(self, index: int) -> str:
        return (
            f"{TASK_NAME}/{self.name}/{index}/seed={self.seed},size={self.size},"
            f"config={self.config_json}"
        )


def parse_prompt_id(prompt_id: str) -> tuple[DatasetSpec, int]:
    """(spec, entry index) of an id written by `DatasetSpec.prompt_id`."""
    match = _ID.fullmatch(prompt_id)
    if match is None:
        raise ValueError(
            f"prompt id {prompt_id!r} is not a reasoning-gym id "
            "(reasoning_gym/<name>/<index>/seed=..,size=..,config=..)"
        )
    spec = DatasetSpec(
        name=match["name"],
        seed=int(match["seed"]),
        size=int(match["size"]),
        config_json=match["config"],
    )
    return spec, int(match["index"])


def check_generator(name: str, config: Mapping[str, Any]) -> None:
    """Refuse an unknown generator (naming the closest ones) and keys its config does not have
    (naming those it has), before anything is generated."""
    datasets = _package().factory.DATASETS
    if name not in datasets:
        close = difflib.get_close_matches(name, list(datasets), n=5, cutoff=0.5)
        raise ValueError(
            f"task.reasoning_gym.name={name!r} is not a reasoning-gym generator"
            + (f"; closest: {close}" if close else "")
            + f" ({len(datasets)} generators; python -c 'import reasoning_gym as rg; "
            "print(sorted(rg.factory.DATASETS))' lists them)"
        )
    _, config_class = datasets[name]
    known = [f.name for f in dataclasses.fields(config_class) if f.name not in ("seed", "size")]
    for key in config:
        if key in ("seed", "size"):
            raise ValueError(
                f"task.reasoning_gym.config.{key}: set task.reasoning_gym.seed / test_seed and "
                "num_train_prompts / num_test_prompts instead (each split has its own)"
            )
        if key not in known:
            close = difflib.get_close_matches(key, known, n=3, cutoff=0.5)
            raise ValueError(
                f"task.reasoning_gym.config.{key}: generator {name!r} has no such key"
                + (f" (closest: {close})" if close else "")
                + f"; its keys: {known}"
            )


@functools.lru_cache(maxsize=32)
def create(spec: DatasetSpec) -> Any:
    """The generator object of `spec` (cached: some load word lists when built)."""
    package = _package()
    config = json.loads(spec.config_json)
    check_generator(spec.name, config)
    try:
        return package.create_dataset(spec.name, seed=spec.seed, size=spec.size, **config)
    except (AssertionError, TypeError, ValueError) as error:  # the generator's own validation
        raise ValueError(
            f"reasoning-gym generator {spec.name!r} refused task.reasoning_gym.config="
            f"{spec.config_json}: {type(error).__name__}: {error}"
        ) from error


@functools.lru_cache(maxsize=65536)
def entry(spec: DatasetSpec, index: int) -> dict[str, Any]:
    """Entry `index` of `spec` (deterministic; cached for the verifier, which sees each prompt's
    entry once per sample)."""
    if not 0 <= index < spec.size:
        raise ValueError(f"entry {index} is outside {spec.name}'s {spec.size} entries")
    return create(spec)[index]


def extract_answer(response: str) -> str:
    """The answer in a response: up to the first end marker, then the last `<answer>` tag's
    content if there is one, stripped."""
    end = min((i for m in END_MARKERS if (i := response.find(m)) != -1), default=len(response))
    text = response[:end]
    tagged = re.findall(r"<answer>\s?(.*?)\s?</answer>", text, flags=re.DOTALL)
    return (tagged[-1] if tagged else text).strip()


class ReasoningGymVerifier:
    """Scores a response with its entry's dataset's `score_answer`, as a binary pass (module
    docstring, "Reward"). The entry is drawn again from the example's id, in any process."""

    def __init__(self, *, pass_threshold: float = 1.0) -> None:
        if not 0.0 < pass_threshold <= 1.0:
            raise ValueError(
                f"reward.reasoning_gym.pass_threshold={pass_threshold} must be in (0, 1]"
            )
        self.pass_threshold = pass_threshold

    def score(self, response: str, example: TaskExample) -> float:
        """The dataset's own score of `response`, in [0, 1]."""
        spec, index = parse_prompt_id(example.prompt_id)
        item = entry(spec, index)
        if item["question"] != example.prompt:
            raise ValueError(
                f"prompt {example.prompt_id!r} no longer draws the question it was generated "
                "with (another reasoning-gym version?); regenerate the task"
            )
        return float(create(spec).score_answer(extract_answer(response), item))

    def verify(self, response: str, example: TaskExample) -> VerifierResult:
        return VerifierResult(reward=float(self.score(response, example) >= self.pass_threshold))

    def check_gold(self, example: TaskExample) -> str | None:
        if self.score(example.answer, example) < self.pass_threshold:
            return f"its own answer {example.answer!r} does not pass score_answer"
        return None
