"""`python -m adarl.bench learner`: learner step time per ZeRO stage, and weight-sync cost.

For each ZeRO stage: start a `LearnerGroup` (Ray actors, or one in-process learner) on the
built-in tiny model's architecture (random weights: step time does not depend on them), train
`--steps` steps on a synthetic batch shaped like a small RL step, push the weights to rollout
engine actors after every step (`ObjectStoreWeightSync`, the CPU path) and measure:

* step time (median over steps after one warm-up step), and response tokens per second;
* weight-sync time (median) and its ratio to step time;
* the GVM per-prompt gradient-norm pass (`LearnerGroup.prompt_gradient_norms` over every
  sequence) and its ratio to step time.

The result is printed as a Markdown table and written as the "Learner" section of
docs/benchmarks.md (only that section is replaced).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from adarl.bench.docs_section import write_section

SECTION_TITLE = "## Learner"
SYNC_BUCKET_BYTES = 1 << 20


@dataclass(frozen=True)
class StageResult:
    zero_stage: int
    setup_s: float
    step_s: float  # median
    response_tokens_per_s: float
    sync_s: float  # median
    grad_norm_pass_s: float  # median

    @property
    def sync_fraction(self) -> float:
        return self.sync_s / self.step_s

    @property
    def grad_norm_fraction(self) -> float:
        return self.grad_norm_pass_s / self.step_s


def _save_tiny_policy(directory: Path) -> int:
    from adarl.config.model import TinyModelConfig
    from adarl.models.tiny import build_tiny_qwen2
    from adarl.models.tokenizer import build_char_tokenizer

    tokenizer = build_char_tokenizer()
    model = build_tiny_qwen2(TinyModelConfig(), tokenizer)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return sum(p.numel() for p in model.parameters())


def _engines(kind: str, count: int, model_dir: str, cpus: float) -> list[Any]:
    from adarl.cluster import spawn_actor

    if kind == "hf":
        from adarl.rollout.hf_engine import HFEngine

        return [spawn_actor(HFEngine, num_cpus=cpus, model_path=model_dir) for _ in range(count)]
    if kind == "vllm":
        from adarl.rollout.vllm_engine import VLLMEngine

        return [
            spawn_actor(
                VLLMEngine,
                num_cpus=cpus,
                model_path=model_dir,
                max_model_len=64,
                kv_cache_memory_bytes=128 * 1024 * 1024,
            )
            for _ in range(count)
        ]
    raise ValueError(f"--engine {kind!r}: use 'vllm' or 'hf'")


def run_stage(
    *,
    zero_stage: int,
    model_dir: str,
    batch: Any,
    engines: list[Any],
    learners: int,
    cpus_per_learner: float,
    steps: int,
    max_tokens_per_micro_batch: int,
) -> StageResult:
    import torch

    from adarl.learner import LearnerGroup
    from adarl.weight_sync import ObjectStoreWeightSync

    group = LearnerGroup(
        num_learners=learners,
        in_process=learners == 1 and not engines,
        cpus_per_learner=cpus_per_learner,
        model_path=model_dir,
        zero_stage=zero_stage,
        learning_rate=1e-5,
        max_tokens_per_micro_batch=max_tokens_per_micro_batch,
    )
    try:
        sync = None
        if engines:
            sync = ObjectStoreWeightSync(engines=engines, bucket_size_bytes=SYNC_BUCKET_BYTES)
        all_rows = torch.ones(batch.num_sequences, dtype=torch.bool)
        step_s, sync_s, norm_s = [], [], []
        for step in range(steps + 1):  # step 0 warms up (first-call allocations, lazy imports)
            start = time.perf_counter()
            group.prompt_gradient_norms(batch, sample_mask=all_rows)
            norms_done = time.perf_counter()
            group.train_step(batch)
            trained = time.perf_counter()
            if sync is not None:
                sync.push(group)
            synced = time.perf_counter()
            if step > 0:
                norm_s.append(norms_done - start)
                step_s.append(trained - norms_done)
                sync_s.append(synced - trained)
        median_step = statistics.median(step_s)
        return StageResult(
            zero_stage=zero_stage,
            setup_s=group.setup_s,
            step_s=median_step,
            response_tokens_per_s=int(batch.response_mask.sum()) / median_step,
            sync_s=statistics.median(sync_s),
            grad_norm_pass_s=statistics.median(norm_s),
        )
    finally:
        group.shutdown()


@dataclass(frozen=True)
class GradNormCost:
    """GVM's per-sample statistic over one batch, two ways, on a plain in-process model."""

    sequences: int
    per_sample_backward_s: float  # the reference code's method: one backward per sample
    one_pass_s: float  # adarl's: one forward + one backward w.r.t. the embedding output
    max_relative_difference: float  # between the two methods' norms


