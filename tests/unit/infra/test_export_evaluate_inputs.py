"""What `python -m adarl.export` and `python -m adarl.evaluate` make of their inputs before any
learner or engine starts: bad paths and configs are refused (exit status 2) naming the input and
the fix; overrides compose over the run's own config as on the launch command line; the
generation config carries the codec's stop tokens and the run's evaluation sampling."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from adarl.config import AdarlConfig
from adarl.evaluate import main as evaluate_main
from adarl.evaluate import plan_evaluation
from adarl.export import generation_settings, resolved_config_yaml
from adarl.export import main as export_main
from adarl.models.tokenizer import build_char_tokenizer
from adarl.rollout.codec import PromptCodec
from adarl.types import SamplingParams


def _run_dir(root: Path, *, seed: int = 0) -> Path:
    """A run directory as launch leaves it before its first checkpoint: config.yaml only."""
    root.mkdir(parents=True)
    (root / "config.yaml").write_text(resolved_config_yaml(AdarlConfig(seed=seed)))
    return root


def _refused(main: object, args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert callable(main)
    assert main(args) == 2
    return capsys.readouterr().err


@pytest.mark.parametrize("main", [evaluate_main, export_main])
def test_paths_that_are_not_runs_checkpoints_or_models_are_refused_with_the_fix(
    main: object, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nowhere"
    err = _refused(main, [str(missing)], capsys)
    assert f"{missing}: no such file or directory" in err
    assert "give a run directory (RUN_DIR, holding config.yaml and checkpoints/)" in err

    (tmp_path / "notes.txt").write_text("x")
    assert "is a file, not a directory" in _refused(main, [str(tmp_path / "notes.txt")], capsys)

    (tmp_path / "empty").mkdir()
    err = _refused(main, [str(tmp_path / "empty")], capsys)
    assert "is neither a run directory (no config.yaml), a checkpoint (no manifest.json)" in err

    run = _run_dir(tmp_path / "run")
    err = _refused(main, [str(run)], capsys)
    assert f"run directory {run} has no complete checkpoint in checkpoints/" in err
    assert "resume it (python -m adarl.launch" in err

    interrupted = run / "checkpoints" / "step_000004"
    interrupted.mkdir(parents=True)
    err = _refused(main, [str(interrupted)], capsys)
    assert "is an incomplete checkpoint (no manifest.json: its save was interrupted)" in err


def test_export_refuses_a_checkpoint_without_its_runs_config_and_a_model_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    checkpoint = tmp_path / "copied" / "checkpoints" / "step_000002"
    checkpoint.mkdir(parents=True)
    (checkpoint / "manifest.json").write_text("{}")
    err = _refused(export_main, [str(checkpoint)], capsys)
    assert "has no config.yaml (the resolved config the run wrote)" in err
    assert "copy the run's config.yaml there" in err

    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "model.safetensors").write_bytes(b"")
    err = _refused(export_main, [str(model)], capsys)
    assert "is already a Hugging Face model directory: nothing to export" in err
    assert f"python -m adarl.evaluate {model}" in err


def test_a_checkpoint_missing_a_file_its_manifest_lists_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    checkpoint = _run_dir(tmp_path / "run") / "checkpoints" / "step_000002"
    checkpoint.mkdir(parents=True)
    manifest = {
        "format": "adarl-checkpoint",
        "version": 1,
        "step": 2,
        "pieces": {"learner": "directory"},
        "files": {"learner": {"step_2/mp_rank_00_model_states.pt": 10}},
    }
    (checkpoint / "manifest.json").write_text(json.dumps(manifest))
    for main in (export_main, evaluate_main):
        err = _refused(main, [str(checkpoint)], capsys)
        assert f"checkpoint {checkpoint} is incomplete" in err
        assert "learner/step_2/mp_rank_00_model_states.pt is missing" in err


def test_bad_overrides_and_values_are_refused_naming_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    err = _refused(evaluate_main, ["adarl/tiny-arithmetic", "eval.no_such_key=1"], capsys)
    assert "eval.no_such_key" in err
    err = _refused(evaluate_main, ["adarl/tiny-arithmetic", "eval.temperature=0"], capsys)
    assert "eval.temperature=0.0 must be > 0" in err
    err = _refused(evaluate_main, ["adarl/tiny-arithmetic", "--config", str(tmp_path)], capsys)
    assert f"--config {tmp_path}: no config.yaml or adarl_config.yaml there" in err


def test_a_task_without_a_held_out_set_is_refused_before_any_engine(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = tmp_path / "train.jsonl"
    rows.write_text(
        "".join(json.dumps({"prompt": f"{i}+1=", "answer": str(i + 1)}) + "\n" for i in range(9))
    )
    err = _refused(
        evaluate_main,
        [
            "adarl/tiny-arithmetic",
            "task=jsonl",
            f"task.path={rows}",
            "task.verifier=exact_match",
            "task.test_fraction=0",
        ],
        capsys,
    )
    assert "has no held-out set to evaluate on: set task.test_path" in err


def test_overrides_compose_over_the_runs_config_as_on_the_launch_command_line(
    tmp_path: Path,
) -> None:
    run = _run_dir(tmp_path / "run", seed=7)
    checkpoint = run / "checkpoints" / "step_000003"
    checkpoint.mkdir(parents=True)
    (checkpoint / "manifest.json").write_text(json.dumps({"step": 3}))
    own = plan_evaluation(str(run), [])
    run_config = AdarlConfig(seed=7)
    assert own.config == run_config  # the run's own config, its derived seeds included
    assert own.target is not None and own.target.checkpoint == checkpoint
    assert own.model == str((run / "exports" / "step_000003").absolute())
    assert own.step == 3 and own.out == Path(f"{run}.evaluation.json")

    other = plan_evaluation(
        str(checkpoint),
        ["task=jsonl", "task.path=/data/train.jsonl", "rollout=hf", "eval.num_prompts=4"],
    )
    config = other.config
    assert (config.task.source, config.task.path, config.task.verifier) == (
        "jsonl",
        "/data/train.jsonl",
        "exact_match",  # task.verifier unset follows the policy: the tiny one writes bare answers
    )
    assert config.rollout.engine == "hf" and config.eval.num_prompts == 4
    assert config.eval.seed == run_config.eval.seed  # the run's evaluation seeds stay
    assert config.rollout.max_samples_per_call == run_config.rollout.max_samples_per_call
    assert other.run_config == run_config  # the checkpoint is exported as the run was built


def test_the_generation_config_holds_the_stop_tokens_and_the_evaluation_sampling() -> None:
    tokenizer = build_char_tokenizer()
    config = AdarlConfig()
    config.eval.temperature, config.eval.max_new_tokens = 0.7, 12
    one_stop = PromptCodec(tokenizer=tokenizer, sampling=SamplingParams(stop_token_ids=(2,)))
    assert generation_settings(config.eval, one_stop) == {
        "eos_token_id": 2,
        "pad_token_id": tokenizer.pad_token_id,
        "bos_token_id": tokenizer.bos_token_id,
        "do_sample": True,
        "temperature": 0.7,
        "top_p": 1.0,
        "top_k": 0,
        "max_new_tokens": 12,
    }
    chat = PromptCodec(tokenizer=tokenizer, sampling=SamplingParams(stop_token_ids=(2, 9)))
    assert generation_settings(config.eval, chat)["eos_token_id"] == [2, 9]  # eos, end of turn
