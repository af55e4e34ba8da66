"""`python -m adarl.bench hints`: quality of the `self` hint source against the template's.

For each policy (`--models`: each entry is Hydra model overrides, comma-separated, composed like
`python -m adarl.launch`; default: the embedded default's tiny model and `model=tiny_worked`, the
policy that writes its worked solution and reads hints), in this process with one HF engine and
one thread, on held-out arithmetic prompts (`adarl.hints.quality.measure_hint_quality`):

* the base policy's unhinted pass rate, and the prompts it fails (p̂ = 0 of n samples);
* `self` hints (the policy in hint mode, `hints.retries` retries, no fallback): parse rate, leak
  rate, tokens and seconds per hint-mode generation;
* per source and level: the failed prompts that got a hint, their pass rate with it, the share
  with at least one correct sample (the gate), and the same for an unhinted control re-roll of
  the same prompts with fresh seeds; the lift is hinted minus control, with the standard error
  of that paired difference over prompts.

The results replace the `## Hints` section of docs/benchmarks.md (other sections are kept), and
a plot of the lift per level and source (± 1 SE) goes to docs/figures/hints.png.
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

from adarl.bench.docs_section import write_section
from adarl.bench.rollout import machine_description
from adarl.config import AdarlConfig
from adarl.config.model import TINY_ARITHMETIC
from adarl.hints.quality import HintQualityReport

SECTION_TITLE = "## Hints"
DEFAULT_MODELS = ("model.tiny.sft_steps=300", "model=tiny_worked")
FIGURE_PATH = Path("docs/figures/hints.png")


@dataclass(frozen=True)
class ModelReport:
    overrides: str  # the Hydra model overrides that name the policy
    model: str  # a one-line description of the build
    quality: HintQualityReport


def policy_config(overrides: str) -> AdarlConfig:
    """The validated config that `python -m adarl.launch <overrides>` would use: its model, its
    response length (`rollout.max_new_tokens`) and its verifier settings are the bench's."""
    from hydra import compose, initialize_config_dir

    from adarl.launch import CONFIG_DIR, load_config

    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        config = load_config(compose(config_name="config", overrides=overrides.split(",")))
    if config.model.name_or_path != TINY_ARITHMETIC:
        raise ValueError(
            f"bench hints --models {overrides!r}: the policy is {config.model.name_or_path!r}; "
            f"the hint formats are taught by the built-in {TINY_ARITHMETIC!r}'s warm start"
        )
    return config


