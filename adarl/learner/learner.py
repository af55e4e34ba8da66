"""One data-parallel learner rank: a DeepSpeed engine over an HF causal LM, and the generic loss.

A `Learner` is a plain class. `LearnerGroup` (adarl/learner/group.py) runs N of them as Ray actors
(or one in-process), cuts each TrainBatch across them and sums what they report.

Life cycle: `Learner(...)` only records settings; `setup(master_addr=..., master_port=...)` joins
the process group and builds the engine. No launcher is needed: the rank, world size and
rendezvous address are set explicitly (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT),
gloo on CPU and NCCL on GPU.

Choices that keep a fresh CPU machine from compiling C++ on first use (measured, DeepSpeed
0.19.8: shm comm ≈ 50 s, FusedAdam ≈ 43 s, CPUAdam ≈ 45 s):
* the optimizer is torch's AdamW, passed to DeepSpeed as a client optimizer;
* DeepSpeed's shared-memory allreduce op (an optional fast path for intra-node CPU allreduce) is
  marked unavailable before the process group starts, so gloo does the collectives. After this
  no op is built at all (checked with an empty TORCH_EXTENSIONS_DIR, stages 0-3, fp32 and bf16).

Gradient accumulation is caller-owned (`managed_gradient_accumulation: false`): a step runs as
many micro-batches as its token budget needs and calls `engine.step()` once. Every micro-batch's
loss is its additive share of the whole-batch loss (adarl.algo.loss normalises by whole-batch
counts) times the world size, undoing DeepSpeed's averaging over ranks, so the accumulated
gradient is exactly the gradient of the one big batch.

A step whose loss or gradient norm is NaN or infinite changes nothing: a micro-batch with a
non-finite loss back-propagates NaN, and the optimizer then discards the whole update on every
rank (DeepSpeed's overflow check at ZeRO 1-3 and under bf16; `_clip_stage0_gradients` for the
stage-0 fp32 client optimizer, which DeepSpeed does not check). The weights, the optimizer state
and the LR schedule stay as they were, and the rank reports `skipped_nonfinite`.

The policy is π_T = softmax(logits / T) at the rollouts' temperature T (`temperature`): policy
log-probs, entropy and the reference model's log-probs all use it, so the PPO ratio and the KL
compare the distribution the engines sampled from (adarl/rollout/common.py). Log-probs and
entropy come from `TokenScorer` (adarl/learner/logprobs.py): the output head runs only at the
scored positions, `logprob_chunk_tokens` rows at a time under activation checkpointing, so no
[B, T, V] tensor is ever formed. `activation_checkpointing` also checkpoints the transformer
layers. The model is loaded in the training precision (bf16 weights under `precision="bf16"`);
under ZeRO-3 a local checkpoint is loaded partitioned (`load_partitioned`: each rank builds and
reads only its share), so no rank ever holds the whole model.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from adarl.algo.loss import Aggregation, KLEstimator, policy_loss
from adarl.learner.batching import plan_micro_batches, sequence_lengths
from adarl.learner.grad_norms import per_sequence_embedding_grad_norms, response_nll
from adarl.learner.logprobs import TokenScorer, enable_activation_checkpointing
from adarl.types import TrainBatch

if TYPE_CHECKING:
    from adarl.weight_transport import BucketLayout, WeightBroadcastSender

logger = logging.getLogger(__name__)

# Files that make up a saved tokenizer; copied verbatim into HF exports so that the export
# loads with exactly the tokenizer the policy was trained with.
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
    "chat_template.jinja",
)


@dataclass(frozen=True)
class PolicyLossSettings:
    """Hyperparameters of `adarl.algo.loss.policy_loss`, plus which policy the ratio is against.

    ratio_reference "behaviour": π_old = the engine's log-probs (TrainBatch.behaviour_logprobs).
    ratio_reference "learner": π_old = the learner's log-probs under the pre-update weights. One
    optimizer step is taken per batch, so these are the current log-probs without gradient and
    the PPO ratio is exactly 1; `tis_cap` then corrects the engine/learner mismatch.
    """

    aggregation: Aggregation = "token_mean"
    clip_low: float = 0.2
    clip_high: float = 0.28
    dual_clip: float | None = None
    ratio_reference: str = "behaviour"
    tis_cap: float | None = None
    kl_coef: float = 0.0
    kl_estimator: KLEstimator = "k3"
    entropy_coef: float = 0.0


@dataclass(frozen=True)
class RankStepResult:
    """What one rank reports for one optimizer step."""

    loss_metrics: dict[str, float]  # additive shares (sum over ranks = whole batch)
    grad_norm: float  # global (all ranks), before clipping
    learning_rate: float  # the rate this step used
    num_micro_batches: int  # including empty ones run to match other ranks
    padded_tokens: int  # Σ micro-batch rows × longest row: the compute actually spent
    forward_backward_s: float
    optimizer_step_s: float
    skipped_nonfinite: bool = False  # the update was discarded: non-finite loss or gradients


@dataclass(frozen=True)
class WeightInfo:
    """Name, full shape and dtype of one weight (full even when ZeRO-3 partitions it)."""

    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype

    @property
    def num_bytes(self) -> int:
        numel = 1
        for size in self.shape:
            numel *= size
        return numel * torch.empty((), dtype=self.dtype).element_size()


@dataclass
class _Timer:
    seconds: float = 0.0

    @contextmanager
    def measure(self) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds += time.perf_counter() - start


def checkpoint_files(path: str) -> list[Path]:
    """The safetensors files of a local model directory ([] for a hub name or other formats)."""
    directory = Path(path)
    return sorted(directory.glob("*.safetensors")) if directory.is_dir() else []


def load_partitioned(
    path: str,
    files: Sequence[Path],
    *,
    dtype: torch.dtype,
    deepspeed_config: dict[str, Any],
) -> Any:
    """The model of `path`, built and loaded ZeRO-3-partitioned: no rank holds all of it.

    The model is constructed under `deepspeed.zero.Init`, which partitions each parameter as it
    is created (without random initialisation, and on the rank's own device), then every rank
    reads from the memory-mapped safetensors only the elements of its own partition: ZeRO-3 keeps
    elements [r·s, (r+1)·s) of a flattened parameter on partition rank r
    (deepspeed/runtime/zero/partition_parameters.py, `_partition_param`). No gather, no
    collective, no full tensor: peak memory per rank is its share plus the module being built,
    where loading whole and partitioning in `deepspeed.initialize` first moves the whole model
    to every rank's device (`python -m adarl.bench scaling`). Every rank calls it.
    """
    import deepspeed
    import torch.distributed as dist
    from deepspeed.runtime.zero.partition_parameters import DeepSpeedTensorOverride
    from safetensors import safe_open
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.initialization import no_init_weights

    config = AutoConfig.from_pretrained(path)
    # Tensors keep the dtypes the model's own code gives them (parameters: `dtype`; buffers
    # computed in fp32, such as rotary inv_freq, stay fp32, as in `from_pretrained`): only the
    # device is overridden. The partition dtype comes from the config's bf16 flag (DeepSpeed
    # 0.19.8 ignores an explicit `dtype=` on accelerators without fp16, such as CPU).
    with (
        no_init_weights(),
        deepspeed.zero.Init(
            config_dict_or_path=deepspeed_config,
            tensor_overrides=[DeepSpeedTensorOverride.device],
        ),
    ):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    model.tie_weights()
    location: dict[str, Path] = {}  # tensor name -> file (headers only)
    for file in files:
        with safe_open(str(file), framework="pt") as handle:
            location.update(dict.fromkeys(handle.keys(), file))
    names_of: dict[int, list[str]] = {}  # tied parameters appear under several names
    params: dict[int, torch.nn.Parameter] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        names_of.setdefault(id(param), []).append(name)
        params[id(param)] = param
    missing = [names[0] for names in names_of.values() if not set(names) & set(location)]
    if missing:
        raise ValueError(
            f"{path}: no checkpoint tensor for {missing[:5]}{'...' if len(missing) > 5 else ''} "
            "while loading it ZeRO-3-partitioned (renamed checkpoint keys?); use "
            "learner.zero_stage=2 for this model"
        )
    handles = {file: safe_open(str(file), framework="pt") for file in files}
    with torch.no_grad():
        for key, param in params.items():
            source = next(n for n in names_of[key] if n in location)
            part = param.ds_tensor
            size = int(part.ds_numel)
            start = size * dist.get_rank(group=param.ds_process_group)
            end = min(start + size, int(param.ds_numel))
            if start < end:
                flat = _read_flat_range(handles[location[source]], source, start, end)
                part[: end - start].copy_(flat.to(part.dtype))
    handles.clear()
    return model


def _read_flat_range(handle: Any, name: str, start: int, end: int) -> torch.Tensor:
    """Elements [start, end) of tensor `name` flattened, reading only the rows that hold them."""
    view = handle.get_slice(name)
    shape = list(view.get_shape())
    if not shape:
        return handle.get_tensor(name).reshape(-1)[start:end]
    row = 1
    for size in shape[1:]:
        row *= int(size)
    first, last = start // row, -(-end // row)
    rows = view[first:last]
    return rows.reshape(-1)[start - first * row : end - first * row]


def free_port() -> int:
    """A TCP port free on this host right now (for the process group's rendezvous)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("", 0))
        return int(sock.getsockname()[1])


def use_deepspeed_accelerator(device_type: str) -> None:
    """Point DeepSpeed's process-wide accelerator at `device_type` ("cpu" or "cuda").

    DeepSpeed picks CUDA whenever torch sees a GPU and `deepspeed.initialize` moves the model
    there. A CPU learner in a process that sees a GPU (`cluster.in_process=true` with
    `cluster.gpus_per_learner=0` on a GPU machine) would then score CPU inputs with CUDA weights;
    Ray actors without GPUs see none and are unaffected.
    """
    from deepspeed.accelerator import get_accelerator, set_accelerator

    if get_accelerator().device_name() == device_type:
        return
    if device_type == "cuda":
        from deepspeed.accelerator.cuda_accelerator import CUDA_Accelerator

        set_accelerator(CUDA_Accelerator())
    elif device_type == "cpu":
        from deepspeed.accelerator.cpu_accelerator import CPU_Accelerator

        set_accelerator(CPU_Accelerator())
    else:
        raise ValueError(f"device_type must be 'cpu' or 'cuda', got {device_type!r}")


class Learner:
    """One data-parallel rank (see the module docstring). All methods are called on every rank."""

    def __init__(
        self,
        *,
        model_path: str,
        rank: int = 0,
        world_size: int = 1,
        zero_stage: int = 1,
        precision: str = "fp32",
        learning_rate: float = 1e-5,
        adam_betas: tuple[float, float] = (0.9, 0.999),
        adam_eps: float = 1e-8,
        weight_decay: float = 0.0,
        lr_warmup_steps: int = 0,
        max_grad_norm: float = 1.0,
        max_tokens_per_micro_batch: int = 8192,
        loss: PolicyLossSettings | None = None,
        reference_model_path: str | None = None,
        seed: int = 0,
        device: str = "auto",
        collective_timeout_s: float = 600.0,
        temperature: float = 1.0,
        logprob_chunk_tokens: int = 1024,
        activation_checkpointing: bool = False,
    ) -> None:
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is outside world_size {world_size}")
        if zero_stage not in (0, 1, 2, 3):
            raise ValueError(f"zero_stage must be 0, 1, 2 or 3, got {zero_stage}")
        if precision not in ("fp32", "bf16"):
            raise ValueError(f"precision must be 'fp32' or 'bf16', got {precision!r}")
        if temperature <= 0:
            raise ValueError(
                f"temperature must be > 0 (the rollouts' sampling temperature), got {temperature}"
            )
        if logprob_chunk_tokens < 1:
            raise ValueError(f"logprob_chunk_tokens must be >= 1, got {logprob_chunk_tokens}")
        self.model_path = model_path
        self.rank = rank
        self.world_size = world_size
        self.zero_stage = zero_stage
        self.precision = precision
        self.learning_rate = learning_rate
        self.adam_betas = adam_betas
        self.adam_eps = adam_eps
        self.weight_decay = weight_decay
        self.lr_warmup_steps = lr_warmup_steps
        self.max_grad_norm = max_grad_norm
        self.max_tokens_per_micro_batch = max_tokens_per_micro_batch
        self.loss = loss or PolicyLossSettings()
        self.reference_model_path = reference_model_path or model_path
        self.seed = seed
        self.device_kind = device
        self.collective_timeout_s = collective_timeout_s
        self.temperature = temperature
        self.logprob_chunk_tokens = logprob_chunk_tokens
        self.activation_checkpointing = activation_checkpointing
        self._engine: Any = None
        self._reference: Any = None  # a plain module, or a DeepSpeed engine under ZeRO-3
        self._device = torch.device("cpu")
        self._owns_process_group = False
        self._stage0_grad_norm: float | None = None
        self._weight_sender: WeightBroadcastSender | None = None
        self._persistent_buffer_names: set[str] | None = None

    # ----------------------------------------------------------------------------- set-up

    def rendezvous_port(self) -> int:
        """A free port on this rank's host (asked of rank 0 before `setup`)."""
        return free_port()

    def setup(self, *, master_addr: str, master_port: int) -> None:
        """Join the process group (all ranks at once) and build the DeepSpeed engine."""
        if self._engine is not None:
            raise RuntimeError("Learner.setup was already called")
        use_cuda = self.device_kind == "cuda" or (
            self.device_kind == "auto" and torch.cuda.is_available()
        )
        if use_cuda:
            # Under Ray each actor sees its own GPU as device 0.
            torch.cuda.set_device(0)
            self._device = torch.device("cuda", 0)
        torch.manual_seed(self.seed)
        use_deepspeed_accelerator("cuda" if use_cuda else "cpu")
        self._init_process_group(master_addr, master_port, backend="nccl" if use_cuda else "gloo")
        self._engine = self._build_engine()
        if self.loss.kl_coef != 0.0:
            self._reference = self._build_reference()

    def _init_process_group(self, master_addr: str, master_port: int, *, backend: str) -> None:
        import deepspeed
        import deepspeed.ops
        import torch.distributed as dist

        # No C++ shm-allreduce build (≈50 s on first use); gloo handles CPU collectives.
        deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False
        logging.getLogger("DeepSpeed").setLevel(logging.WARNING)
        os.environ.update(
            RANK=str(self.rank),
            LOCAL_RANK="0",
            WORLD_SIZE=str(self.world_size),
            MASTER_ADDR=master_addr,
            MASTER_PORT=str(master_port),
        )
        if dist.is_initialized():
            # An in-process vLLM engine sets up a one-process world and never tears it down; a
            # lone learner shares it (collectives of one rank are local) and leaves it in place.
            if self.world_size == 1 and dist.get_world_size() == 1:
                deepspeed.init_distributed(dist_backend=dist.get_backend(), verbose=False)
                return
            raise RuntimeError(
                f"torch.distributed is already initialised in this process with world size "
                f"{dist.get_world_size()}; a learner of world size {self.world_size} needs its "
                "own process (run learners as Ray actors)"
            )
        deepspeed.init_distributed(
            dist_backend=backend,
            auto_mpi_discovery=False,
            init_method=f"tcp://{master_addr}:{master_port}",
            rank=self.rank,
            world_size=self.world_size,
            timeout=timedelta(seconds=self.collective_timeout_s),
            verbose=False,
        )
        self._owns_process_group = True

    def _deepspeed_config(self) -> dict[str, Any]:
        # Stage 0 fp32 uses the client optimizer directly and DeepSpeed does not keep the norm it
        # clips with; clip in an optimizer pre-step hook instead (`_clip_stage0_gradients`).
        deepspeed_clips = not self._stage0_fp32
        return {
            "train_micro_batch_size_per_gpu": 1,
            "gradient_accumulation_steps": 1,
            "managed_gradient_accumulation": False,
            "gradient_clipping": self.max_grad_norm if deepspeed_clips else 0.0,
            "zero_optimization": {"stage": self.zero_stage},
            "zero_allow_untested_optimizer": True,
            "bf16": {"enabled": self.precision == "bf16"},
            "steps_per_print": 1 << 30,
            "wall_clock_breakdown": False,
        }

    @property
    def _stage0_fp32(self) -> bool:
        return self.zero_stage == 0 and self.precision == "fp32"

    def _load_model(self, path: str) -> TokenScorer:
        from transformers import AutoModelForCausalLM

        # Loaded in the training precision: DeepSpeed's bf16 mode casts the parameters to bf16
        # (buffers such as rotary inv_freq stay fp32, as they do in a bf16 load) before it makes
        # its fp32 master copies, so an fp32 load would only cost a transient fp32 copy per rank.
        # Under ZeRO-3 a local checkpoint is loaded partitioned (`load_partitioned`): no rank
        # ever holds the whole model; elsewhere every rank loads it whole, as DeepSpeed needs.
        dtype = torch.bfloat16 if self.precision == "bf16" else torch.float32
        files = checkpoint_files(path)
        if self.zero_stage == 3 and files:
            model = load_partitioned(
                path, files, dtype=dtype, deepspeed_config=self._deepspeed_config()
            )
        else:
            if self.zero_stage == 3:
                logger.warning(
                    "%s is not a local safetensors checkpoint: every ZeRO-3 rank loads the whole "
                    "model before it is partitioned; download it to a directory to load it "
                    "partitioned",
                    path,
                )
            model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
        # Evaluation mode: no dropout, so the learner's log-probs are the engines' policy.
        model.eval()
        return TokenScorer(
            model, temperature=self.temperature, chunk_tokens=self.logprob_chunk_tokens
        )

    def _build_engine(self) -> Any:
        import deepspeed

        model = self._load_model(self.model_path)
        optimizer = torch.optim.AdamW(
            [p for p in model.parameters() if p.requires_grad],
            lr=self.learning_rate,
            betas=self.adam_betas,
            eps=self.adam_eps,
            weight_decay=self.weight_decay,
        )
        if self._stage0_fp32:
            optimizer.register_step_pre_hook(self._clip_stage0_gradients)
        warmup = self.lr_warmup_steps

        def schedule(opt: torch.optim.Optimizer) -> torch.optim.lr_scheduler.LRScheduler:
            # Linear warm-up over `warmup` steps, then constant. Step s uses factor (s+1)/warmup.
            return torch.optim.lr_scheduler.LambdaLR(
                opt, lambda s: min(1.0, (s + 1) / warmup) if warmup > 0 else 1.0
            )

        engine, _, _, _ = deepspeed.initialize(
            model=model,
            optimizer=optimizer,
            lr_scheduler=schedule,
            config=self._deepspeed_config(),
            dist_init_required=False,
        )
        engine.eval()
        if self.activation_checkpointing:
            # After engine.eval(), which would clear the layers' training flag again.
            enable_activation_checkpointing(engine.module.hf_model)
        return engine

    def _build_reference(self) -> Any:
        import deepspeed

        model = self._load_model(self.reference_model_path)
        for p in model.parameters():
            p.requires_grad_(False)
        if self.zero_stage != 3:
            return model.to(device=self._device)
        # ZeRO-3: the reference is partitioned like the policy (a frozen engine, no optimizer).
        config = {k: v for k, v in self._deepspeed_config().items() if k != "gradient_clipping"}
        engine, _, _, _ = deepspeed.initialize(model=model, config=config, dist_init_required=False)
        engine.eval()
        return engine

    def _clip_stage0_gradients(self, optimizer: torch.optim.Optimizer, *_: Any) -> None:
        params = [p for group in optimizer.param_groups for p in group["params"]]
        max_norm = self.max_grad_norm if self.max_grad_norm > 0 else float("inf")
        norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
        self._stage0_grad_norm = float(norm)
        finite = bool(torch.isfinite(norm))
        if not finite:
            # No gradient, no update: AdamW skips parameters whose grad is None.
            for param in params:
                param.grad = None
        # DeepSpeed reads `overflow` after the step: no LR-schedule step, was_step_applied()
        # False, as its own optimizers do for ZeRO 1-3 (this client optimizer has no check).
        optimizer.overflow = not finite  # type: ignore[attr-defined]

    def close(self) -> None:
        """Release the engine and the process groups (so another learner can start here).

        A world this learner created is destroyed; a shared one (see `_init_process_group`) is
        left alone, and only the data-parallel group DeepSpeed cloned from it is released.
        """
        engine, self._engine = self._engine, None
        self._reference = None
        self._weight_sender = None
        import deepspeed.comm

        if self._owns_process_group:
            deepspeed.comm.destroy_process_group()
            self._owns_process_group = False
        elif engine is not None and engine.data_parallel_group is not None:
            deepspeed.comm.destroy_process_group(group=engine.data_parallel_group)

    # ----------------------------------------------------------------------------- training

    @property
    def engine(self) -> Any:
        if self._engine is None:
            raise RuntimeError("Learner.setup(master_addr=..., master_port=...) was not called")
        return self._engine

    @property
    def module(self) -> torch.nn.Module:
        """The HF model (parameters partitioned under ZeRO-3): config, weights, save_pretrained."""
        return self.scorer.hf_model

    @property
    def scorer(self) -> TokenScorer:
        """The module DeepSpeed wraps: the HF model's backbone and head, scoring tokens."""
        return self.engine.module

    def global_step(self) -> int:
        """Optimizer steps taken (restored by `load_checkpoint`)."""
        return int(self.engine.global_steps)

    def _micro_batches(
        self, batch: TrainBatch, num_micro_batches: int
    ) -> list[tuple[list[int], TrainBatch] | None]:
        """(rows, micro-batch) pairs, padded with None (an empty pass) to `num_micro_batches`."""
        plan = plan_micro_batches(sequence_lengths(batch), self.max_tokens_per_micro_batch)
        if len(plan) > num_micro_batches:
            raise ValueError(
                f"rank {self.rank} needs {len(plan)} micro-batches but the group planned "
                f"{num_micro_batches}; the group and the learners must use the same "
                "max_tokens_per_micro_batch"
            )
        parts: list[tuple[list[int], TrainBatch] | None] = [
            (rows, batch.select(rows)) for rows in plan
        ]
        return parts + [None] * (num_micro_batches - len(plan))

    def _forward(
        self,
        model: Any,
        micro: TrainBatch | None,
        *,
        score: str = "response",
        entropy_grad: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """(log π_T [B, T], entropy [B, T], input_ids, attention_mask) on this rank's device.

        `model` is a `TokenScorer` or a DeepSpeed engine around one. `score` picks the positions:
        "response" (the response tokens: what the loss needs) or "all" (every real token after
        the first). `None` runs a two-token pass whose output is multiplied by zero by the
        caller: ranks with fewer micro-batches take part in ZeRO's per-pass collectives without
        changing gradients (its one scored token reaches every parameter).
        """
        if micro is None:
            input_ids = torch.zeros(1, 2, dtype=torch.long, device=self._device)
            attention_mask = torch.ones(1, 2, dtype=torch.long, device=self._device)
            scored = torch.tensor([[False, True]], device=self._device)
        else:
            input_ids = micro.input_ids.to(self._device)
            attention_mask = micro.attention_mask.to(self._device, dtype=torch.long)
            if score == "response":
                scored = micro.response_mask.to(self._device)
            else:
                scored = attention_mask.bool()
                scored[:, 0] = False
        logprobs, entropy = model(input_ids, attention_mask, scored, entropy_grad=entropy_grad)
        return logprobs, entropy, input_ids, attention_mask

    def train_step(
        self,
        batch: TrainBatch,
        *,
        num_micro_batches: int,
        global_num_tokens: float,
        global_num_sequences: float,
    ) -> RankStepResult:
        """One optimizer step on this rank's shard; gradients are summed over all ranks.

        `global_num_*` are the whole batch's counts (`BatchCounts`); `num_micro_batches` is the
        same on all ranks (the most any rank needs for its shard).
        """
        engine = self.engine
        settings = self.loss
        sums: dict[str, float] = {}
        padded_tokens = 0
        forward_backward = _Timer()
        with forward_backward.measure():
            for part in self._micro_batches(batch, num_micro_batches):
                micro = None if part is None else part[1]
                logprobs, entropy, input_ids, _ = self._forward(
                    engine, micro, entropy_grad=settings.entropy_coef != 0.0
                )
                if micro is None:
                    engine.backward(logprobs.sum() * 0.0, scale_wrt_gas=False)
                    continue
                padded_tokens += int(input_ids.numel())
                ref_logprobs = None
                if self._reference is not None:
                    with torch.no_grad():
                        ref_logprobs = self._forward(self._reference, micro)[0]
                mask = micro.response_mask.to(self._device)
                out = policy_loss(
                    logprobs=logprobs,
                    behaviour_logprobs=micro.behaviour_logprobs.to(self._device),
                    advantages=micro.advantages.to(self._device),
                    response_mask=mask,
                    global_num_tokens=global_num_tokens,
                    global_num_sequences=global_num_sequences,
                    aggregation=settings.aggregation,
                    clip_low=settings.clip_low,
                    clip_high=settings.clip_high,
                    dual_clip=settings.dual_clip,
                    proximal_logprobs=(
                        logprobs.detach() if settings.ratio_reference == "learner" else None
                    ),
                    tis_cap=settings.tis_cap,
                    ref_logprobs=ref_logprobs,
                    kl_coef=settings.kl_coef,
                    kl_estimator=settings.kl_estimator,
                    entropy=entropy,
                    entropy_coef=settings.entropy_coef,
                )
                # DeepSpeed averages gradients over ranks; the shares must be summed instead.
                loss = out.loss * self.world_size
                if not bool(torch.isfinite(out.loss)):
                    # Make every gradient of this pass NaN (a NaN term that is constant in the
                    # weights would otherwise leave finite gradients), so that the optimizer's
                    # check discards the whole update on every rank.
                    loss = logprobs.sum() * float("nan")
                engine.backward(loss, scale_wrt_gas=False)
                for key, value in out.metrics.items():
                    sums[key] = sums.get(key, 0.0) + value
        learning_rate = float(engine.get_lr()[0])
        optimizer_step = _Timer()
        with optimizer_step.measure():
            engine.step()
        return RankStepResult(
            loss_metrics=sums,
            grad_norm=self._last_grad_norm(),
            learning_rate=learning_rate,
            num_micro_batches=num_micro_batches,
            padded_tokens=padded_tokens,
            forward_backward_s=forward_backward.seconds,
            optimizer_step_s=optimizer_step.seconds,
            skipped_nonfinite=not engine.was_step_applied(),
        )

    def _last_grad_norm(self) -> float:
        if self._stage0_fp32:
            assert self._stage0_grad_norm is not None
            return self._stage0_grad_norm
        norm = self.engine.get_global_grad_norm()
        if norm is None:
            raise RuntimeError("DeepSpeed reported no gradient norm after the step")
        return float(norm)

    def sample_gradient_norms(
        self, batch: TrainBatch, *, num_micro_batches: int
    ) -> torch.Tensor:  # [B] float32
        """‖∇_E NLL_b‖ per row (adarl.learner.grad_norms): the GVM statistic, weights unchanged.

        One forward and one backward (w.r.t. the embedding output only) per micro-batch; no
        parameter gradient is formed, so the next `train_step` is unaffected.
        """
        embedding = self.module.get_input_embeddings()  # the same module inside the scorer
        vocab_size = int(self.module.config.vocab_size)
        captured: list[torch.Tensor] = []
        hook = embedding.register_forward_hook(lambda _m, _i, output: captured.append(output))
        norms = torch.zeros(batch.num_sequences, dtype=torch.float32)
        try:
            for part in self._micro_batches(batch, num_micro_batches):
                captured.clear()
                # The bare module, not the engine: DeepSpeed's engine forward hooks its outputs so
                # that only `engine.backward` may differentiate them. ZeRO-3's parameter gathering
                # lives on the submodules and still runs.
                logprobs, _, input_ids, attention_mask = self._forward(
                    self.scorer, None if part is None else part[1]
                )
                (embedded,) = captured
                if part is None:
                    torch.autograd.grad(logprobs.sum() * 0.0, embedded)
                    continue
                rows, micro = part
                nll = response_nll(logprobs, micro.response_mask.to(self._device))
                (grads,) = torch.autograd.grad(nll.sum(), embedded)
                norms[torch.tensor(rows)] = per_sequence_embedding_grad_norms(
                    grads, input_ids, attention_mask.bool(), vocab_size=vocab_size
                ).cpu()
        finally:
            hook.remove()
        return norms

    @torch.no_grad()
    def score(self, batch: TrainBatch) -> torch.Tensor:  # [B, T] float32
        """log π_T (the learner's policy, at its temperature) at every real position of `batch`
        (0 at position 0 and on padding), for tests and diagnostics.

        A collective under ZeRO-3: call on all ranks with the same batch.
        """
        out = torch.zeros(batch.input_ids.shape, dtype=torch.float32)
        plan = plan_micro_batches(sequence_lengths(batch), self.max_tokens_per_micro_batch)
        for rows in plan:
            micro = batch.select(rows)
            logprobs, _, input_ids, _ = self._forward(self.scorer, micro, score="all")
            out[torch.tensor(rows), : input_ids.shape[1]] = logprobs.cpu()
        return out

    # ----------------------------------------------------------------------------- weights

    def _named_weights(self) -> dict[str, torch.Tensor]:
        """HF-named parameters (tied ones once) and persistent buffers of the policy: the
        tensors of its checkpoint, i.e. what `update_weights` and `save_pretrained` expect."""
        module = self.module
        if self._persistent_buffer_names is None:
            state_keys = set(module.state_dict().keys())
            self._persistent_buffer_names = {
                n for n, _ in module.named_buffers() if n in state_keys
            }
        weights = dict(module.named_parameters())
        for name, buffer in module.named_buffers():
            if name in self._persistent_buffer_names and name not in weights:
                weights[name] = buffer
        return weights

    def weight_infos(self) -> list[WeightInfo]:
        """Every weight's name, full shape and dtype, in a fixed order (no collective)."""
        return [
            WeightInfo(name=name, shape=tuple(getattr(t, "ds_shape", t.shape)), dtype=t.dtype)
            for name, t in self._named_weights().items()
        ]

    def gather_weights(self, names: Sequence[str]) -> dict[str, torch.Tensor]:
        """Full CPU copies of `names` on rank 0 ({} on other ranks). Collective under ZeRO-3."""
        named = self._named_weights()
        missing = [n for n in names if n not in named]
        if missing:
            raise KeyError(f"unknown weight names {missing[:5]}; see weight_infos()")
        tensors = [named[n] for n in names]
        out: dict[str, torch.Tensor] = {}
        with self._gathered([t for t in tensors if hasattr(t, "ds_id")]):
            if self.rank == 0:
                for name, tensor in zip(names, tensors, strict=True):
                    out[name] = tensor.detach().to("cpu", copy=True).contiguous()
        return out

    def init_weight_broadcast(
        self,
        *,
        master_addr: str,
        master_port: int,
        world_size: int,
        backend: str,
        timeout_s: float,
    ) -> None:
        """Rank 0 joins the weight-broadcast group as its root (adarl/weight_sync/broadcast.py)."""
        from adarl.weight_transport import WeightBroadcastSender, create_broadcast_group

        if self.rank != 0:
            raise RuntimeError("only learner rank 0 sends weights")
        group = create_broadcast_group(
            master_addr=master_addr,
            master_port=master_port,
            rank=0,
            world_size=world_size,
            backend=backend,
            timeout_s=timeout_s,
        )
        self._weight_sender = WeightBroadcastSender(group=group, device=self._device)

    def broadcast_weights(self, layouts: Sequence[BucketLayout]) -> None:
        """Every rank gathers each bucket (ZeRO-3); rank 0 broadcasts it to the engines.

        Rank 0 packs straight from the gathered parameters (no intermediate copy), so at most
        one bucket is gathered at a time.
        """
        if self.rank == 0 and self._weight_sender is None:
            raise RuntimeError("init_weight_broadcast was not called on rank 0")
        named = self._named_weights()
        for layout in layouts:
            tensors = {name: named[name] for name in layout.names}
            with self._gathered([t for t in tensors.values() if hasattr(t, "ds_id")]):
                if self._weight_sender is not None:
                    self._weight_sender.send(layout, {n: t.detach() for n, t in tensors.items()})

    @contextmanager
    def _gathered(self, params: Sequence[torch.Tensor]) -> Iterator[None]:
        if self.zero_stage != 3 or not params:
            yield
            return
        import deepspeed

        with deepspeed.zero.GatheredParameters(list(params), modifier_rank=None):
            yield

    # ----------------------------------------------------------------------------- checkpoints

    def save_checkpoint(self, directory: str, *, tag: str, client_state: dict[str, Any]) -> None:
        """DeepSpeed state (model, optimizer, LR scheduler) of every rank under directory/tag.

        Every rank writes its own optimizer partition: on several nodes `directory` must be on a
        filesystem all of them share."""
        self.engine.save_checkpoint(directory, tag=tag, client_state={"adarl": client_state})

    def load_checkpoint(self, directory: str, *, tag: str) -> dict[str, Any]:
        """Restore what `save_checkpoint` wrote; returns its `client_state`."""
        path, client_state = self.engine.load_checkpoint(
            directory, tag=tag, load_optimizer_states=True, load_lr_scheduler_states=True
        )
        if path is None:
            raise FileNotFoundError(f"no DeepSpeed checkpoint {tag!r} under {directory}")
        return dict((client_state or {}).get("adarl", {}))

    def load_weights(self, directory: str, *, tag: str) -> None:
        """Only the policy's weights from what `save_checkpoint` wrote, saved by any number of
        ranks (`adarl.export`: one learner exports a checkpoint of N). DeepSpeed's module-only
        load reads the full module saved by rank 0 at ZeRO 0-2 and, at ZeRO-3, rebuilds the fp32
        weights from every rank's partitions (cast to the training precision). The optimizer,
        scheduler and step counters are left as they are."""
        path, _ = self.engine.load_checkpoint(
            directory,
            tag=tag,
            load_module_only=True,
            load_optimizer_states=False,
            load_lr_scheduler_states=False,
        )
        if path is None:
            raise FileNotFoundError(f"no DeepSpeed checkpoint {tag!r} under {directory}")

    def export_hf(self, directory: str) -> None:
        """An HF model directory (config, safetensors, tokenizer files) on rank 0. Collective."""
        names = [info.name for info in self.weight_infos()]
        weights = self.gather_weights(names)
        if self.rank != 0:
            return
        target = Path(directory)
        target.mkdir(parents=True, exist_ok=True)
        self.module.save_pretrained(target, state_dict=weights, safe_serialization=True)
        source = Path(self.model_path)
        for filename in TOKENIZER_FILES:
            if (source / filename).is_file():
                shutil.copy2(source / filename, target / filename)
