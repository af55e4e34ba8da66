"""`python -m adarl.bench scaling`: host memory of ZeRO-3 loading and of a weight broadcast.

Two measurements on a random Qwen2 saved as an HF directory (float32, CPU, gloo), each variant in
fresh processes so that no allocator cache hides a peak:

* **ZeRO-3 loading** (`--ranks` learner ranks, `Learner.setup`: process group, model, DeepSpeed
  engine). `full-load` is the loading before partitioned loading existed, kept here only as the
  reference: every rank loads the whole model with `from_pretrained`, then `deepspeed.initialize`
  partitions it. `partitioned` is the learner's loading (`load_partitioned`: built under
  `deepspeed.zero.Init`, filled module by module from the checkpoint). Per rank: RSS before
  setup, peak RSS (`ru_maxrss`), and what setup added.
* **Broadcast receiver** (one sender, one receiver holding an HF engine of the model; a push of
  the whole model in `--bucket-mib` buckets over `BroadcastWeightSync`'s group code).
  `materialised` is the receiver before streaming existed (every bucket received into one dict,
  then `update_weights`), kept as the reference; `streamed` is `receive_broadcast` (the engine
  loads each bucket as it arrives). Reported: the receiver's RSS just before the push and the
  most it rose above that during the push (sampled every millisecond from /proc/self/statm).

The results are printed as Markdown and written as the "Memory that scales" section of
docs/benchmarks.md (only that section is replaced).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from adarl.bench.docs_section import write_section

SECTION_TITLE = "## Memory that scales: ZeRO-3 loading and streamed weight sync"
LOAD_VARIANTS = ("full-load", "partitioned")
RECEIVE_VARIANTS = ("materialised", "streamed")


def _memory_bytes() -> tuple[int, int]:
    """(RSS, anonymous) of this process: anonymous memory is what it allocated itself; RSS also
    counts file pages it maps (a memory-mapped checkpoint), which the page cache shares."""
    fields: dict[str, int] = {}
    with open("/proc/self/smaps_rollup") as handle:
        for line in handle:
            key, _, value = line.partition(":")
            if key in ("Rss", "Anonymous"):
                fields[key] = int(value.split()[0]) * 1024
    return fields["Rss"], fields["Anonymous"]


class _Sampler:
    """The largest RSS and anonymous memory seen while active, sampled every millisecond."""

    def __init__(self) -> None:
        self.peak_rss, self.peak_anonymous = _memory_bytes()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> None:
        rss, anonymous = _memory_bytes()
        self.peak_rss = max(self.peak_rss, rss)
        self.peak_anonymous = max(self.peak_anonymous, anonymous)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            time.sleep(0.001)

    def __enter__(self) -> _Sampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()


@dataclass(frozen=True)
class LoadResult:
    variant: str
    precision: str
    rank: int
    anonymous_before_bytes: int  # imports done, process group up, nothing loaded
    load_anonymous_peak_bytes: int  # while the model was loaded (before deepspeed.initialize)
    setup_anonymous_peak_bytes: int  # over the whole set-up (the engine's buffers included)
    setup_rss_peak_bytes: int  # the same in RSS (mapped checkpoint pages included)
    local_parameter_bytes: int  # this rank's partition of the parameters after set-up
    seconds: float

    @property
    def load_added_bytes(self) -> int:
        return self.load_anonymous_peak_bytes - self.anonymous_before_bytes

    @property
    def setup_added_bytes(self) -> int:
        return self.setup_anonymous_peak_bytes - self.anonymous_before_bytes


@dataclass(frozen=True)
class ReceiveResult:
    variant: str
    anonymous_before_bytes: int  # engine loaded (weights resident), group joined
    push_rise_bytes: int  # most the anonymous memory rose above that during the push
    seconds: float
    max_abs_error: float  # engine weights after the push vs what was sent


def build_model_dir(directory: Path, *, vocab: int, hidden: int, layers: int) -> int:
    """A random Qwen2 (untied head, float32) saved as an HF directory; its parameter count."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=3 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=max(1, hidden // 64),
        num_key_value_heads=max(1, hidden // 256),
        max_position_embeddings=512,
        tie_word_embeddings=False,
    )
    model = Qwen2ForCausalLM(config)
    model.save_pretrained(directory)
    return sum(p.numel() for p in model.parameters())


# -- ZeRO-3 loading ------------------------------------------------------------------------------


