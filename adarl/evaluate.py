"""`python -m adarl.evaluate TARGET [overrides...]`: held-out pass@k of a model, run or checkpoint.

    python -m adarl.evaluate RUN_DIR                          # its final model, the run's task
    python -m adarl.evaluate RUN_DIR/checkpoints/step_000012  # exported first (adarl/export.py)
    python -m adarl.evaluate RUN_DIR task=jsonl task.path=train.jsonl task.test_path=test.jsonl
    python -m adarl.evaluate MODEL_DIR eval.final_samples_per_prompt=16 --out eval.json
    python -m adarl.evaluate adarl/tiny-arithmetic --config RUN_DIR   # the run's base model

TARGET is a run directory (its final model `RUN_DIR/model`, or its latest checkpoint if it has
none yet), a checkpoint (exported to `RUN_DIR/exports/step_NNNNNN` once and reused while the
checkpoint is unchanged), a Hugging Face model directory, or a built-in model name (built as
training builds it from the config).

The config is the run's resolved one (`RUN_DIR/config.yaml`; an exported model's copy,
`adarl_config.yaml`), or `--config RUN_DIR|FILE`; a model from elsewhere gets adarl's defaults
with `model.name_or_path=MODEL_DIR`. Overrides are composed over it by Hydra with the schema and
the presets `python -m adarl.launch` uses (unknown keys fail; a group picks a preset over the
run's values: `task=jsonl`, `rollout=hf`), and the result is validated before anything is
built.

What runs is training's evaluation (the `Evaluator` of `adarl.evaluation.build_evaluator`, the
builder `TrainingSession` uses, run as a run's final evaluation is): the first `eval.num_prompts`
held-out prompts of the task, each sampled `eval.final_samples_per_prompt` times
(`eval.samples_per_prompt` if null) at `eval.temperature` from `eval.seed` (the run's, derived from
its root seed: adarl/config/seeds.py), plus one greedy sample (`eval.greedy`), scored by the task's
verifier; the guesser's pass@k draws from the task's training answers. The engine is
`rollout.engine` built from `rollout.*` by the builder training uses, one in this process: the same
engine code as training's actors without a Ray cluster to start (a request's samples depend on its
seed and the engine's call, not on which engine serves it, so one engine reproduces several). With
the run's config and weights these are the requests, seeds, engine calls
(`rollout.max_samples_per_call`) and weights of the run's final evaluation, which is therefore
reproduced sample for sample (tests/e2e/test_export_evaluate.py).

Output: a pass@k table by level (named as the task names them: `2d+-2d` for the arithmetic
task's level 4; k = 1, 2, 4, … n, each beside the guesser's; coverage) and a JSON file (`--out`;
default `TARGET.evaluation.json` beside the target): `EvalResult.table()` under "evaluation", the
levels' names, what was evaluated (target, model, config, task, engine, seeds, samples), each
held-out prompt's correct count, and the first completions (as `completions.jsonl` logs them).
What the libraries print (vLLM's and transformers' warnings and progress bars, DeepSpeed's when a
checkpoint is exported) goes to a log file beside the JSON (`TARGET.evaluation.log`), as a run's
actors' goes to RUN_DIR/logs; one console line names it.

Exit status: 0 done, 2 bad input (a path, a config, an override), with the input and the fix.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from adarl.config import AdarlConfig
from adarl.config.model import BUILTIN_MODELS
from adarl.config.seeds import seed_or_default
from adarl.evaluation.table import format_table
from adarl.export import (
    EXPORT_CONFIG_FILE,
    RUN_CONFIG_FILE,
    Target,
    TargetError,
    default_export_dir,
    export_checkpoint,
    export_is_current,
    read_export_info,
    resolve_target,
    run_config_of,
)
from adarl.run_summary import paired_text

if TYPE_CHECKING:
    from adarl.evaluation import EvalResult, Evaluator

# One thread per process (as adarl.run): two collapse when another process holds a core, and a
# thread count other than training's engines' could change their arithmetic.
for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")  # the table, not the engine's start-up

_RUN_CONFIG_NAME = "adarl_evaluate_base"


@dataclass(frozen=True)
class EvaluationPlan:
    """What to evaluate, decided and validated before anything is built."""

    target: Target | None  # None for a built-in model name
    model: str  # a built-in name, or the model directory (an export, once written)
    config: AdarlConfig  # the evaluation's: the run's (or defaults) with the overrides
    config_source: str  # the file it came from, or "adarl defaults"
    overrides: tuple[str, ...]
    run_config: AdarlConfig | None  # the run's own, unmodified: how its checkpoint is exported
    out: Path
    step: int | None  # the training step of the weights, when known


def compose_config(base: Path | None, overrides: Sequence[str]) -> AdarlConfig:
    """`base` (a resolved config file; None: adarl's `conf/config.yaml`) with `overrides`,
    composed by Hydra as `adarl.launch` does, then validated (ValueError naming key and fix).

    Over a resolved config every preset group is in the defaults list with no selection (`task:
    null`), so `task=jsonl` selects a preset as on the launch command line and merges it over
    the run's values (Hydra's `_self_` first), and `key=value` sets a value.
    """
    from hydra import compose, initialize_config_dir
    from hydra.core.config_store import ConfigStore
    from omegaconf import OmegaConf

    from adarl.launch import CONFIG_DIR, load_config

    name = "config"
    if base is not None:
        groups = sorted(
            entry.name
            for entry in Path(CONFIG_DIR).iterdir()
            if entry.is_dir() and not entry.name.startswith("_") and entry.name != "experiment"
        )
        node = OmegaConf.create(
            {"defaults": ["adarl_schema", "_self_", *({group: None} for group in groups)]}
        )
        ConfigStore.instance().store(
            name=_RUN_CONFIG_NAME, node=OmegaConf.merge(node, OmegaConf.load(base))
        )
        name = _RUN_CONFIG_NAME
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        cfg = compose(config_name=name, overrides=list(overrides))
    return load_config(cfg)


def _config_file(path: Path) -> Path:
    """`--config`: a run directory (its config.yaml), an exported model or a config file."""
    for candidate in (path / RUN_CONFIG_FILE, path / EXPORT_CONFIG_FILE, path):
        if candidate.is_file():
            return candidate
    raise TargetError(
        f"--config {path}: no {RUN_CONFIG_FILE} or {EXPORT_CONFIG_FILE} there; give a run "
        "directory, an exported model directory or a resolved config file"
    )


def plan_evaluation(
    target: str,
    overrides: Sequence[str],
    *,
    config_from: Path | None = None,
    out: Path | None = None,
) -> EvaluationPlan:
    """Resolve `target`, compose and validate the config; raises TargetError / ValueError (and
    Hydra's or OmegaConf's errors for a bad override) naming the input."""
    overrides = tuple(overrides)
    base: Path | None = None
    if target in BUILTIN_MODELS:
        if config_from is not None:
            base = _config_file(config_from)
        config = compose_config(base, (f"model.name_or_path={target}", *overrides))
        safe = target.replace("/", "_")
        return EvaluationPlan(
            target=None,
            model=target,
            config=config,
            config_source=str(base) if base is not None else "adarl defaults",
            overrides=overrides,
            run_config=None,
            out=out or Path(f"{safe}.evaluation.json"),
            step=None,
        )
    resolved = resolve_target(target, prefer_model=True)
    run_config = None
    step: int | None = None
    if resolved.checkpoint is not None:
        run_config = run_config_of(resolved)  # the checkpoint is exported as its run was built
        model = str(default_export_dir(resolved).absolute())
        step = json.loads((resolved.checkpoint / "manifest.json").read_text()).get("step")
    else:
        assert resolved.model_dir is not None
        model = str(resolved.model_dir.absolute())
        info = read_export_info(resolved.model_dir)
        step = None if info is None else info.get("step")
    extra: tuple[str, ...] = ()
    exported_config = Path(model) / EXPORT_CONFIG_FILE
    if config_from is not None:
        base = _config_file(config_from)
    elif resolved.kind == "model" and exported_config.is_file():
        base = exported_config  # the run's config travels with its exported model
    elif resolved.run_dir is not None and (resolved.run_dir / RUN_CONFIG_FILE).is_file():
        base = resolved.run_dir / RUN_CONFIG_FILE
    else:  # a model from elsewhere: adarl's defaults with it as the policy (the validation
        # then asks for a real model's lengths, naming the keys)
        extra = (f"model.name_or_path={model}",)
    config = compose_config(base, (*extra, *overrides))
    given = str(resolved.given).rstrip("/")
    return EvaluationPlan(
        target=resolved,
        model=model,
        config=config,
        config_source=str(base) if base is not None else "adarl defaults",
        overrides=overrides,
        run_config=run_config,
        out=out or Path(f"{given}.evaluation.json"),
        step=step,
    )


def _evaluator(config: AdarlConfig, tokenizer: Any) -> Evaluator:
    """Training's evaluator for `config` (`build_evaluator`), for a policy with `tokenizer`: the
    codec, the prompt check and the training split built as `TrainingSession` builds them.
    Raises ValueError when the task has no held-out set."""
    from adarl.evaluation import build_evaluator
    from adarl.models.loading import model_max_positions
    from adarl.reward.registry import build_verifier
    from adarl.rollout.codec import build_prompt_check, build_prompt_codec
    from adarl.tasks.build import build_prompt_source

    verifier = build_verifier(config.task.verifier_name, config.reward)
    codec = build_prompt_codec(config.task, config.rollout, tokenizer)
    check_prompt = build_prompt_check(
        config.task,
        config.rollout,
        codec,
        model_max_positions=None
        if config.rollout.max_model_len
        else model_max_positions(config.model),
    )
    prompts = build_prompt_source(config.task, verifier=verifier, check_prompt=check_prompt)
    evaluator = build_evaluator(
        config,
        codec=codec,
        verifier=verifier,
        check_prompt=check_prompt,
        train_examples=prompts.examples,
    )
    if evaluator is None:
        raise ValueError(
            f"task {config.task.source!r} has no held-out set to evaluate on: set task.test_path "
            "(a file of held-out prompts) or task.test_fraction"
        )
    return evaluator


def run_evaluation(plan: EvaluationPlan, *, library_log: Path) -> tuple[EvalResult, dict[str, Any]]:
    """Build the data, export the checkpoint if needed, evaluate; the result and its JSON. Once
    the data is built, what the libraries print (the learner exporting, the engine) goes to
    `library_log`, and this command's own lines to the console."""
    from adarl.cluster import library_output_to
    from adarl.evaluation import EvalKind, level_names
    from adarl.evaluation.records import evaluation_row
    from adarl.models.loading import load_tokenizer, policy_tokenizer, resolve_model_config
    from adarl.reward.registry import build_reward_pool
    from adarl.rollout.pool import build_rollout_pool

    config = plan.config
    start = time.perf_counter()
    target = plan.target
    checkpoint = None if target is None else target.checkpoint
    model_path = Path(plan.model)
    # The data first: a task that cannot be evaluated fails before any weights are touched.
    try:
        if plan.run_config is not None:
            tokenizer = policy_tokenizer(plan.run_config)  # the checkpoint's model's, not built
        elif target is None:
            tokenizer = policy_tokenizer(config)
        else:
            tokenizer = load_tokenizer(str(model_path))
        evaluator = _evaluator(config, tokenizer)
    except ValueError as error:  # the task's data or lengths, refused naming the fix
        raise TargetError(str(error)) from error
    print(
        "adarl.evaluate: library output (vLLM, transformers, torch, DeepSpeed: warnings, "
        f"progress bars) goes to {library_log}"
    )
    exported_s = 0.0
    with library_output_to(library_log) as console:
        if checkpoint is not None:
            assert plan.run_config is not None
            if export_is_current(model_path, checkpoint):
                print(
                    f"adarl.evaluate: {checkpoint} was exported to {model_path}: using it",
                    file=console,
                )
            else:
                print(f"adarl.evaluate: exporting {checkpoint} to {model_path}", file=console)
                export_start = time.perf_counter()
                export_checkpoint(checkpoint, model_path, config=plan.run_config)
                exported_s = time.perf_counter() - export_start
        engine_model = str(model_path)
        if target is None:
            engine_model = resolve_model_config(config.model, task=config.task)
        rewards = build_reward_pool(config.reward, [config.task.verifier_name])
        try:
            pool = build_rollout_pool(
                config.rollout, model_path=engine_model, in_process=True, faults=config.faults
            )
            try:
                # A model on its own is evaluated as a run's final (and base) evaluation is.
                result = evaluator.evaluate(pool, rewards, step=plan.step or 0, kind=EvalKind.FINAL)
            finally:
                pool.shutdown()
        finally:
            rewards.close()
    record = {
        "target": {
            "given": None if target is None else str(target.given),
            "kind": "builtin" if target is None else target.kind,
            "run_dir": None if target is None or target.run_dir is None else str(target.run_dir),
            "checkpoint": None if checkpoint is None else str(checkpoint),
            "model": engine_model,
            "step": plan.step,
        },
        "config": plan.config_source,
        "overrides": list(plan.overrides),
        "task": dataclasses.asdict(config.task),
        "engine": config.rollout.engine,
        "seeds": {"root": config.seed, "eval": seed_or_default(config.eval.seed)},
        "samples_per_prompt": result.samples_per_prompt,
        "temperature": config.eval.temperature,
        "max_new_tokens": config.eval.max_new_tokens,
        "evaluation": result.table(),
        # pass@1 minus the best constant answer's, paired by prompt (None without one).
        "lead_over_best_constant": result.lead_over_best_constant(),
        "level_names": level_names(config.task),  # the table's difficulty labels, named
        # The same prompt by prompt, as a run's evaluations.jsonl holds it (adarl.bench regime).
        "evaluation_row": evaluation_row(step=plan.step or 0, kind=EvalKind.FINAL, result=result),
        "per_prompt": [
            {"prompt_id": example.prompt_id, "level": level, "correct": correct}
            for example, level, correct in zip(
                evaluator.examples, result.levels, result.correct, strict=True
            )
        ],
        # The first sample of the first eval.completions_to_log prompts, as completions.jsonl
        # holds them for the run's evaluations.
        "completions": result.completions,
        "export_s": exported_s,
        "wall_s": time.perf_counter() - start,
    }
    return result, record


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m adarl.evaluate",
        description="Held-out pass@k (by level, beside a guesser's; coverage) of a run's final "
        "model, a checkpoint, a model directory or a built-in model, on the run's task or "
        "another one given by overrides.",
    )
    parser.add_argument(
        "target", help="RUN_DIR, RUN_DIR/checkpoints/step_N, a model directory or built-in name"
    )
    parser.add_argument(
        "overrides", nargs="*", help="Hydra overrides, as for python -m adarl.launch"
    )
    parser.add_argument(
        "--config",
        type=Path,
        default=None,
        help="take the config from this run directory or file instead of the target's",
    )
    parser.add_argument(
        "--out", type=Path, default=None, help="JSON file (default TARGET.evaluation.json)"
    )
    args = parser.parse_intermixed_args(argv)
    try:
        plan = plan_evaluation(args.target, args.overrides, config_from=args.config, out=args.out)
    except Exception as error:  # a bad path, config or override: report it, exit 2
        if not _is_input_error(error):
            raise
        print(f"adarl.evaluate: {error}", file=sys.stderr)
        return 2
    library_log = plan.out.with_suffix(".log")  # beside the JSON
    try:
        result, record = run_evaluation(plan, library_log=library_log)
    except TargetError as error:  # the data (no held-out set, bad rows), a broken checkpoint
        print(f"adarl.evaluate: {error}", file=sys.stderr)
        return 2
    except Exception as error:
        if library_log.exists():
            error.add_note(f"what the libraries printed (vLLM, transformers, torch): {library_log}")
        raise
    plan.out.parent.mkdir(parents=True, exist_ok=True)
    plan.out.write_text(json.dumps(record, indent=2) + "\n")
    target = record["target"]
    step = "" if target["step"] is None else f" (step {target['step']})"
    print(
        f"adarl.evaluate: {target['model']}{step} on task {plan.config.task.source} "
        f"({result.num_prompts} held-out prompts), {result.samples_per_prompt} samples per "
        f"prompt at T={plan.config.eval.temperature:g}, eval.seed "
        f"{record['seeds']['eval']}, engine {record['engine']} ({record['wall_s']:.1f}s)\n"
        f"{format_table(record['evaluation'], record['level_names'])}\n"
        f"{_constant_lines(record)}"
        f"  wrote {plan.out}"
    )
    return 0


def _constant_lines(record: dict[str, Any]) -> str:
    """The best constant answer and pass@1's paired lead over it, as the run's summary prints."""
    constant, lead = record["evaluation"].get("best_constant"), record["lead_over_best_constant"]
    if constant is None:
        return ""
    text = f"  best constant answer {constant['answer']!r}: {100 * constant['accuracy']:.1f}%\n"
    if lead is not None and lead["se"] > 0:
        text += f"  pass@1 above it {paired_text(lead['lead'], lead['se'], lead['prompts'])}\n"
    return text


def _is_input_error(error: Exception) -> bool:
    """A path, config or override the user gave is wrong (not a bug of adarl's)."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    return isinstance(error, TargetError | ValueError | HydraException | OmegaConfBaseException)


if __name__ == "__main__":
    sys.exit(main())
