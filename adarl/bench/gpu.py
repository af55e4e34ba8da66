"""`python -m adarl.bench gpu`: adarl's GPU path on one GPU, with a model of Qwen2.5-1.5B's shapes.

No download: the model is random-initialised with Qwen2.5-1.5B's shapes (28 layers, hidden 1536,
GQA 12/2 heads, vocabulary 151,936, tied embeddings) in bf16 and saved with the character
tokenizer (ids past its vocabulary decode to nothing; only token counts matter here). Each part
runs in its own process (a part that runs out of memory or hangs loses only itself, and each
peak-memory reading is its own) under a timeout cut from `--budget-s`; the JSON (`--json`) is
rewritten after every part, so a timeout still leaves the results so far.

Parts:

* `engine`: the HF engine's sampling throughput, 64 prompts × 8 samples × 1,024 new tokens at
  temperature 1 in one call (one warm-up call first); tokens/s and peak GPU memory.
* `zero2`, `zero3`: the DeepSpeed learner (`LearnerGroup`, in-process, bf16, torch AdamW) on
  2,048-token responses with chunked log-probs and activation checkpointing: median step time
  over the measured steps after a warm-up step, response tokens/s, peak GPU memory.
  `zero3` then pushes the weights into an HF engine on the same GPU (`ObjectStoreWeightSync`,
  the in-process path): push time, the largest difference between the engine's weights and the
  learner's (0 when the push is exact), and the largest difference between the engine's and the
  learner's log-probs of the same sequences (bf16 kernels of different batch shapes).
* `embedded`: the embedded default (`+experiment=ada_seq_balance`, the tiny model) in-process
  (`cluster=in_process rollout=hf rollout.device=cuda`; the learner picks the GPU itself): step
  time and peak GPU memory.

`--dry-run` runs the same code on CPU at micro sizes (`make test` runs it through the GPU kit,
adarl/bench/gpu_kit.py). Results: the "GPU" section of docs/benchmarks.md (written when run on a
GPU; `--from-json` writes it from a JSON the kit brought back).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from adarl.bench.docs_section import write_section

SECTION_TITLE = "## GPU"
PARTS = ("build", "engine", "zero2", "zero3", "embedded")
# Share of the budget each part may use (what an early part leaves goes to the later ones).
PART_SHARES = {"build": 0.10, "engine": 0.32, "zero2": 0.16, "zero3": 0.22, "embedded": 0.20}


@dataclass(frozen=True)
class Sizes:
    """The model's shape and every workload's size."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    max_position_embeddings: int
    # engine
    prompts: int
    samples_per_prompt: int
    prompt_tokens: int
    new_tokens: int
    # learner
    learner_prompts: int
    learner_samples_per_prompt: int
    learner_prompt_tokens: int
    response_tokens: int
    max_tokens_per_micro_batch: int
    logprob_chunk_tokens: int
    learner_steps: int  # measured, after one warm-up step
    # the embedded default
    embedded_steps: int
    embedded_overrides: tuple[str, ...] = field(default=())


QWEN2_5_1_5B = Sizes(
    vocab_size=151_936,
    hidden_size=1536,
    intermediate_size=8960,
    num_hidden_layers=28,
    num_attention_heads=12,
    num_key_value_heads=2,
    max_position_embeddings=32_768,
    prompts=64,
    samples_per_prompt=8,
    prompt_tokens=64,
    new_tokens=1024,
    learner_prompts=8,
    learner_samples_per_prompt=2,
    learner_prompt_tokens=128,
    response_tokens=2048,
    # 7 sequences of 2,176 tokens per micro-batch, 3 micro-batches a step: activations under
    # checkpointing stay a few GiB beside ZeRO's ≈ 27 GiB of weights and optimizer state.
    max_tokens_per_micro_batch=16_384,
    logprob_chunk_tokens=1024,
    learner_steps=3,
    embedded_steps=4,
    # The first and last held-out evaluations on 64 prompts, not 256: the step is what is read.
    embedded_overrides=("eval.num_prompts=64",),
)
MICRO = Sizes(
    vocab_size=512,  # past the character tokenizer's ids, as on the GPU
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=256,
    prompts=4,
    samples_per_prompt=2,
    prompt_tokens=8,
    new_tokens=8,
    learner_prompts=2,
    learner_samples_per_prompt=2,
    learner_prompt_tokens=8,
    response_tokens=32,
    max_tokens_per_micro_batch=64,
    logprob_chunk_tokens=16,
    learner_steps=1,
    embedded_steps=2,
    # No warm start, few held-out prompts: the code path, not the learning.
    embedded_overrides=(
        "model.tiny.sft_steps=0",
        "allocator.prompts_per_step=8",
        "eval.num_prompts=4",
    ),
)


