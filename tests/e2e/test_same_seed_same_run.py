"""A seeded run is reproducible on one machine: two runs of the embedded default with the same
seed give the same numbers at every step, the same final evaluation and the same final weights.

The cheapest path that holds every seeded stage `make run` has: the default experiment
(`grpo_anchored`: uniform sampling, mini-batch updates, the KL anchor's reference model)
in-process with the vLLM CPU engine `make run` samples with, a micro tiny model and 2 steps, run
twice with one tiny-model cache: the first run builds the model on the spot, the second finds it
cached. Across machines the numbers differ: the CPU kernels torch, MKL, oneDNN and vLLM pick for
the machine's instruction set (AVX2, AVX-512, AMX) round differently (README,
"Reproducibility").
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from safetensors.torch import load_file

from adarl.launch import CONFIG_DIR, load_config
from adarl.logging import METRICS_FILE, read_metrics_jsonl
from adarl.run import run

RUN = [
    "+experiment=grpo_anchored",
    "model.tiny.hidden_size=64",  # head_dim 32: vLLM's CPU attention needs a multiple of 32
    "model.tiny.intermediate_size=128",
    "model.tiny.num_hidden_layers=1",
    "model.tiny.num_attention_heads=2",
    "model.tiny.num_key_value_heads=1",
    "model.tiny.sft_steps=10",
    "model.tiny.sft_batch_size=16",
    "allocator.prompts_per_step=8",
    "eval.every_steps=0",
    "eval.num_prompts=8",
    "eval.samples_per_prompt=4",
    "eval.final_samples_per_prompt=4",
    "trainer.total_steps=2",
    "checkpoint.every_steps=0",
    "cluster=in_process",
    "logger.mode=disabled",
]


def _of_the_clock(key: str) -> bool:
    """A metric of the machine's speed rather than of the run: times, rates, utilisation."""
    return key.startswith("timing/") or key.endswith(("_per_s", "/wall_s")) or "utilisation" in key


def _run(run_dir: Path, cache: Path) -> tuple[list[dict], dict, dict[str, torch.Tensor]]:
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        config = load_config(
            compose(config_name="config", overrides=[*RUN, f"model.cache_dir={cache}"])
        )
    run(config, run_dir=run_dir)
    rows = [
        {k: v for k, v in row.items() if not _of_the_clock(k)}
        for row in read_metrics_jsonl(run_dir / METRICS_FILE)
    ]
    summary = json.loads((run_dir / "summary.json").read_text())
    return rows, summary, load_file(run_dir / "model" / "model.safetensors")


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_two_runs_with_the_same_seed_give_the_same_numbers(tmp_path: Path) -> None:
    first = _run(tmp_path / "first", tmp_path / "cache")
    again = _run(tmp_path / "again", tmp_path / "cache")
    rows, summary, weights = first
    assert [row["step"] for row in rows] == [0, 1, 2]  # the base evaluation, then 2 steps
    assert rows[-1]["sampling/rollouts"] > 0 and "train/loss" in rows[-1]
    for row, other in zip(rows, again[0], strict=True):
        assert row == other, {k: (v, other.get(k)) for k, v in row.items() if other.get(k) != v}
    assert summary["final_evaluation"] == again[1]["final_evaluation"]
    assert summary["base_evaluation"] == again[1]["base_evaluation"]
    assert weights.keys() == again[2].keys()
    assert all(torch.equal(weights[name], again[2][name]) for name in weights)