def run_load_rank(
    variant: str, *, precision: str, model_dir: str, rank: int, world_size: int, port: int
) -> LoadResult:
    """One learner rank's `setup` (call in a fresh process; all ranks at once)."""
    import deepspeed  # noqa: F401  # imported before the baseline: it is not the model
    import torch
    import transformers.models.qwen2.modeling_qwen2  # noqa: F401

    from adarl.learner import engine
    from adarl.learner.learner import Learner
    from adarl.learner.logprobs import TokenScorer

    loads: list[int] = []  # anonymous peak of each model load
    load_scorer = engine.load_scorer

    def measured(path: str, settings: engine.EngineSettings) -> TokenScorer:
        with _Sampler() as sampler:
            if variant == "partitioned":
                scorer = load_scorer(path, settings)
            else:  # the reference: every rank loads the whole model
                from transformers import AutoModelForCausalLM

                dtype = torch.bfloat16 if settings.precision == "bf16" else torch.float32
                model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
                scorer = TokenScorer(
                    model.eval(),
                    temperature=settings.temperature,
                    chunk_tokens=settings.logprob_chunk_tokens,
                )
        loads.append(sampler.peak_anonymous)
        return scorer

    # This process runs one rank's set-up and exits: its model loads are measured in place.
    engine.load_scorer = measured  # type: ignore[assignment]
    torch.set_num_threads(1)
    learner = Learner(
        model_path=model_dir, rank=rank, world_size=world_size, zero_stage=3, precision=precision
    )
    _, before = _memory_bytes()
    start = time.perf_counter()
    with _Sampler() as setup:
        learner.setup(master_addr="127.0.0.1", master_port=port)
    seconds = time.perf_counter() - start
    local = sum(
        int(getattr(p, "ds_tensor", p).numel()) * p.element_size()
        for p in learner.module.parameters()
    )
    result = LoadResult(
        variant=variant,
        precision=precision,
        rank=rank,
        anonymous_before_bytes=before,
        load_anonymous_peak_bytes=loads[0],
        setup_anonymous_peak_bytes=setup.peak_anonymous,
        setup_rss_peak_bytes=setup.peak_rss,
        local_parameter_bytes=local,
        seconds=seconds,
    )
    learner.close()
    return result


def _free_port() -> int:
    from adarl.learner.process_group import free_port

    return free_port()


def _spawn(worker_args: Sequence[str]) -> subprocess.Popen[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "adarl.bench.scaling", *worker_args]
    return subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )


def _collect(processes: Sequence[subprocess.Popen[str]], what: str) -> list[dict[str, Any]]:
    results = []
    for process in processes:
        stdout, stderr = process.communicate(timeout=1800)
        if process.returncode != 0:
            raise RuntimeError(f"{what} failed:\n{stderr[-4000:]}")
        results.append(json.loads(stdout.strip().splitlines()[-1]))
    return results


def measure_load(variant: str, *, precision: str, model_dir: str, ranks: int) -> list[LoadResult]:
    port = _free_port()
    common = ["--model-dir", model_dir, "--ranks", str(ranks), "--port", str(port)]
    common += ["--precision", precision]
    processes = [
        _spawn(["--worker-load", variant, "--rank", str(rank), *common]) for rank in range(ranks)
    ]
    return [LoadResult(**r) for r in _collect(processes, f"loading variant {variant}")]


# -- broadcast receiver --------------------------------------------------------------------------


def _sent_weights(model_dir: str) -> dict[str, Any]:
    """What the sender pushes: the checkpoint + 1, so that a completed load is visible."""
    from safetensors.torch import load_file

    return {n: t + 1.0 for n, t in load_file(f"{model_dir}/model.safetensors").items()}


def _layouts(model_dir: str, bucket_bytes: int) -> list[Any]:
    """The bucket plan of the checkpoint's tensors, from its header (no tensor is read)."""
    import torch
    from safetensors import safe_open

    from adarl.learner.weights import WeightInfo
    from adarl.weight_transport import plan_buckets

    dtypes = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16}
    with safe_open(f"{model_dir}/model.safetensors", framework="pt") as handle:
        infos = [
            WeightInfo(
                name,
                tuple(handle.get_slice(name).get_shape()),
                dtypes[handle.get_slice(name).get_dtype()],
            )
            for name in handle.keys()  # noqa: SIM118  # a safetensors handle, not a dict
        ]
    return plan_buckets(infos, bucket_bytes)