@dataclass
class PartResult:
    ok: bool = False
    seconds: float = 0.0
    timeout_s: float = 0.0
    timed_out: bool = False
    error: str | None = None
    values: dict[str, Any] = field(default_factory=dict)


# -- the parts (each in its own process) -----------------------------------------------------------


def _device(dry_run: bool) -> str:
    import torch

    if dry_run:
        return "cpu"
    if not torch.cuda.is_available():
        raise RuntimeError("python -m adarl.bench gpu needs a CUDA GPU; --dry-run runs it on CPU")
    return "cuda"


def _peak_memory(device: str) -> dict[str, float | None]:
    import torch

    if device != "cuda":
        return {"peak_memory_gib": None, "peak_reserved_gib": None}
    return {
        "peak_memory_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2),
        "peak_reserved_gib": round(torch.cuda.max_memory_reserved() / 2**30, 2),
    }


def build_model(model_dir: Path, sizes: Sizes, *, dry_run: bool) -> dict[str, Any]:
    """A random bf16 Qwen2 of `sizes`' shape with the character tokenizer, saved to `model_dir`."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from adarl.models.tokenizer import build_char_tokenizer

    device = _device(dry_run)
    tokenizer = build_char_tokenizer()
    config = Qwen2Config(
        vocab_size=sizes.vocab_size,
        hidden_size=sizes.hidden_size,
        intermediate_size=sizes.intermediate_size,
        num_hidden_layers=sizes.num_hidden_layers,
        num_attention_heads=sizes.num_attention_heads,
        num_key_value_heads=sizes.num_key_value_heads,
        max_position_embeddings=sizes.max_position_embeddings,
        tie_word_embeddings=True,
        rope_theta=1_000_000.0,
        rms_norm_eps=1e-6,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(0)
    with torch.device(device):  # initialised where it is fast: the GPU's seconds, not minutes
        model = Qwen2ForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    return {"parameters": sum(p.numel() for p in model.parameters()), "device": device}


def measure_engine(model_dir: Path, sizes: Sizes, *, dry_run: bool) -> dict[str, Any]:
    import torch

    from adarl.rollout.hf_engine import HFEngine
    from adarl.types import GenerationRequest, SamplingParams

    device = _device(dry_run)
    sequences = sizes.prompts * sizes.samples_per_prompt
    engine = HFEngine(
        model_path=str(model_dir),
        dtype="bfloat16",
        device=device,
        max_model_len=sizes.prompt_tokens + sizes.new_tokens,
        max_batch_sequences=sequences,
        num_threads=None,
    )
    generator = torch.Generator().manual_seed(0)

    def requests(count: int, new_tokens: int) -> list[GenerationRequest]:
        return [
            GenerationRequest(
                request_id=f"p{i}",
                prompt_token_ids=tuple(
                    torch.randint(
                        4, sizes.vocab_size, (sizes.prompt_tokens,), generator=generator
                    ).tolist()
                ),
                num_samples=sizes.samples_per_prompt,
                sampling=SamplingParams(temperature=1.0, max_new_tokens=new_tokens),
                seed=i,
            )
            for i in range(count)
        ]

    engine.generate(requests(2, 4))  # warm-up: kernels, allocator
    if device == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    results = engine.generate(requests(sizes.prompts, sizes.new_tokens))
    seconds = time.perf_counter() - start
    tokens = sum(len(c.token_ids) for r in results for c in r.completions)
    return {
        "sequences": sequences,
        "new_tokens_per_sequence": sizes.new_tokens,
        "tokens": tokens,
        "seconds": round(seconds, 2),
        "tokens_per_s": round(tokens / seconds, 1),
        **_peak_memory(device),
    }


def _learner_batch(sizes: Sizes) -> Any:
    from adarl.learner.synthetic import synthetic_train_batch

    return synthetic_train_batch(
        num_prompts=sizes.learner_prompts,
        samples_per_prompt=sizes.learner_samples_per_prompt,
        prompt_length=(sizes.learner_prompt_tokens, sizes.learner_prompt_tokens),
        response_length=(sizes.response_tokens, sizes.response_tokens),
        vocab_size=sizes.vocab_size,
        seed=0,
    )


def measure_learner(
    model_dir: Path, sizes: Sizes, *, zero_stage: int, push: bool, dry_run: bool
) -> dict[str, Any]:
    import torch

    from adarl.learner import LearnerGroup

    device = _device(dry_run)
    batch = _learner_batch(sizes)
    group = LearnerGroup(
        in_process=True,
        model_path=str(model_dir),
        zero_stage=zero_stage,
        precision="bf16",
        learning_rate=1e-6,
        activation_checkpointing=True,
        logprob_chunk_tokens=sizes.logprob_chunk_tokens,
        max_tokens_per_micro_batch=sizes.max_tokens_per_micro_batch,
        device=device,
    )
    try:
        step_s = []
        for step in range(1 + sizes.learner_steps):  # step 0 warms up (optimizer state, kernels)
            start = time.perf_counter()
            result = group.train_step(batch)
            if device == "cuda":
                torch.cuda.synchronize()
            if step > 0:
                step_s.append(time.perf_counter() - start)
            if not torch.isfinite(torch.tensor(result.grad_norm)):
                raise RuntimeError(
                    f"ZeRO-{zero_stage} step {step}: gradient norm {result.grad_norm}"
                )
        median = statistics.median(step_s)
        values: dict[str, Any] = {
            "zero_stage": zero_stage,
            "sequences": batch.num_sequences,
            "response_tokens": int(batch.response_mask.sum()),
            "setup_s": round(group.setup_s, 1),
            "step_s": round(median, 3),
            "response_tokens_per_s": round(int(batch.response_mask.sum()) / median, 1),
            **_peak_memory(device),
        }
        if push:
            values["push"] = measure_push(group, model_dir, batch, device=device)
        return values
    finally:
        group.shutdown()


def measure_push(group: Any, model_dir: Path, batch: Any, *, device: str) -> dict[str, Any]:
    """Push the learner's weights into an HF engine on the same device; how long and how exact."""
    import torch

    from adarl.rollout.hf_engine import HFEngine
    from adarl.weight_sync import ObjectStoreWeightSync

    engine = HFEngine(model_path=str(model_dir), dtype="bfloat16", device=device, num_threads=None)
    sync = ObjectStoreWeightSync(engines=[engine], bucket_size_bytes=256 * 1024 * 1024)
    seconds = []
    for _ in range(2):  # the first push also pins host buffers and warms the copy kernels
        start = time.perf_counter()
        report = sync.push(group)
        if device == "cuda":
            torch.cuda.synchronize()
        seconds.append(time.perf_counter() - start)
    learner_weights = group.get_weights()
    engine_state = engine.model.state_dict()
    weight_error = max(
        float((engine_state[name].float().cpu() - tensor.float()).abs().max())
        for name, tensor in learner_weights.items()
        if name in engine_state
    )
    rows = list(range(min(4, batch.num_sequences)))
    prompts, responses = [], []
    for row in rows:
        tokens = batch.input_ids[row][batch.attention_mask[row]].tolist()
        start_at = int(batch.response_mask[row].nonzero()[0])
        prompts.append(tokens[:start_at])
        responses.append(tokens[start_at:])
    engine_scores = engine.score(prompts, responses)
    learner_scores = group.score(batch)
    logprob_error = max(
        float(
            (
                torch.tensor(values)
                - learner_scores[row, len(prompts[row]) : len(prompts[row]) + len(values)]
            )
            .abs()
            .max()
        )
        for row, values in zip(rows, engine_scores, strict=True)
    )
    return {
        "bytes": report.num_bytes,
        "buckets": report.num_buckets,
        "seconds": round(min(seconds), 3),
        "first_push_s": round(seconds[0], 3),
        "weights_max_abs_error": weight_error,
        "logprob_max_abs_error": round(logprob_error, 4),
        "version": report.version,
    }


