"""`python -m adarl.bench memory`: peak memory of one learner forward + backward at long lengths.

One forward and backward of the learner's policy loss (adarl.algo.loss.policy_loss, token mean,
entropy logged) on `--sequences` × `--tokens` tokens of a Qwen2 with a `--vocab` vocabulary, in
float32 on CPU, for:

* `full-logits`: the learner's computation before chunking, kept here only as the reference:
  the model's [B, T, V] logits, one float32 log-softmax over all of them, gather and entropy;
* `chunked`: the learner's `TokenScorer` (adarl/learner/logprobs.py): the head only at response
  positions, `--chunk-tokens` rows at a time under activation checkpointing;
* `chunked+ac`: the same with `learner.activation_checkpointing` (transformer layers recomputed).

Each variant runs in a fresh subprocess (so one variant's allocator cache cannot hide another's
peak) and reports its peak RSS (`ru_maxrss`) and its RSS just before the pass (model and inputs
loaded). The result is printed as Markdown and written as the "Learner memory" section of
docs/benchmarks.md (only that section is replaced).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from adarl.bench.docs_section import write_section

SECTION_TITLE = "## Learner memory"
VARIANTS = ("full-logits", "chunked", "chunked+ac")


@dataclass(frozen=True)
class VariantResult:
    variant: str
    peak_rss_bytes: int  # whole process, ru_maxrss
    rss_before_pass_bytes: int  # model, inputs and imports
    seconds: float  # forward + backward
    loss: float
    grad_norm: float

    @property
    def pass_bytes(self) -> int:
        """What the forward + backward itself added on top of the loaded process."""
        return self.peak_rss_bytes - self.rss_before_pass_bytes


def _current_rss_bytes() -> int:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


def _full_logits_logprobs_and_entropy(
    logits: Any, input_ids: Any
) -> tuple[Any, Any]:  # [B, T, V], [B, T] -> [B, T], [B, T]
    """The learner's log-probs and entropy before chunking (reference only): one float32
    log-softmax over every position's logits, entropy without gradient."""
    import torch

    logp = torch.log_softmax(logits[:, :-1].float(), dim=-1)
    scored = logp.gather(-1, input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    with torch.no_grad():
        entropy = -(logp.exp() * logp).sum(dim=-1)
    pad = torch.nn.functional.pad
    return pad(scored, (1, 0)), pad(entropy, (1, 0))


def build_model_dir(
    directory: Path, *, vocab: int, hidden: int, layers: int, max_positions: int
) -> int:
    """A random Qwen2 (untied head) saved as an HF directory; returns its parameter count."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=3 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=max(1, hidden // 64),
        num_key_value_heads=max(1, hidden // 128),
        max_position_embeddings=max_positions,
        tie_word_embeddings=False,
    )
    model = Qwen2ForCausalLM(config)
    model.save_pretrained(directory)
    return sum(p.numel() for p in model.parameters())


def run_variant(
    variant: str,
    *,
    model_dir: str,
    sequences: int,
    tokens: int,
    prompt_tokens: int,
    chunk_tokens: int,
) -> VariantResult:
    """One forward + backward of the policy loss in this process (call in a fresh one)."""
    import torch
    from transformers import AutoModelForCausalLM

    from adarl.algo.loss import LossInputs, policy_loss
    from adarl.algo.loss_terms import Entropy
    from adarl.learner.logprobs import TokenScorer, enable_activation_checkpointing

    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; use one of {list(VARIANTS)}")
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    vocab = int(model.config.vocab_size)
    input_ids = torch.randint(4, vocab, (sequences, tokens))
    attention_mask = torch.ones(sequences, tokens, dtype=torch.long)
    response_mask = torch.zeros(sequences, tokens, dtype=torch.bool)
    response_mask[:, prompt_tokens:] = True
    signs = torch.tensor([1.0, -1.0]).repeat(sequences)[:sequences, None]  # A = ±1 per sequence
    advantages = torch.where(response_mask, signs, 0.0)
    behaviour = torch.where(response_mask, -float(torch.log(torch.tensor(vocab))), 0.0)
    scorer = TokenScorer(model, chunk_tokens=chunk_tokens)
    if variant == "chunked+ac":
        enable_activation_checkpointing(model)
    rss_before = _current_rss_bytes()
    start = time.perf_counter()
    if variant == "full-logits":
        logits = model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits
        logprobs, entropy = _full_logits_logprobs_and_entropy(logits, input_ids)
    else:
        logprobs, entropy = scorer(input_ids, attention_mask, response_mask)
    out = policy_loss(
        LossInputs(
            logprobs=logprobs,
            behaviour_logprobs=behaviour,
            advantages=advantages,
            response_mask=response_mask,
            global_num_tokens=int(response_mask.sum()),
            global_num_sequences=sequences,
            entropy=entropy,
        ),
        aggregation="token_mean",
        clip_low=0.2,
        clip_high=0.28,
        terms=(Entropy(),),
    )
    out.loss.backward()
    seconds = time.perf_counter() - start
    grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), float("inf")))
    return VariantResult(
        variant=variant,
        peak_rss_bytes=_peak_rss_bytes(),
        rss_before_pass_bytes=rss_before,
        seconds=seconds,
        loss=float(out.loss),
        grad_norm=grad_norm,
    )


def _run_in_subprocess(variant: str, args: argparse.Namespace, model_dir: str) -> VariantResult:
    command = [
        sys.executable, "-m", "adarl.bench.memory", "--worker", variant,
        "--model-dir", model_dir,
        "--sequences", str(args.sequences),
        "--tokens", str(args.tokens),
        "--prompt-tokens", str(args.prompt_tokens),
        "--chunk-tokens", str(args.chunk_tokens),
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"variant {variant} failed:\n{done.stderr[-4000:]}")
    payload = json.loads(done.stdout.strip().splitlines()[-1])
    return VariantResult(**payload)


def _mib(num_bytes: int) -> str:
    return f"{num_bytes / 2**20:,.0f}"


def format_section(results: Sequence[VariantResult], *, setup: dict[str, str], command: str) -> str:
    base = results[0]
    lines = [
        SECTION_TITLE,
        "",
        f"`{command}` (adarl/bench/memory.py): one forward + backward of the policy loss "
        "(token mean, entropy logged) per variant, each in a fresh process. `full-logits` is the "
        "learner's computation before chunking ([B, T, V] float32 logits and log-softmax), kept "
        "in the benchmark only as the reference; `chunked` is the learner's `TokenScorer` "
        "(response positions only, `learner.logprob_chunk_tokens` rows at a time under "
        "activation checkpointing); `chunked+ac` adds `learner.activation_checkpointing`.",
        "",
        *(f"- {key}: {value}" for key, value in setup.items()),
        "",
        "| variant | peak RSS MiB | / full-logits | RSS before the pass MiB | "
        "added by the pass MiB | / full-logits | forward + backward s | loss | grad norm |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r.variant} | {_mib(r.peak_rss_bytes)} | "
            f"{r.peak_rss_bytes / base.peak_rss_bytes:.2f} | {_mib(r.rss_before_pass_bytes)} | "
            f"{_mib(r.pass_bytes)} | {r.pass_bytes / base.pass_bytes:.2f} | {r.seconds:.1f} | "
            f"{r.loss:.6f} | {r.grad_norm:.6f} |"
        )
    lines += [
        "",
        "Same loss and gradient norm in every variant (the chunked path is exact; "
        "tests/unit/models/test_chunked_logprobs.py checks values and gradients to 1e-5). "
        "Peak RSS counts the whole process (Python, torch, the model and its gradients); "
        '"added by the pass" is the peak minus the RSS just before the forward.',
    ]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m adarl.bench memory", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--sequences", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=4096, help="tokens per sequence")
    parser.add_argument(
        "--prompt-tokens", type=int, default=256, help="prompt part of each sequence"
    )
    parser.add_argument("--vocab", type=int, default=32768)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--chunk-tokens", type=int, default=1024)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    parser.add_argument(
        "--write-docs",
        type=Path,
        default=Path("docs/benchmarks.md"),
        help="Markdown file whose Learner memory section is replaced",
    )
    parser.add_argument("--no-write-docs", action="store_true")
    parser.add_argument("--worker", choices=VARIANTS, help=argparse.SUPPRESS)
    parser.add_argument("--model-dir", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if not 0 < args.prompt_tokens < args.tokens:
        parser.error("--prompt-tokens must be in (0, --tokens)")

    if args.worker is not None:  # the per-variant subprocess
        result = run_variant(
            args.worker,
            model_dir=args.model_dir,
            sequences=args.sequences,
            tokens=args.tokens,
            prompt_tokens=args.prompt_tokens,
            chunk_tokens=args.chunk_tokens,
        )
        print(json.dumps(asdict(result)))
        return 0

    import torch
    import transformers

    variants = ["full-logits", *(v for v in args.variants if v != "full-logits")]
    with tempfile.TemporaryDirectory(prefix="adarl-bench-memory-") as model_dir:
        parameters = build_model_dir(
            Path(model_dir),
            vocab=args.vocab,
            hidden=args.hidden,
            layers=args.layers,
            max_positions=args.tokens,
        )
        results = []
        for variant in variants:
            results.append(_run_in_subprocess(variant, args, model_dir))
            print(results[-1], flush=True)
    response = args.tokens - args.prompt_tokens
    full_logits_bytes = args.sequences * args.tokens * args.vocab * 4
    setup = {
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, one torch thread",
        "versions": f"torch {torch.__version__}, transformers {transformers.__version__}",
        "model": f"random Qwen2, hidden {args.hidden}, {args.layers} layers, vocabulary "
        f"{args.vocab:,}, untied head, {parameters / 1e6:.1f}M parameters, float32",
        "batch": f"{args.sequences} sequences × {args.tokens:,} tokens ({args.prompt_tokens} "
        f"prompt + {response:,} response tokens each); one [B, T, V] float32 tensor is "
        f"{full_logits_bytes / 2**20:,.0f} MiB",
        "chunk": f"{args.chunk_tokens} tokens per head chunk",
    }
    command = "python -m adarl.bench memory" + (
        "" if argv is None else " " + " ".join(str(a) for a in argv)
    )
    section = format_section(results, setup=setup, command=command.rstrip())
    print(section)
    if not args.no_write_docs:
        write_section(args.write_docs, SECTION_TITLE, section)
        print(f"wrote the Learner memory section of {args.write_docs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
