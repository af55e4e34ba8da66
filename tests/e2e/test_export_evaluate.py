"""A run keeps its final policy as a Hugging Face model, a checkpoint exports to the same model,
and `python -m adarl.evaluate` reproduces the run's own evaluations from them.

One short run is shared: 2 steps of the embedded default on the short warm start, in-process
(the vLLM engine and the DeepSpeed learner in the driver: no Ray cluster to start), 16 held-out
prompts × 8 samples. `adarl.evaluate` runs as the command, in its own process: it builds its
in-process vLLM engine from the run's config, as training builds its engines.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from _launch import launch, output_tail
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, GenerationConfig

from adarl.bench.regime import BINS, level_rows, load_source
from adarl.bench.regime import main as regime_main
from adarl.checkpoint import load_checkpoint
from adarl.export import read_export_info, read_run_config
from adarl.models.loading import load_tokenizer, policy_tokenizer, resolve_model_config
from adarl.tasks.arithmetic import DEFAULT_LEVELS

RUN = (
    "+experiment=ada_seq_balance",
    "model.tiny.sft_steps=120",
    "trainer.total_steps=2",
    "allocator.prompts_per_step=8",
    "eval.every_steps=0",
    "eval.num_prompts=16",
    "eval.final_samples_per_prompt=8",
    "cluster=in_process",
    "logger.mode=disabled",
)
FINAL = "step_000002"


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The run directory and the run's console output."""
    run_dir = tmp_path_factory.mktemp("export") / "run"
    proc = launch(run_dir, *RUN)
    assert proc.returncode == 0, output_tail(proc)
    return run_dir, proc.stdout


def _module(name: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", name, *args], capture_output=True, text=True, timeout=600, env=env
    )


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_run_keeps_its_final_policy_as_a_hugging_face_model(
    finished_run: tuple[Path, str],
) -> None:
    run_dir, console = finished_run
    model = (run_dir / "model").absolute()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["model_dir"] == str(model)
    assert summary["time_per_stage_s"]["export"] < 2.0  # one gather and one save of 0.4M weights
    assert f"final model (Hugging Face: transformers, vLLM): {model}" in console.splitlines()[-2]
    assert {
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        "generation_config.json",
        "adarl_export.json",
        "adarl_config.yaml",
    } <= {path.name for path in model.iterdir()}
    assert not [p.name for p in run_dir.iterdir() if p.name.startswith(".model")]  # no scratch

    config = read_run_config(run_dir / "config.yaml")
    assert read_run_config(model / "adarl_config.yaml") == config
    info = read_export_info(model)
    assert info is not None
    assert (info["step"], info["weight_version"], info["final"]) == (2, 2, True)
    assert info["checkpoint"] == str((run_dir / "checkpoints" / FINAL).absolute())

    # adarl's tokenizer loader reads the export as the run's policy tokenizer.
    tokenizer = load_tokenizer(str(model))
    assert tokenizer.get_vocab() == policy_tokenizer(config).get_vocab()
    generation = GenerationConfig.from_pretrained(model)
    assert generation.eos_token_id == tokenizer.eos_token_id
    assert generation.pad_token_id == tokenizer.pad_token_id
    assert generation.bos_token_id == tokenizer.bos_token_id
    assert generation.do_sample and generation.temperature == config.eval.temperature
    assert (generation.top_p, generation.top_k) == (1.0, 0)
    assert generation.max_new_tokens == config.eval.max_new_tokens

    policy = AutoModelForCausalLM.from_pretrained(model).eval()
    base = AutoModelForCausalLM.from_pretrained(resolve_model_config(config.model)).state_dict()
    trained = policy.state_dict()
    assert any(not torch.equal(trained[name], base[name]) for name in base)  # the trained policy
    prompt = torch.tensor([tokenizer("12+7=")["input_ids"]])
    torch.manual_seed(0)
    drawn = policy.generate(prompt, attention_mask=torch.ones_like(prompt))  # the run's defaults
    assert prompt.shape[1] < drawn.shape[1] <= prompt.shape[1] + config.eval.max_new_tokens


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_evaluating_the_final_checkpoint_reproduces_the_runs_final_evaluation(
    finished_run: tuple[Path, str], tmp_path: Path
) -> None:
    """The checkpoint is exported by a fresh learner, and the export evaluated by a fresh engine,
    in another process: the same requests, seeds, engine calls and weights as the run's final
    evaluation, so the same samples (every pass@k by level equal, and the logged completions)."""
    run_dir, _ = finished_run
    checkpoint = run_dir / "checkpoints" / FINAL
    out = tmp_path / "final.json"
    proc = _module("adarl.evaluate", str(checkpoint), "--out", str(out))
    assert proc.returncode == 0, output_tail(proc)
    assert "pass@1" in proc.stdout and f"wrote {out}" in proc.stdout
    # vLLM's start-up warnings (on CPU: "CPU backend doesn't allow to use
    # `torch.set_num_threads`", once per thread) and DeepSpeed's export go to the log file.
    log = tmp_path / "final.log"
    assert f"goes to {log}" in proc.stdout
    assert "CPU backend" not in proc.stdout + proc.stderr, output_tail(proc)
    if not torch.cuda.is_available():
        assert "CPU backend doesn't allow to use `torch.set_num_threads`" in log.read_text()

    record = json.loads(out.read_text())
    summary = json.loads((run_dir / "summary.json").read_text())
    assert record["evaluation"] == summary["final_evaluation"]
    logged = [
        row
        for row in map(json.loads, (run_dir / "completions.jsonl").read_text().splitlines())
        if row["step"] == 2
    ]
    assert logged and record["completions"] == logged
    config = read_run_config(run_dir / "config.yaml")
    exported = run_dir / "exports" / FINAL
    assert record["target"]["model"] == str(exported.absolute())
    assert (record["target"]["kind"], record["target"]["step"]) == ("checkpoint", 2)
    assert record["seeds"]["eval"] == config.eval.seed
    assert (record["engine"], record["samples_per_prompt"]) == ("vllm", 8)
    assert [p["correct"] for p in record["per_prompt"]] and record["export_s"] > 0

    # The checkpoint's export is the run's own final model, bit for bit.
    final = load_file(run_dir / "model" / "model.safetensors")
    again = load_file(exported / "model.safetensors")
    assert final.keys() == again.keys()
    assert all(torch.equal(final[name], again[name]) for name in final)
    assert read_export_info(exported)["final"] is False  # type: ignore[index]