def measure_embedded(work_dir: Path, sizes: Sizes, *, dry_run: bool) -> dict[str, Any]:
    """The embedded default in this process, on the GPU: its step time and peak memory."""
    import torch
    from hydra import compose, initialize_config_dir

    from adarl.launch import CONFIG_DIR, load_config
    from adarl.logging import read_metrics_jsonl
    from adarl.run import run

    device = _device(dry_run)
    overrides = [
        "+experiment=ada_seq_balance",
        "cluster=in_process",
        "rollout=hf",
        f"rollout.device={device}",
        # The learner beside the engine, as a one-GPU user runs it (in-process: one device).
        f"cluster.gpus_per_learner={1 if device.startswith('cuda') else 0}",
        f"trainer.total_steps={sizes.embedded_steps}",
        "eval.every_steps=0",
        "logger.mode=disabled",
        "checkpoint.every_steps=0",
        *sizes.embedded_overrides,
    ]
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        config = load_config(compose(config_name="config", overrides=overrides))
    run_dir = work_dir / "embedded-run"
    summary = run(config, run_dir=run_dir)
    rows = [r for r in read_metrics_jsonl(run_dir / "metrics.jsonl") if "timing/step_s" in r]
    steps = [float(r["timing/step_s"]) for r in rows]
    measured = steps[1:] or steps  # the first step also warms up
    return {
        "overrides": overrides,
        "steps": len(steps),
        "step_s": round(statistics.median(measured), 3),
        "first_step_s": round(steps[0], 3) if steps else None,
        # The learner picks the GPU itself (learner device "auto"): GPU memory in use says it did.
        "learner_on": "cuda" if device == "cuda" and torch.cuda.max_memory_allocated() else "cpu",
        "final_accuracy": summary.final_accuracy,
        **_peak_memory(device),
    }