def measure_model(
    overrides: str,
    *,
    cache_dir: str | None,
    prompts: int,
    samples_per_prompt: int,
    retries: int,
    temperature: float,
    seed: int,
) -> ModelReport:
    from adarl.config.hints import HintsConfig
    from adarl.hints.quality import measure_hint_quality
    from adarl.models.loading import resolve_model_path
    from adarl.models.tiny import read_build_info
    from adarl.reward.registry import build_verifier
    from adarl.rollout.builders import build_hint_generator
    from adarl.rollout.codec import PromptCodec
    from adarl.rollout.hf_engine import HFEngine
    from adarl.tasks.arithmetic import arithmetic_test_split
    from adarl.types import SamplingParams

    start = time.perf_counter()
    config = policy_config(overrides)
    path = resolve_model_path(
        config.model.name_or_path, cache_dir=cache_dir, tiny=config.model.tiny
    )
    print(f"{overrides}: model {path} ready in {time.perf_counter() - start:.0f} s")
    info = read_build_info(path) or {}
    warm = info.get("warm_start", {})
    tiny = config.model.tiny
    aux = ", ".join(
        f"{name} loss {stats['final_loss']:.3f}"
        for name, stats in warm.get("auxiliary", {}).items()
    )
    model = (
        f"{info.get('parameters', 0) / 1e6:.2f}M parameters ({tiny.num_hidden_layers} layers, "
        f"hidden {tiny.hidden_size}), {warm.get('steps')} SFT steps, "
        f"task answer loss {warm.get('final_loss', 0):.3f}"
        + (f", {aux}" if aux else "")
        + f", built in {warm.get('seconds', 0):.0f} s"
    )
    engine = HFEngine(model_path=path, max_batch_sequences=512)
    tokenizer = engine.tokenizer
    eos = tokenizer.eos_token_id
    codec = PromptCodec(
        tokenizer=tokenizer,
        sampling=SamplingParams(
            temperature=1.0,
            max_new_tokens=config.rollout.max_new_tokens,
            stop_token_ids=(int(eos),),
        ),
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
    verifier = build_verifier("arithmetic", config.reward)  # the answer marker of a worked policy
    quality = measure_hint_quality(
        generate=engine.generate,
        codec=codec,
        examples=arithmetic_test_split(prompts),
        verify=lambda example, text: verifier.verify(text, example).reward > 0,
        self_hints=self_hints,
        samples_per_prompt=samples_per_prompt,
        seed=seed,
    )
    return ModelReport(overrides=overrides, model=model, quality=quality)


def _pct(value: float) -> str:
    return "–" if value != value else f"{100 * value:.1f}%"


def docs_section(
    reports: Sequence[ModelReport], *, command: str, machine: str, retries: int, temperature: float
) -> str:
    first = reports[0].quality
    lines = [
        SECTION_TITLE,
        "",
        f"Command: `{command}` ({datetime.date.today().isoformat()}).",
        f"Machine: {machine}.",
        "",
        f"Held-out arithmetic prompts ({first.prompts} of the test split), "
        f"{first.samples_per_prompt} samples per prompt at T = 1, one HF engine in-process. "
        "The hints are for the prompts the base policy fails (p̂ = 0). `self`: the policy in "
        f"hint mode at T = {temperature}, {retries} retries, no fallback. Lift = pass rate with "
        "the hint minus an unhinted control re-roll of the same prompts (fresh seeds), ± its "
        "standard error over prompts (paired); z = lift / SE; gate = share of prompts with at "
        "least one correct sample, i.e. a group that can train.",
        "",
    ]
    for report in reports:
        q = report.quality
        lines += [
            f"### `{report.overrides}`",
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
            "control gate | lift ± SE | z |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for row in q.levels:
            lines.append(
                f"| {row.source} | {row.level} | {row.prompts} | {row.pass_rate:.3f} | "
                f"{_pct(row.gate)} | {row.control_pass_rate:.3f} | {_pct(row.control_gate)} | "
                f"{row.lift:+.3f} ± {row.lift_se:.3f} | {row.lift_in_se:+.1f} |"
            )
        lines.append("")
    return "\n".join(lines)


def plot_lift(reports: Sequence[ModelReport], path: Path) -> None:
    """Lift per level and source, ± 1 SE, one panel per policy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(
        1, len(reports), figsize=(4.5 * len(reports), 3.6), sharey=True, squeeze=False
    )
    for axis, report in zip(axes[0], reports, strict=True):
        for offset, source in ((-0.12, "template"), (0.12, "self")):
            rows = [row for row in report.quality.levels if row.source == source]
            axis.errorbar(
                [row.level + offset for row in rows],
                [row.lift for row in rows],
                yerr=[row.lift_se for row in rows],
                fmt="o",
                capsize=4,
                label=source,
            )
        axis.axhline(0.0, color="grey", linewidth=0.8)
        axis.set_xticks([1, 2, 3])
        axis.set_xlabel("hint level ℓ")
        axis.set_title(report.overrides, fontsize=9)
    axes[0][0].set_ylabel("pass-rate lift on p̂ = 0 prompts\n(hinted − unhinted control)")
    axes[0][0].legend()
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    plt.close(figure)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m adarl.bench hints", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--models",
        nargs="+",
        default=list(DEFAULT_MODELS),
        help="policies, each as comma-separated Hydra model overrides "
        "(e.g. model.tiny.sft_steps=800 or model=tiny_worked)",
    )
    parser.add_argument("--prompts", type=int, default=256, help="held-out prompts")
    parser.add_argument("--samples-per-prompt", type=int, default=16)
    parser.add_argument("--retries", type=int, default=2, help="hints.retries of `self`")
    parser.add_argument("--temperature", type=float, default=1.0, help="hint-mode temperature")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cache-dir", default=None, help="built-in model cache (default: env)")
    parser.add_argument("--write-docs", type=Path, default=Path("docs/benchmarks.md"))
    parser.add_argument("--figure", type=Path, default=FIGURE_PATH, help="the lift plot")
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
            overrides,
            cache_dir=args.cache_dir,
            prompts=args.prompts,
            samples_per_prompt=args.samples_per_prompt,
            retries=args.retries,
            temperature=args.temperature,
            seed=args.seed,
        )
        for overrides in args.models
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
        write_section(args.write_docs, SECTION_TITLE, section)
        print(f"wrote the {SECTION_TITLE!r} section of {args.write_docs}")
        plot_lift(reports, args.figure)
        print(f"wrote {args.figure}")
    return 0