def run_receive_member(
    variant: str, *, model_dir: str, member: str, port: int, bucket_bytes: int
) -> ReceiveResult | None:
    """The sender or the receiver of one push (call in a fresh process; both at once)."""
    import torch

    from adarl.weight_sync.broadcast import join_broadcast_group, receive_broadcast
    from adarl.weight_transport import WeightBroadcastSender, create_broadcast_group

    torch.set_num_threads(1)
    if member == "sender":
        weights, layouts = _sent_weights(model_dir), _layouts(model_dir, bucket_bytes)
        group = create_broadcast_group(
            master_addr="127.0.0.1",
            master_port=port,
            rank=0,
            world_size=2,
            backend="gloo",
            timeout_s=600,
        )
        sender = WeightBroadcastSender(group=group, device=torch.device("cpu"))
        for layout in layouts:
            sender.send(layout, weights)
        return None

    import gc

    from adarl.rollout.hf_engine import HFEngine
    from adarl.weight_sync import broadcast

    engine = HFEngine(model_path=model_dir)
    with torch.no_grad():  # resident, as after an engine's first generation (loads are lazy)
        for tensor in engine.model.state_dict().values():
            tensor.add_(0.0)
    layouts = _layouts(model_dir, bucket_bytes)
    join_broadcast_group(engine, "bench", "127.0.0.1", port, 1, 2, "gloo", 600.0, "cpu")
    gc.collect()
    _, before = _memory_bytes()
    start = time.perf_counter()
    with _Sampler() as sampler:
        if variant == "streamed":
            receive_broadcast(engine, "bench", 1, layouts)
        else:  # the reference: all buckets into one dict, then one update
            engine.update_weights(1, broadcast._RECEIVERS["bench"].receive(layouts))
    seconds = time.perf_counter() - start
    expected = _sent_weights(model_dir)
    state = engine.model.state_dict()
    error = max(float((state[name] - tensor).abs().max()) for name, tensor in expected.items())
    return ReceiveResult(variant, before, sampler.peak_anonymous - before, seconds, error)


def measure_receive(variant: str, *, model_dir: str, bucket_bytes: int) -> ReceiveResult:
    port = _free_port()
    common = ["--model-dir", model_dir, "--port", str(port), "--bucket-bytes", str(bucket_bytes)]
    processes = [
        _spawn(["--worker-receive", variant, "--member", member, *common])
        for member in ("sender", "receiver")
    ]
    results = _collect(processes, f"broadcast variant {variant}")
    return ReceiveResult(**results[1])


# -- report --------------------------------------------------------------------------------------


def _mib(num_bytes: float) -> str:
    return f"{num_bytes / 2**20:,.0f}"