def run_part(part: str, *, model_dir: Path, work_dir: Path, dry_run: bool) -> dict[str, Any]:
    sizes = MICRO if dry_run else QWEN2_5_1_5B
    if part == "build":
        return build_model(model_dir, sizes, dry_run=dry_run)
    if part == "engine":
        return measure_engine(model_dir, sizes, dry_run=dry_run)
    if part in ("zero2", "zero3"):
        stage = int(part[-1])
        return measure_learner(model_dir, sizes, zero_stage=stage, push=stage == 3, dry_run=dry_run)
    if part == "embedded":
        return measure_embedded(work_dir, sizes, dry_run=dry_run)
    raise ValueError(f"unknown part {part!r}; use one of {list(PARTS)}")


# -- the driver of the parts ---------------------------------------------------------------------


def _part_in_subprocess(
    part: str, *, model_dir: Path, work_dir: Path, dry_run: bool, timeout_s: float
) -> PartResult:
    out = work_dir / f"{part}.json"
    command = [
        sys.executable,
        "-m",
        "adarl.bench",
        "gpu",
        "--part",
        part,
        "--model-dir",
        str(model_dir),
        "--work-dir",
        str(work_dir),
        "--part-json",
        str(out),
        *(["--dry-run"] if dry_run else []),
    ]
    result = PartResult(timeout_s=round(timeout_s, 1))
    start = time.perf_counter()
    print(f"adarl bench gpu: {part} (timeout {timeout_s:.0f} s)", flush=True)
    try:
        done = subprocess.run(command, timeout=max(timeout_s, 1.0), check=False)
        result.ok = done.returncode == 0 and out.is_file()
        if out.is_file():
            payload = json.loads(out.read_text())
            result.values, result.error = payload.get("values", {}), payload.get("error")
        elif done.returncode != 0:
            result.error = f"exit status {done.returncode} (see the log above)"
    except subprocess.TimeoutExpired:
        result.timed_out = True
        result.error = f"killed at its {timeout_s:.0f} s limit"
    result.seconds = round(time.perf_counter() - start, 1)
    print(f"adarl bench gpu: {part}: {asdict(result)}", flush=True)
    return result