def measure_grad_norm_cost(model_dir: str, batch: Any, *, max_tokens: int) -> GradNormCost:
    import torch
    from transformers import AutoModelForCausalLM

    from adarl.learner.batching import plan_micro_batches, sequence_lengths
    from adarl.learner.grad_norms import per_sequence_embedding_grad_norms, response_nll
    from adarl.learner.logprobs import TokenScorer

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    scorer = TokenScorer(model)  # the learner's own log-prob path
    embedding = model.get_input_embeddings()
    start = time.perf_counter()
    reference = torch.zeros(batch.num_sequences)
    for row in range(batch.num_sequences):
        sample = batch.select([row])
        logits = model(input_ids=sample.input_ids, attention_mask=sample.attention_mask).logits
        logp = torch.log_softmax(logits[:, :-1], dim=-1)
        scored = logp.gather(-1, sample.input_ids[:, 1:, None]).squeeze(-1)
        model.zero_grad()
        nll = -scored[sample.response_mask[:, 1:]].sum()  # the reference code: full logits
        nll.backward()
        reference[row] = embedding.weight.grad.norm()
    per_sample_s = time.perf_counter() - start

    captured: list[torch.Tensor] = []
    hook = embedding.register_forward_hook(lambda _m, _i, out: captured.append(out))
    fast = torch.zeros(batch.num_sequences)
    for _ in range(2):  # the first pass warms up (allocations), the second is timed
        start = time.perf_counter()
        for rows in plan_micro_batches(sequence_lengths(batch), max_tokens):
            micro = batch.select(rows)
            captured.clear()
            logprobs, _ = scorer(micro.input_ids, micro.attention_mask, micro.response_mask)
            nll = response_nll(logprobs, micro.response_mask)
            (grads,) = torch.autograd.grad(nll.sum(), captured[0])
            fast[torch.tensor(rows)] = per_sequence_embedding_grad_norms(
                grads, micro.input_ids, micro.attention_mask, vocab_size=model.config.vocab_size
            )
        one_pass_s = time.perf_counter() - start
    hook.remove()
    return GradNormCost(
        sequences=batch.num_sequences,
        per_sample_backward_s=per_sample_s,
        one_pass_s=one_pass_s,
        max_relative_difference=float(((fast - reference).abs() / reference).max()),
    )