def format_section(
    loads: dict[str, list[LoadResult]],
    receives: dict[str, ReceiveResult],
    *,
    model_bytes: int,
    setup: dict[str, str],
    command: str,
) -> str:
    lines = [
        SECTION_TITLE,
        "",
        f"`{command}` (adarl/bench/scaling.py): each variant in fresh processes. `full-load` and "
        "`materialised` are the code before this change, kept in the benchmark only as the "
        "reference.",
        "",
        *(f"- {key}: {value}" for key, value in setup.items()),
        "",
        "ZeRO-3 learner ranks, each loading the model (`engine.load_scorer`) and setting up "
        "its DeepSpeed engine. Memory is the rank's anonymous (private) memory above what it "
        "held before; RSS also counts the memory-mapped checkpoint's pages, which the page "
        "cache shares between the ranks of a node.",
        "",
        "| variant | precision | rank | added by the load MiB | added by the whole set-up MiB | "
        "peak RSS of the set-up MiB | parameter partition MiB | set-up s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for results in loads.values():
        for r in results:
            lines.append(
                f"| {r.variant} | {r.precision} | {r.rank} | {_mib(r.load_added_bytes)} | "
                f"{_mib(r.setup_added_bytes)} | {_mib(r.setup_rss_peak_bytes)} | "
                f"{_mib(r.local_parameter_bytes)} | {r.seconds:.1f} |"
            )
    by_variant: dict[str, list[LoadResult]] = {}
    for results in loads.values():
        for r in results:
            by_variant.setdefault(f"{r.variant}/{r.precision}", []).append(r)
    ratios = []
    for precision in sorted({r.precision for rs in loads.values() for r in rs}):
        full = by_variant.get(f"full-load/{precision}")
        part = by_variant.get(f"partitioned/{precision}")
        if full and part:
            ratio = max(r.setup_added_bytes for r in part) / max(r.setup_added_bytes for r in full)
            ratios.append(f"{precision} {ratio:.2f}")
    if ratios:
        lines += [
            "",
            "Largest rank's memory added by the set-up, partitioned / full-load: "
            + ", ".join(ratios)
            + ". On CPU the whole set-up's peak is DeepSpeed's own ZeRO-3 buffers (parameter, "
            "fp32 and gradient partitions), in host memory; and the full load memory-maps the "
            "checkpoint (page-cache pages, shared by a node's ranks), so at equal dtypes it adds "
            "almost no private memory while loading, while a bf16 load of an fp32 checkpoint "
            "makes a private full copy. What partitioned loading removes on GPUs is not "
            "measurable here: without `zero.Init`, `deepspeed.initialize` moves the whole model "
            "to every rank's GPU before partitioning it (deepspeed/runtime/engine.py "
            "`_configure_distributed_model`); partitioned, each GPU only ever receives its share "
            "and the module being built.",
        ]
    lines += [
        "",
        "Broadcast receiver (an HF engine of the model, weights resident), one push of the "
        "whole model; memory is the receiver's anonymous memory:",
        "",
        "| variant | before the push MiB | rise during the push MiB | rise / model size | "
        "push s | max weight error |",
        "|---|---|---|---|---|---|",
    ]
    for variant, r in receives.items():
        lines.append(
            f"| {variant} | {_mib(r.anonymous_before_bytes)} | {_mib(r.push_rise_bytes)} | "
            f"{r.push_rise_bytes / model_bytes:.2f} | {r.seconds:.2f} | {r.max_abs_error:.1e} |"
        )
    lines += [
        "",
        "Max weight error: the engine's weights after the push against what was sent. A "
        "streamed push holds at most the largest bucket (a tensor larger than the bucket size, "
        "such as the embedding, travels alone); a materialised one a full copy of the model.",
    ]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m adarl.bench scaling", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--vocab", type=int, default=32768)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--ranks", type=int, default=2, help="ZeRO-3 learner ranks")
    parser.add_argument("--bucket-mib", type=int, default=64, help="weight-sync bucket size")
    parser.add_argument(
        "--precisions", nargs="+", default=["fp32", "bf16"], choices=("fp32", "bf16")
    )
    parser.add_argument("--precision", choices=("fp32", "bf16"), help=argparse.SUPPRESS)
    parser.add_argument(
        "--write-docs",
        type=Path,
        default=Path("docs/benchmarks.md"),
        help="Markdown file whose section is replaced",
    )
    parser.add_argument("--no-write-docs", action="store_true")
    parser.add_argument("--worker-load", choices=LOAD_VARIANTS, help=argparse.SUPPRESS)
    parser.add_argument("--worker-receive", choices=RECEIVE_VARIANTS, help=argparse.SUPPRESS)
    parser.add_argument("--member", choices=("sender", "receiver"), help=argparse.SUPPRESS)
    parser.add_argument("--model-dir", help=argparse.SUPPRESS)
    parser.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--bucket-bytes", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.worker_load is not None:
        load = run_load_rank(
            args.worker_load,
            precision=args.precision,
            model_dir=args.model_dir,
            rank=args.rank,
            world_size=args.ranks,
            port=args.port,
        )
        print(json.dumps(asdict(load)))
        return 0
    if args.worker_receive is not None:
        received = run_receive_member(
            args.worker_receive,
            model_dir=args.model_dir,
            member=args.member,
            port=args.port,
            bucket_bytes=args.bucket_bytes,
        )
        print(json.dumps(asdict(received) if received is not None else {}))
        return 0
    if args.ranks < 2:
        parser.error("--ranks must be >= 2 (ZeRO-3 partitions across ranks)")

    import deepspeed
    import torch
    import transformers

    bucket_bytes = args.bucket_mib * 2**20
    with tempfile.TemporaryDirectory(prefix="adarl-bench-scaling-") as model_dir:
        parameters = build_model_dir(
            Path(model_dir), vocab=args.vocab, hidden=args.hidden, layers=args.layers
        )
        loads = {
            f"{v}/{precision}": measure_load(
                v, precision=precision, model_dir=model_dir, ranks=args.ranks
            )
            for precision in args.precisions
            for v in LOAD_VARIANTS
        }
        for key, results in loads.items():
            print(key, results, flush=True)
        receives = {
            v: measure_receive(v, model_dir=model_dir, bucket_bytes=bucket_bytes)
            for v in RECEIVE_VARIANTS
        }
        for variant, result in receives.items():
            print(variant, result, flush=True)
    setup = {
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, one torch thread per process",
        "versions": f"torch {torch.__version__}, transformers {transformers.__version__}, "
        f"deepspeed {deepspeed.__version__}",
        "model": f"random Qwen2, hidden {args.hidden}, {args.layers} layers, vocabulary "
        f"{args.vocab:,}, untied head, {parameters / 1e6:.1f}M parameters, float32 "
        f"({parameters * 4 / 2**20:,.0f} MiB)",
        "learners": f"{args.ranks} ranks, ZeRO-3, gloo; the checkpoint is float32, bf16 "
        "learners load it converted",
        "weight sync": f"gloo broadcast, buckets of at most {args.bucket_mib} MiB",
    }
    command = "python -m adarl.bench scaling" + (
        "" if argv is None else " " + " ".join(str(a) for a in argv)
    )
    section = format_section(
        loads, receives, model_bytes=parameters * 4, setup=setup, command=command.rstrip()
    )
    print(section)
    if not args.no_write_docs:
        write_section(args.write_docs, SECTION_TITLE, section)
        print(f"wrote the {SECTION_TITLE[3:]} section of {args.write_docs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