@pytest.mark.slow
def test_the_regime_command_reads_the_runs_own_evaluations(
    finished_run: tuple[Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """`python -m adarl.bench regime RUN_DIR` on a real run (its evaluations.jsonl and metrics):
    every level of the task, each histogram a partition of its prompts, the guesser read."""
    run_dir, _ = finished_run
    source = load_source(run_dir)
    rows = {str(row["level"]): row for row in level_rows(source)}
    assert rows["all"]["prompts"] == 16 and len(rows) > 2  # the held-out draw spans levels
    assert sum(row["prompts"] for level, row in rows.items() if level != "all") == 16
    for row in rows.values():
        assert sum(row[name] for name, _ in BINS) == pytest.approx(1.0)
        if row["unsolved_at_base"]:  # the final evaluation holds the same prompts
            assert 0 <= row["unsolved_now_solved"] <= 1
        else:
            assert row["unsolved_now_solved"] is None
    assert rows["all"]["guess_pass_at_1"] is not None
    assert regime_main([str(run_dir), "--markdown"]) == 0
    assert "| all | 16 |" in capsys.readouterr().out


@pytest.mark.heavy
@pytest.mark.timeout(900)
def test_evaluating_the_base_model_with_the_runs_config_reproduces_its_base_evaluation(
    finished_run: tuple[Path, str], tmp_path: Path
) -> None:
    """The base evaluation is kept prompt by prompt in the checkpoint: the same counts. Heavy
    (25-35 s, most of it importing vLLM in a second process): `make test` keeps the final
    checkpoint's reproduction, which runs the same evaluation code."""
    run_dir, _ = finished_run
    out = tmp_path / "base.json"
    proc = _module(
        "adarl.evaluate", "adarl/tiny-arithmetic", "--config", str(run_dir), "--out", str(out)
    )
    assert proc.returncode == 0, output_tail(proc)
    record = json.loads(out.read_text())
    base = load_checkpoint(run_dir / "checkpoints" / FINAL).objects["driver"]["base_eval"]
    assert [p["correct"] for p in record["per_prompt"]] == base["correct"]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert record["evaluation"] == summary["base_evaluation"]


@pytest.mark.slow
def test_the_evaluate_command_names_the_levels_and_keeps_library_output_in_its_log(
    tmp_path: Path,
) -> None:
    """The cheapest real path: the built-in model (the warm start the run above uses) on the HF
    engine, in its own process. Its table names the arithmetic levels, as the task does; what the
    libraries print (transformers' weight-loading progress bars, the warm start's build) is in
    the log beside the JSON, and the console holds adarl's own lines only."""
    out = tmp_path / "tiny.json"
    proc = _module(
        "adarl.evaluate",
        "adarl/tiny-arithmetic",
        "model.tiny.sft_steps=120",
        "rollout=hf",
        "eval.num_prompts=24",
        "eval.final_samples_per_prompt=2",
        "--out",
        str(out),
    )
    assert proc.returncode == 0, output_tail(proc)
    # Without the redirect, transformers' "Loading weights: 100%|███|" bars would be here.
    assert all("[adarl]" in line for line in proc.stderr.splitlines()), output_tail(proc)
    log = tmp_path / "tiny.log"
    console = proc.stdout.splitlines()
    assert console[0].endswith(f"goes to {log}") and log.stat().st_size > 0
    assert all(line.startswith(("adarl.evaluate: ", "  ")) for line in console), console
    # The table's rows: "  <level>  <prompts>  <pass@1>% ..." (the guesser's rows are indented).
    rows = [
        line.split()[0]
        for line in console
        if line.startswith("  ") and not line.startswith("    ") and line.split()[1].isdigit()
    ]
    names = [level.name for level in DEFAULT_LEVELS]
    assert rows == ["all", *names]  # 24 prompts hold every level
    record = json.loads(out.read_text())
    assert record["level_names"] == {str(i): name for i, name in enumerate(names)}
    assert list(record["evaluation"]["by_level"]) == [str(i) for i in range(len(names))]
