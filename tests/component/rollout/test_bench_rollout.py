"""`python -m adarl.bench rollout` end to end on the HF engine, and the bench dispatcher."""

from __future__ import annotations

from pathlib import Path

import pytest

from adarl.bench.__main__ import BENCHMARKS
from adarl.bench.__main__ import main as bench_main
from adarl.config.model import TinyModelConfig


@pytest.mark.slow
def test_rollout_bench_writes_its_section_and_keeps_the_others(
    tmp_path: Path,
    tiny_model_cache_dir: Path,
    tiny_model_config: TinyModelConfig,
    tiny_model_path: str,  # built once per session; the bench must find it in the cache
) -> None:
    docs = tmp_path / "benchmarks.md"
    docs.write_text(
        "# Benchmarks\n\n## Learner\n\nkeep me\n\n## Rollout\n\nstale\n\n## Zed\n\nme too\n"
    )
    argv = [
        "rollout",
        "--engines", "hf",
        "--cache-dir", str(tiny_model_cache_dir),
        "--sft-steps", str(tiny_model_config.sft_steps),
        "--batch-prompts", "1", "4",
        "--eval-prompts", "16",
        "--eval-samples-per-prompt", "4",
        "--min-seconds", "0",
        "--write-docs", str(docs),
    ]  # fmt: skip
    assert bench_main(argv) == 0
    text = docs.read_text()
    assert "keep me" in text and "me too" in text and "stale" not in text
    assert text.index("## Learner") < text.index("## Rollout") < text.index("## Zed")
    rollout = text[text.index("## Rollout") : text.index("## Zed")]
    assert "| hf | 1 × 8 |" in rollout and "| hf | 4 × 8 |" in rollout
    assert "Arithmetic test split (16 prompts), 4 samples per prompt" in rollout
    assert f"{tiny_model_config.sft_steps} SFT steps" in rollout


def test_dispatcher_lists_and_rejects(capsys: pytest.CaptureFixture[str]) -> None:
    assert "rollout" in BENCHMARKS
    assert bench_main(["--help"]) == 0
    assert "rollout" in capsys.readouterr().out
    assert bench_main(["nope"]) == 2
    assert "unknown benchmark 'nope'" in capsys.readouterr().err