def _environment(dry_run: bool) -> dict[str, Any]:
    from importlib.metadata import PackageNotFoundError, version

    import torch
    import transformers

    try:  # its version without importing it (the parts import it where they use it)
        deepspeed_version = version("deepspeed")
    except PackageNotFoundError:
        deepspeed_version = "not installed"
    cuda = torch.cuda.is_available()
    return {
        "date": time.strftime("%Y-%m-%d"),
        "dry_run": dry_run,
        "device": torch.cuda.get_device_name(0) if cuda else f"CPU ({platform.machine()})",
        "gpu_memory_gib": round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1)
        if cuda
        else None,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "transformers": transformers.__version__,
        "deepspeed": deepspeed_version,
        "sizes": asdict(MICRO if dry_run else QWEN2_5_1_5B),
    }


def run_all(
    *,
    dry_run: bool,
    budget_s: float,
    parts: Sequence[str] = PARTS,
    on_update: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Every part in its own process, under timeouts cut from `budget_s`; the results so far are
    handed to `on_update` after each part."""
    deadline = time.monotonic() + budget_s
    report: dict[str, Any] = {**_environment(dry_run), "budget_s": budget_s, "parts": {}}
    parts = [p for p in PARTS if p in parts or p == "build"]  # every part reads the model
    with tempfile.TemporaryDirectory(prefix="adarl-bench-gpu-") as tmp:
        work_dir = Path(tmp)
        model_dir = work_dir / "model"
        for index, part in enumerate(parts):
            left = deadline - time.monotonic()
            share = PART_SHARES[part] / sum(PART_SHARES[p] for p in parts[index:])
            built = report["parts"].get("build")
            if built is not None and not built.ok and part != "embedded":  # it builds its own
                report["parts"][part] = PartResult(error="the model was not built")
                continue
            report["parts"][part] = _part_in_subprocess(
                part,
                model_dir=model_dir,
                work_dir=work_dir,
                dry_run=dry_run,
                timeout_s=max(left * share, 1.0),
            )
            if on_update is not None:
                on_update(report)
    report["ok"] = all(r.ok for r in report["parts"].values())
    if on_update is not None:
        on_update(report)
    return report


def _json_ready(report: dict[str, Any]) -> dict[str, Any]:
    return {
        **report,
        "parts": {
            k: asdict(v) if isinstance(v, PartResult) else v for k, v in report["parts"].items()
        },
    }


def _value(part: dict[str, Any], *keys: str) -> Any:
    values: Any = part.get("values", {})
    for key in keys:
        values = values.get(key) if isinstance(values, dict) else None
    return values


def format_section(report: dict[str, Any]) -> str:
    """The "GPU" section of docs/benchmarks.md from a report (`run_all`'s, as JSON)."""
    parts = report["parts"]
    sizes = report["sizes"]

    def failed(part: str) -> str | None:
        """The part's error, once per row, when it did not pass."""
        if part not in parts:
            return "not run in this call"
        result = parts[part]
        return None if result.get("ok") else f"failed: {result.get('error') or 'not run'}"

    def cell(part: str, *keys: str, unit: str = "") -> str:
        value = _value(parts.get(part, {}), *keys)
        return (
            "–"
            if value is None
            else f"{value:,}{unit}"
            if isinstance(value, int)
            else (f"{value}{unit}")
        )

    lines = [
        SECTION_TITLE,
        "",
        "`python -m adarl.bench gpu` (adarl/bench/gpu.py), run by `make gpu-check` on a borrowed "
        'GPU machine (docs/operations.md "A borrowed GPU machine"). A random model with '
        "Qwen2.5-1.5B's shapes in bf16, no download.",
        "",
        f"- date: {report['date']}; device: {report['device']}"
        + (f" ({report['gpu_memory_gib']} GiB)" if report.get("gpu_memory_gib") else ""),
        f"- versions: Python {report['python']}, torch {report['torch']} (CUDA {report['cuda']}), "
        f"transformers {report['transformers']}, deepspeed {report['deepspeed']}",
        f"- model: {failed('build') or cell('build', 'parameters') + ' parameters'}",
        "",
        "| what | setting | result |",
        "|---|---|---|",
        f"| HF engine sampling | {sizes['prompts']} prompts × {sizes['samples_per_prompt']} "
        f"samples × {sizes['new_tokens']} new tokens, one call | "
        + (
            failed("engine")
            or f"{cell('engine', 'tokens_per_s')} tokens/s "
            f"({cell('engine', 'seconds', unit=' s')}), "
            f"peak {cell('engine', 'peak_memory_gib', unit=' GiB')}"
        )
        + " |",
    ]
    sequences = sizes["learner_prompts"] * sizes["learner_samples_per_prompt"]
    embedded = " ".join(_value(parts.get("embedded", {}), "overrides") or ["+experiment=..."])
    for stage in (2, 3):
        part = f"zero{stage}"
        lines.append(
            f"| learner ZeRO-{stage} step | {sequences}"
            f" sequences × {sizes['response_tokens']} response tokens, ≤ "
            f"{sizes['max_tokens_per_micro_batch']:,} tokens per micro-batch, chunked log-probs "
            f"({sizes['logprob_chunk_tokens']}), activation checkpointing | "
            + (
                failed(part)
                or f"{cell(part, 'step_s', unit=' s')} per step "
                f"({cell(part, 'response_tokens_per_s')} response tokens/s), peak "
                f"{cell(part, 'peak_memory_gib', unit=' GiB')}"
            )
            + " |"
        )
    lines += [
        "| weight push learner (ZeRO-3) → HF engine | in-process, object-store path | "
        + (
            failed("zero3")
            or f"{cell('zero3', 'push', 'seconds', unit=' s')}; weights max error "
            f"{cell('zero3', 'push', 'weights_max_abs_error')}, log-prob max error "
            f"{cell('zero3', 'push', 'logprob_max_abs_error')}"
        )
        + " |",
        f"| embedded default step | `{embedded}` ({sizes['embedded_steps']} steps) | "
        + (
            failed("embedded")
            or f"{cell('embedded', 'step_s', unit=' s')} per step (median after the first), "
            f"peak {cell('embedded', 'peak_memory_gib', unit=' GiB')}"
        )
        + " |",
    ]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m adarl.bench gpu", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--dry-run", action="store_true", help="CPU, micro sizes")
    parser.add_argument("--budget-s", type=float, default=290.0, help="all parts together")
    parser.add_argument("--parts", nargs="+", default=list(PARTS), choices=PARTS)
    parser.add_argument("--json", type=Path, default=None, help="results, rewritten per part")
    parser.add_argument(
        "--write-docs",
        type=Path,
        default=Path("docs/benchmarks.md"),
        help="Markdown file whose GPU section is replaced (GPU runs and --from-json only)",
    )
    parser.add_argument("--no-write-docs", action="store_true")
    parser.add_argument(
        "--from-json", type=Path, default=None, help="write the section from a saved report"
    )
    # One part in this process (the driver above starts these).
    parser.add_argument("--part", choices=PARTS, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--model-dir", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--work-dir", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--part-json", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.part is not None:
        assert args.model_dir and args.work_dir and args.part_json
        payload: dict[str, Any] = {}
        try:
            payload["values"] = run_part(
                args.part, model_dir=args.model_dir, work_dir=args.work_dir, dry_run=args.dry_run
            )
        except Exception as error:  # reported in the JSON and by the exit status
            payload["error"] = f"{type(error).__name__}: {error}"
            args.part_json.write_text(json.dumps(payload, default=str))
            raise
        args.part_json.write_text(json.dumps(payload, default=str))
        return 0

    if args.from_json is not None:
        loaded = json.loads(args.from_json.read_text())
        report = loaded.get("bench", loaded)  # the kit's gpu-check.json holds it under "bench"
    else:

        def save(current: dict[str, Any]) -> None:
            if args.json is not None:
                args.json.parent.mkdir(parents=True, exist_ok=True)
                args.json.write_text(json.dumps(_json_ready(current), indent=2, default=str))

        report = _json_ready(
            run_all(dry_run=args.dry_run, budget_s=args.budget_s, parts=args.parts, on_update=save)
        )
        save(report)
    section = format_section(report)
    print(section)
    if args.json is not None:
        (args.json.parent / "gpu-section.md").write_text(section)
    if not args.no_write_docs and not report.get("dry_run"):
        path: Path = args.write_docs
        if path.parent.is_dir():
            write_section(path, SECTION_TITLE, section)
            print(f"wrote the GPU section of {path}")
    return 0 if report.get("ok") else 1


if __name__ == "__main__":
    sys.exit(main())
