"""`python -m adarl.bench gpu`'s parts at micro sizes on CPU, in this process (the kit's dry run,
tests/unit/bench/test_gpu_kit.py, runs the model build in its own process): the HF engine's
sampling, the DeepSpeed learner under ZeRO-2 and ZeRO-3 with chunked log-probs and activation
checkpointing, the weight push into an HF engine, and the embedded default in-process. The same
code the GPU run executes, so it cannot rot while no GPU is at hand."""

from __future__ import annotations

from pathlib import Path

import pytest

from adarl.bench.gpu import MICRO, format_section, run_part

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("gpu-bench") / "model"
    built = run_part("build", model_dir=directory, work_dir=directory.parent, dry_run=True)
    assert built["device"] == "cpu" and built["parameters"] > 0
    return directory


def test_the_engine_part_samples_every_sequence(model_dir: Path) -> None:
    values = run_part("engine", model_dir=model_dir, work_dir=model_dir.parent, dry_run=True)
    sequences = MICRO.prompts * MICRO.samples_per_prompt
    assert values["sequences"] == sequences
    # Random weights rarely hit the end-of-sequence id: nearly every sequence runs to its limit.
    assert sequences * MICRO.new_tokens // 2 < values["tokens"] <= sequences * MICRO.new_tokens
    assert values["tokens_per_s"] > 0


def test_the_learner_parts_train_and_push_exactly(model_dir: Path) -> None:
    sequences = MICRO.learner_prompts * MICRO.learner_samples_per_prompt
    for part in ("zero2", "zero3"):
        values = run_part(part, model_dir=model_dir, work_dir=model_dir.parent, dry_run=True)
        assert values["zero_stage"] == int(part[-1])
        assert values["sequences"] == sequences
        assert values["response_tokens"] == sequences * MICRO.response_tokens
        assert values["step_s"] > 0 and values["peak_memory_gib"] is None  # CPU: no GPU reading
    push = values["push"]
    assert push["version"] == 1 + MICRO.learner_steps  # the engine holds the trained weights
    assert push["weights_max_abs_error"] == 0.0  # bf16 copied as is
    assert push["logprob_max_abs_error"] < 0.05  # the same bf16 model, two code paths
    assert push["bytes"] > 0 and push["buckets"] >= 1


def test_the_embedded_default_trains_in_process(tmp_path: Path, model_dir: Path) -> None:
    values = run_part("embedded", model_dir=model_dir, work_dir=tmp_path, dry_run=True)
    assert values["steps"] == MICRO.embedded_steps and values["step_s"] > 0
    assert values["learner_on"] == "cpu"
    assert "cluster=in_process" in values["overrides"] and "rollout=hf" in values["overrides"]
    report = {
        "date": "2026-11-26",
        "device": "CPU",
        "gpu_memory_gib": None,
        "python": "3",
        "torch": "t",
        "cuda": None,
        "transformers": "x",
        "deepspeed": "d",
        "sizes": {**MICRO.__dict__},
        "parts": {
            "embedded": {"ok": True, "values": values},
            "zero2": {"ok": False, "error": "RuntimeError: boom", "values": {}},
        },
    }
    section = format_section(report)
    assert section.startswith("## GPU\n")
    assert f"{values['step_s']} s per step" in section
    # Parts left out of the call say so, not blank; a failed part's row names its error once.
    assert section.count("not run in this call") == 4  # the model, engine, ZeRO-3 and push rows
    zero2_row = next(line for line in section.splitlines() if "ZeRO-2 step" in line)
    assert zero2_row.endswith("| failed: RuntimeError: boom |")