def format_section(
    results: Sequence[StageResult],
    *,
    setup: dict[str, str],
    engines: int,
    grad_norm_cost: GradNormCost,
) -> str:
    lines = [
        SECTION_TITLE,
        "",
        "`python -m adarl.bench learner` (adarl/bench/learner.py): one optimizer step of the "
        "generic loss per ZeRO stage, the CPU weight sync to the rollout engines after it, and "
        "GVM's per-prompt gradient-norm pass over the same batch. Medians over the measured "
        "steps (one warm-up step excluded).",
        "",
        *(f"- {key}: {value}" for key, value in setup.items()),
        "",
        "| ZeRO stage | learner start s | step s | response tokens/s | weight sync s | "
        "sync / step | grad-norm pass s | grad-norm pass / step |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        sync = f"{r.sync_s:.3f} | {r.sync_fraction:.2f}" if engines else "– | –"
        lines.append(
            f"| {r.zero_stage} | {r.setup_s:.1f} | {r.step_s:.3f} | "
            f"{r.response_tokens_per_s:,.0f} | {sync} | {r.grad_norm_pass_s:.3f} | "
            f"{r.grad_norm_fraction:.2f} |"
        )
    cost = grad_norm_cost
    lines += [
        "",
        f"GVM's gradient-norm statistic for all {cost.sequences} sequences, plain in-process "
        f"model (adarl/learner/grad_norms.py): one backward per sample (the reference code's "
        f"method) {cost.per_sample_backward_s:.2f} s, adarl's single pass per micro-batch "
        f"{cost.one_pass_s:.3f} s ({cost.per_sample_backward_s / cost.one_pass_s:.0f}x less); "
        f"largest relative difference between the two: {cost.max_relative_difference:.1e}.",
    ]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m adarl.bench learner", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--stages", type=int, nargs="+", default=[0, 1, 2, 3])
    parser.add_argument("--learners", type=int, default=2, help="data-parallel learner actors")
    parser.add_argument("--cpus-per-learner", type=float, default=0.5)
    parser.add_argument("--engines", type=int, default=1, help="rollout engine actors (0: none)")
    parser.add_argument("--engine", default="vllm", choices=["vllm", "hf"])
    parser.add_argument("--cpus-per-engine", type=float, default=0.5)
    parser.add_argument("--steps", type=int, default=5, help="measured steps per stage")
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--samples-per-prompt", type=int, default=8)
    parser.add_argument("--max-tokens-per-micro-batch", type=int, default=4096)
    parser.add_argument("--num-cpus", type=int, default=None, help="local Ray cluster CPUs")
    parser.add_argument(
        "--write-docs",
        type=Path,
        default=Path("docs/benchmarks.md"),
        help="Markdown file whose Learner section is replaced (default docs/benchmarks.md)",
    )
    parser.add_argument("--no-write-docs", action="store_true")
    args = parser.parse_args(argv)

    import deepspeed
    import torch

    from adarl.cluster import ensure_ray
    from adarl.learner.synthetic import synthetic_train_batch
    from adarl.models.tokenizer import build_char_tokenizer

    torch.set_num_threads(1)
    uses_ray = args.learners > 1 or args.engines > 0
    if uses_ray:
        ensure_ray(num_cpus=args.num_cpus)
    batch = synthetic_train_batch(
        num_prompts=args.prompts,
        samples_per_prompt=args.samples_per_prompt,
        prompt_length=(8, 16),
        response_length=(4, 24),
        vocab_size=len(build_char_tokenizer()),
        seed=0,
    )
    results = []
    with tempfile.TemporaryDirectory(prefix="adarl-bench-learner-") as model_dir:
        parameters = _save_tiny_policy(Path(model_dir))
        grad_norm_cost = measure_grad_norm_cost(
            model_dir, batch, max_tokens=args.max_tokens_per_micro_batch
        )
        print(grad_norm_cost, flush=True)
        engines = _engines(args.engine, args.engines, model_dir, args.cpus_per_engine)
        try:
            for stage in args.stages:
                result = run_stage(
                    zero_stage=stage,
                    model_dir=model_dir,
                    batch=batch,
                    engines=engines,
                    learners=args.learners,
                    cpus_per_learner=args.cpus_per_learner,
                    steps=args.steps,
                    max_tokens_per_micro_batch=args.max_tokens_per_micro_batch,
                )
                results.append(result)
                print(result, flush=True)
        finally:
            if engines:
                import ray

                for engine in engines:
                    ray.kill(engine)
    setup = {
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, no GPU"
        if not torch.cuda.is_available()
        else f"{torch.cuda.get_device_name(0)}",
        "versions": f"torch {torch.__version__}, deepspeed {deepspeed.__version__}",
        "model": f"built-in tiny Qwen2 architecture, {parameters / 1e6:.2f}M parameters, fp32",
        "learners": f"{args.learners} ({'Ray actors' if args.learners > 1 else 'in-process'}, "
        f"{args.cpus_per_learner:g} CPU each), torch AdamW, gloo",
        "batch": f"{args.prompts} prompts × {args.samples_per_prompt} samples = "
        f"{batch.num_sequences} sequences, {int(batch.response_mask.sum())} response tokens, "
        f"≤ {args.max_tokens_per_micro_batch} tokens per micro-batch",
        "weight sync": f"object store, {SYNC_BUCKET_BYTES >> 20} MiB buckets, to "
        f"{args.engines} {args.engine} engine actor(s) ({args.cpus_per_engine:g} CPU each)"
        if args.engines
        else "none",
        "steps": f"{args.steps} measured per stage",
        "note": "wall-clock on the machine above, shared with other work: differences between "
        "stages of less than about 30% are within run-to-run noise",
    }
    section = format_section(
        results, setup=setup, engines=args.engines, grad_norm_cost=grad_norm_cost
    )
    print(section)
    if not args.no_write_docs:
        write_section(args.write_docs, SECTION_TITLE, section)
        print(f"wrote the Learner section of {args.write_docs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
