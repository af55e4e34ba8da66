"""`python -m adarl.bench hints`: quality of the `self` hint source against the template's.

For each warm start of the built-in tiny model (`--sft-steps`, default the embedded default's 300
and the schema default's 800), in this process with one HF engine and one thread, on held-out
arithmetic prompts (`adarl.hints.quality.measure_hint_quality`):

* the base policy's unhinted pass rate, and the prompts it fails (p̂ = 0 of n samples);
* `self` hints (the policy in hint mode, `hints.retries` retries, no fallback): parse rate, leak
  rate, tokens and seconds per hint-mode generation;
* per source and level: the failed prompts that got a hint, their pass rate with it, the share
  with at least one correct sample (the gate), and the same for an unhinted control re-roll of
  the same prompts with fresh seeds; the lift is hinted minus control.

The results replace the `## Hints` section of docs/benchmarks.md (other sections are kept).
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from adarl.bench.rollout import machine_description, replace_section
from adarl.hints.quality import HintQualityReport

SECTION_HEADING = "## Hints"


@dataclass(frozen=True)
class ModelReport:
    sft_steps: int
    model: str  # a one-line description of the build
    quality: HintQualityReport


def measure_model(
    sft_steps: int,
    *,
    cache_dir: str | None,
    prompts: int,
    samples_per_prompt: int,
    retries: int,
    temperature: float,
    seed: int,
) -> ModelReport:
    from adarl.config.hints import HintsConfig
    from adarl.config.model import TINY_ARITHMETIC, TinyModelConfig
    from adarl.hints.quality import measure_hint_quality
    from adarl.models.loading import resolve_model_path
    from adarl.models.tiny import read_build_info
    from adarl.reward.exact import ExactMatchVerifier
    from adarl.rollout.builders import build_hint_generator
    from adarl.rollout.codec import PromptCodec
    from adarl.rollout.hf_engine import HFEngine
    from adarl.tasks.arithmetic import arithmetic_test_split
    from adarl.types import SamplingParams

    start = time.perf_counter()
    path = resolve_model_path(
        TINY_ARITHMETIC, cache_dir=cache_dir, tiny=TinyModelConfig(sft_steps=sft_steps)
    )
    print(f"sft_steps={sft_steps}: model {path} ready in {time.perf_counter() - start:.0f} s")
    info = read_build_info(path) or {}
    warm = info.get("warm_start", {})
    aux = ", ".join(
        f"{name} loss {stats['final_loss']:.3f}"
        for name, stats in warm.get("auxiliary", {}).items()
    )
    model = (
        f"{warm.get('steps')} SFT steps, task answer loss {warm.get('final_loss', 0):.3f}"
        + (f", {aux}" if aux else "")
        + f", built in {warm.get('seconds', 0):.0f} s"
    )
    engine = HFEngine(model_path=path, max_batch_sequences=512)
    tokenizer = engine.tokenizer
    eos = tokenizer.eos_token_id
    codec = PromptCodec(
        tokenizer=tokenizer,
        sampling=SamplingParams(temperature=1.0, max_new_tokens=16, stop_token_ids=(int(eos),)),
    )
    self_hints = build_hint_generator(
        HintsConfig(
            schedule="sage",
            source="self",
            fallback="none",
            retries=retries,
            temperature=temperature,
            seed=seed,
        ),
        generate=engine.generate,
        codec=codec,
    )
    verifier = ExactMatchVerifier()
    quality = measure_hint_quality(
        generate=engine.generate,
        codec=codec,
        examples=arithmetic_test_split(prompts),
        verify=lambda example, text: verifier.verify(text, example).reward > 0,
        self_hints=self_hints,
        samples_per_prompt=samples_per_prompt,
        seed=seed,
    )
    return ModelReport(sft_steps=sft_steps, model=model, quality=quality)


def _pct(value: float) -> str:
    return "–" if value != value else f"{100 * value:.1f}%"


def docs_section(
    reports: Sequence[ModelReport], *, command: str, machine: str, retries: int, temperature: float
) -> str:
    first = reports[0].quality
    lines = [
        SECTION_HEADING,
        "",
        f"Command: `{command}` ({datetime.date.today().isoformat()}).",
        f"Machine: {machine}.",
        "",
        f"Held-out arithmetic prompts ({first.prompts} of the test split), "
        f"{first.samples_per_prompt} samples per prompt at T = 1, one HF engine in-process. "
        "The hints are for the prompts the base policy fails (p̂ = 0). `self`: the policy in "
        f"hint mode at T = {temperature}, {retries} retries, no fallback. Lift = pass rate with "
        "the hint minus an unhinted control re-roll of the same prompts (fresh seeds); gate = "
        "share of prompts with at least one correct sample, i.e. a group that can train.",
        "",
    ]
    for report in reports:
        q = report.quality
        lines += [
            f"### `model.tiny.sft_steps={report.sft_steps}`",
            "",
            f"Build: {report.model}. Base pass rate (unhinted, mean p) {q.base_pass_rate:.3f}; "
            f"{q.failed} of {q.prompts} prompts at p̂ = 0.",
            "",
            f"`self` hint mode: {q.self_generations} generations, parse rate "
            f"{_pct(q.self_parse_rate)}, leak rate {_pct(q.self_leak_rate)} of the levels "
            f"parsed, {q.self_tokens_per_generation:.1f} tokens and "
            f"{1000 * q.self_seconds_per_generation:.2f} ms per generation.",
            "",
            "| source | level | prompts with a hint | pass rate | gate | control pass rate | "
            "control gate | lift |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for row in q.levels:
            lines.append(
                f"| {row.source} | {row.level} | {row.prompts} | {row.pass_rate:.3f} | "
                f"{_pct(row.gate)} | {row.control_pass_rate:.3f} | {_pct(row.control_gate)} | "
                f"{row.lift:+.3f} |"
            )
        lines.append("")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m adarl.bench hints", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--sft-steps", type=int, nargs="+", default=[300, 800])
    parser.add_argument("--prompts", type=int, default=256, help="held-out prompts")
    parser.add_argument("--samples-per-prompt", type=int, default=16)
    parser.add_argument("--retries", type=int, default=2, help="hints.retries of `self`")
    parser.add_argument("--temperature", type=float, default=1.0, help="hint-mode temperature")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cache-dir", default=None, help="built-in model cache (default: env)")
    parser.add_argument("--write-docs", type=Path, default=Path("docs/benchmarks.md"))
    parser.add_argument("--no-write-docs", action="store_true")
    args = parser.parse_args(argv)
    if args.prompts < 1 or args.samples_per_prompt < 1 or args.retries < 0:
        parser.error("--prompts and --samples-per-prompt must be >= 1, --retries >= 0")

    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(1)
    machine = machine_description()
    reports = [
        measure_model(
            steps,
            cache_dir=args.cache_dir,
            prompts=args.prompts,
            samples_per_prompt=args.samples_per_prompt,
            retries=args.retries,
            temperature=args.temperature,
            seed=args.seed,
        )
        for steps in args.sft_steps
    ]
    options = list(sys.argv[1:] if argv is None else argv)
    command = " ".join(["python -m adarl.bench hints", *options])
    section = docs_section(
        reports,
        command=command,
        machine=machine,
        retries=args.retries,
        temperature=args.temperature,
    )
    print(section)
    if not args.no_write_docs:
        args.write_docs.parent.mkdir(parents=True, exist_ok=True)
        replace_section(args.write_docs, SECTION_HEADING, section)
        print(f"wrote the {SECTION_HEADING!r} section of {args.write_docs}")
    return 0
