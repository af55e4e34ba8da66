"""One data-parallel learner rank: a DeepSpeed engine over an HF causal LM, trained with the
generic loss.

A `Learner` is a plain class. `LearnerGroup` (adarl/learner/group.py) runs N of them as Ray actors
(or one in-process), cuts each TrainBatch across them and sums what they report.

Life cycle: `Learner(...)` only records settings; `setup(master_addr=..., master_port=...)` joins
the process group (adarl/learner/process_group.py) and builds the engine. What leaves the rank
lives beside this module: its weights (listed, gathered, broadcast to the engines, exported as an
HF model: adarl/learner/weights.py) and its checkpoint (adarl/learner/checkpoint.py). The
`Learner` methods of those names are the actor's interface: the group and weight sync call them
by name on every rank, and they hand the work to those modules.

The optimizer is torch's AdamW, passed to DeepSpeed as a client optimizer, so that a fresh CPU
machine compiles no C++ on first use (measured, DeepSpeed 0.19.8: FusedAdam ≈ 43 s, CPUAdam
≈ 45 s; the process group's part of this: adarl/learner/process_group.py).

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
under ZeRO-3 a local checkpoint is loaded partitioned (adarl/learner/loading.py), so no rank
ever holds the whole model.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import torch

from adarl.algo.loss import policy_loss
from adarl.config.learner import PolicyLossConfig
from adarl.learner.batching import MiniBatchShard, plan_micro_batches, sequence_lengths
from adarl.learner.checkpoint import (
    load_engine_state,
    load_engine_weights,
    load_reference_state,
    save_engine_state,
    save_reference_state,
)
from adarl.learner.grad_norms import per_sequence_embedding_grad_norms, response_nll
from adarl.learner.loading import checkpoint_files, load_partitioned
from adarl.learner.logprobs import TokenScorer, enable_activation_checkpointing
from adarl.learner.process_group import (
    free_port,
    join_process_group,
    leave_process_group,
    use_deepspeed_accelerator,
)
from adarl.learner.weights import PolicyWeights, WeightInfo
from adarl.types import TrainBatch

if TYPE_CHECKING:
    from adarl.weight_transport import BucketLayout

logger = logging.getLogger(__name__)

SETUP_NOT_CALLED = "Learner.setup(master_addr=..., master_port=...) was not called"


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


class _Forward(NamedTuple):
    """What `Learner._forward` returns (on the rank's device)."""

    logprobs: torch.Tensor  # [B, T] log π_T at the scored positions, 0 elsewhere
    entropy: torch.Tensor  # [B, T] H(π_T) there
    input_ids: torch.Tensor  # [B, T]
    attention_mask: torch.Tensor  # [B, T] long
    top_logprobs: torch.Tensor | None = None  # [B, T, K] with top_k > 0
    is_top1: torch.Tensor | None = None  # [B, T] bool with top_k > 0


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
        loss: PolicyLossConfig | None = None,
        reference_model_path: str | None = None,
        seed: int = 0,
        device: str = "auto",
        collective_timeout_s: float = 600.0,
        temperature: float = 1.0,
        logprob_chunk_tokens: int = 1024,
        activation_checkpointing: bool = False,
        rehearsal: bool = False,
    ) -> None:
        """`rehearsal`: batches will hold rehearsal rows (`allocator.rehearsal.enabled`), whose
        forward-KL term needs the frozen reference model, which is then loaded even when
        `loss.kl_coef` is 0."""
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
        # The config's record, defaults and checks: the loss settings are written once.
        loss = loss or PolicyLossConfig()
        loss.validate()
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
        self.loss = loss
        self.reference_model_path = reference_model_path or model_path
        self.seed = seed
        self.device_kind = device
        self.collective_timeout_s = collective_timeout_s
        self.temperature = temperature
        self.logprob_chunk_tokens = logprob_chunk_tokens
        self.activation_checkpointing = activation_checkpointing
        self.rehearsal = rehearsal
        self._engine: Any = None
        self._reference: Any = None  # a plain module, or a DeepSpeed engine under ZeRO-3
        self._device = torch.device("cpu")
        self._owns_process_group = False
        self._stage0_grad_norm: float | None = None
        self._weights: PolicyWeights | None = None
        self._reference_was_reset = False  # the reference holds other weights than it loaded

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
        self._owns_process_group = join_process_group(
            rank=self.rank,
            world_size=self.world_size,
            master_addr=master_addr,
            master_port=master_port,
            backend="nccl" if use_cuda else "gloo",
            timeout_s=self.collective_timeout_s,
        )
        self._engine = self._build_engine()
        self._weights = PolicyWeights(
            self.module, rank=self.rank, zero_stage=self.zero_stage, device=self._device
        )
        if self.loss.kl_coef != 0.0 or self.rehearsal:
            self._reference = self._build_reference()

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
        """Release the engine and the process groups (so another learner can start here;
        `leave_process_group` says which groups are this learner's to release)."""
        engine, self._engine = self._engine, None
        self._reference = None
        self._weights = None
        leave_process_group(
            owns_world=self._owns_process_group,
            data_parallel_group=None if engine is None else engine.data_parallel_group,
        )
        self._owns_process_group = False

    # ----------------------------------------------------------------------------- training

    @property
    def engine(self) -> Any:
        if self._engine is None:
            raise RuntimeError(SETUP_NOT_CALLED)
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
        top_k: int = 0,
    ) -> _Forward:
        """log π_T [B, T], entropy [B, T], input_ids and attention_mask on this rank's device,
        and with `top_k` > 0 the K largest log-probs [B, T, K] and top-1 flags [B, T].

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
        scores = model(input_ids, attention_mask, scored, entropy_grad=entropy_grad, top_k=top_k)
        return _Forward(*scores[:2], input_ids, attention_mask, *scores[2:])

    def train_step(
        self, mini_batches: Sequence[MiniBatchShard], *, epochs: int = 1
    ) -> list[RankStepResult]:
        """One training step on this rank: `epochs` passes over the step's mini-batches (this
        rank's shard of each, `adarl.learner.batching.plan_mini_batch_shards`), one optimizer
        step per mini-batch per pass (`optimizer_step`); one result per optimizer step.

        One mini-batch and one pass is one optimizer step on the whole batch. With more,
        ratio_reference "learner" takes π_old of every mini-batch from the weights the step
        starts from, scored before the first update (verl's old log-probs); "behaviour" keeps
        the engines' log-probs, so later steps' ratios also carry the drift of earlier ones."""
        if epochs < 1:
            raise ValueError(f"epochs must be >= 1, got {epochs}")
        proximal: list[torch.Tensor | None] = [None] * len(mini_batches)
        if self.loss.ratio_reference == "learner" and len(mini_batches) * epochs > 1:
            proximal = [self._response_logprobs(mini) for mini in mini_batches]
        return [
            self.optimizer_step(mini, proximal_logprobs=old)
            for _ in range(epochs)
            for mini, old in zip(mini_batches, proximal, strict=True)
        ]

    @torch.no_grad()
    def _response_logprobs(self, mini: MiniBatchShard) -> torch.Tensor:  # [B, T] of the shard
        """log π_T of the shard's tokens under the current weights, micro-batch by micro-batch
        (the same number on every rank, for ZeRO-3's collective gathers)."""
        shard = mini.shard
        out = torch.zeros(shard.input_ids.shape, device=self._device)
        for part in self._micro_batches(shard, mini.num_micro_batches):
            logprobs = self._forward(self.engine, None if part is None else part[1]).logprobs
            if part is not None:
                rows, micro = part
                out[torch.tensor(rows), : micro.input_ids.shape[1]] = logprobs.float()
        return out

    def optimizer_step(
        self, mini: MiniBatchShard, *, proximal_logprobs: torch.Tensor | None = None
    ) -> RankStepResult:
        """One optimizer step on this rank's shard of one mini-batch: its micro-batches each add
        their share of the mini-batch's gradient (`_accumulate_gradients`), then the optimizer
        steps once; gradients are summed over all ranks. `proximal_logprobs` ([B, T] of the
        shard): π_old for ratio_reference "learner" when it is not the current weights."""
        engine = self.engine
        sums: dict[str, float] = {}
        padded_tokens = 0
        forward_backward = _Timer()
        with forward_backward.measure():
            for part in self._micro_batches(mini.shard, mini.num_micro_batches):
                micro = None if part is None else part[1]
                old = None
                if part is not None and proximal_logprobs is not None:
                    rows, micro = part
                    old = proximal_logprobs[torch.tensor(rows), : micro.input_ids.shape[1]]
                shares = self._accumulate_gradients(
                    micro,
                    global_num_tokens=mini.global_num_tokens,
                    global_num_sequences=mini.global_num_sequences,
                    global_num_rehearsal_tokens=mini.global_num_rehearsal_tokens,
                    global_num_rehearsal_sequences=mini.global_num_rehearsal_sequences,
                    proximal_logprobs=old,
                )
                if micro is not None:
                    padded_tokens += int(micro.input_ids.numel())
                for key, value in shares.items():
                    sums[key] = sums.get(key, 0.0) + value
        learning_rate = float(engine.get_lr()[0])
        optimizer_step = _Timer()
        with optimizer_step.measure():
            engine.step()
        return RankStepResult(
            loss_metrics=sums,
            grad_norm=self._last_grad_norm(),
            learning_rate=learning_rate,
            num_micro_batches=mini.num_micro_batches,
            padded_tokens=padded_tokens,
            forward_backward_s=forward_backward.seconds,
            optimizer_step_s=optimizer_step.seconds,
            skipped_nonfinite=not engine.was_step_applied(),
        )

    def _accumulate_gradients(
        self,
        micro: TrainBatch | None,
        *,
        global_num_tokens: float,
        global_num_sequences: float,
        global_num_rehearsal_tokens: float = 0.0,
        global_num_rehearsal_sequences: float = 0.0,
        proximal_logprobs: torch.Tensor | None = None,
    ) -> dict[str, float]:
        """Forward and backward of one micro-batch: its share of the mini-batch's loss gradient
        is added to the engine's gradients; returns its additive metric shares. `None` is an
        empty pass (zero gradient, no metrics) that keeps ZeRO's collectives in step.
        `proximal_logprobs`: π_old scored earlier; None with ratio_reference "learner" means
        the current weights (the first and only optimizer step of a training step). Rehearsal
        rows (`TrainBatch.rehearsal`) are trained by the loss's forward-KL term alone, against
        the frozen reference."""
        engine = self.engine
        settings = self.loss
        forward = self._forward(
            engine,
            micro,
            entropy_grad=settings.entropy_coef != 0.0,
            top_k=settings.simko_top_k if settings.simko_alpha > 0 else 0,
        )
        logprobs, entropy = forward.logprobs, forward.entropy
        if micro is None:
            if self._reference is not None and self.zero_stage == 3:
                # The partitioned reference gathers its parameters collectively in every
                # forward: a rank without a micro-batch runs the same empty pass through it as
                # the ranks that score theirs, or they would wait for it.
                with torch.no_grad():
                    self._forward(self._reference, None)
            engine.backward(logprobs.sum() * 0.0, scale_wrt_gas=False)
            return {}
        if micro.rehearsal is not None and bool(micro.rehearsal.any()) and self._reference is None:
            raise RuntimeError(
                "the batch holds rehearsal rows but this learner has no reference model: build "
                "it with rehearsal=True (build_learner_group(..., rehearsal=True), as the session "
                "does for allocator.rehearsal.enabled=true)"
            )
        ref_logprobs = None
        if self._reference is not None:
            with torch.no_grad():
                ref_logprobs = self._forward(self._reference, micro).logprobs
        out = policy_loss(
            logprobs=logprobs,
            behaviour_logprobs=micro.behaviour_logprobs.to(self._device),
            advantages=micro.advantages.to(self._device),
            response_mask=micro.response_mask.to(self._device),
            global_num_tokens=global_num_tokens,
            global_num_sequences=global_num_sequences,
            aggregation=settings.aggregation,  # type: ignore[arg-type]  # validated in __init__
            clip_low=settings.clip_low,
            clip_high=settings.clip_high,
            dual_clip=settings.dual_clip,
            proximal_logprobs=(
                None
                if settings.ratio_reference != "learner"
                else logprobs.detach()
                if proximal_logprobs is None
                else proximal_logprobs
            ),
            tis_cap=settings.tis_cap,
            ref_logprobs=ref_logprobs,
            kl_coef=settings.kl_coef,
            kl_estimator=settings.kl_estimator,  # type: ignore[arg-type]
            entropy=entropy,
            entropy_coef=settings.entropy_coef,
            top_logprobs=forward.top_logprobs,
            is_top1=forward.is_top1,
            simko_alpha=settings.simko_alpha,
            simko_entropy_quantile=settings.simko_entropy_quantile,
            simko_negative_scale=settings.simko_negative_scale,
            rehearsal=None if micro.rehearsal is None else micro.rehearsal.to(self._device),
            sequence_weights=(
                None if micro.sequence_weights is None else micro.sequence_weights.to(self._device)
            ),
            rehearsal_coef=settings.rehearsal_coef,
            global_num_rehearsal_tokens=global_num_rehearsal_tokens,
            global_num_rehearsal_sequences=global_num_rehearsal_sequences,
        )
        # DeepSpeed averages gradients over ranks; the shares must be summed instead.
        loss = out.loss * self.world_size
        if not bool(torch.isfinite(out.loss)):
            # Make every gradient of this pass NaN (a NaN term that is constant in the
            # weights would otherwise leave finite gradients), so that the optimizer's
            # check discards the whole update on every rank.
            loss = logprobs.sum() * float("nan")
        engine.backward(loss, scale_wrt_gas=False)
        return out.metrics

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
                forward = self._forward(self.scorer, None if part is None else part[1])
                logprobs, input_ids = forward.logprobs, forward.input_ids
                attention_mask = forward.attention_mask
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
            forward = self._forward(self.scorer, micro, score="all")
            logprobs, input_ids = forward.logprobs, forward.input_ids
            out[torch.tensor(rows), : input_ids.shape[1]] = logprobs.cpu()
        return out

    # ------------------------------------------------------------------ weights, checkpoints
    # The actor's interface for what leaves the rank: the group and weight sync call these by
    # name on every rank; adarl/learner/weights.py and adarl/learner/checkpoint.py do the work.

    @property
    def policy_weights(self) -> PolicyWeights:
        """The policy's weights as its HF checkpoint names them (listing, gathers, export)."""
        if self._weights is None:
            raise RuntimeError(SETUP_NOT_CALLED)
        return self._weights

    def weight_infos(self) -> list[WeightInfo]:
        """Every weight's name, full shape and dtype, in a fixed order (no collective)."""
        return self.policy_weights.infos()

    def gather_weights(self, names: Sequence[str]) -> dict[str, torch.Tensor]:
        """Full CPU copies of `names` on rank 0 ({} on other ranks). Collective under ZeRO-3."""
        return self.policy_weights.gather(names)

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
        self.policy_weights.join_broadcast(
            master_addr=master_addr,
            master_port=master_port,
            world_size=world_size,
            backend=backend,
            timeout_s=timeout_s,
        )

    def broadcast_weights(self, layouts: Sequence[BucketLayout]) -> None:
        """Every rank gathers each bucket (ZeRO-3); rank 0 broadcasts it to the engines."""
        self.policy_weights.broadcast(layouts)

    def export_hf(self, directory: str) -> None:
        """An HF model directory (config, safetensors, tokenizer files) on rank 0. Collective."""
        self.policy_weights.export_hf(directory, tokenizer_source=self.model_path)

    def save_checkpoint(self, directory: str, *, tag: str, client_state: dict[str, Any]) -> None:
        """DeepSpeed state (model, optimizer, LR scheduler) of every rank under directory/tag,
        with the group's `client_state` (adarl/learner/checkpoint.py); and the KL reference's
        weights once `reset_reference` has moved it off its initial ones."""
        save_engine_state(self.engine, directory, tag=tag, client_state=client_state)
        if self._reference_was_reset:
            save_reference_state(
                self._reference_module,
                directory,
                tag=tag,
                rank=self.rank,
                partitioned=self.zero_stage == 3,
            )

    def load_checkpoint(self, directory: str, *, tag: str) -> dict[str, Any]:
        """Restore what `save_checkpoint` wrote; returns its `client_state`."""
        state = load_engine_state(self.engine, directory, tag=tag)
        if self._reference is not None:
            self._reference_was_reset = load_reference_state(
                self._reference_module, directory, tag=tag, partitioned=self.zero_stage == 3
            )
        return state

    @property
    def _reference_module(self) -> torch.nn.Module:
        """The reference's `TokenScorer` (inside its frozen engine under ZeRO-3)."""
        return getattr(self._reference, "module", self._reference)

    @torch.no_grad()
    def reset_reference(self) -> None:
        """ProRL's reference reset (Liu et al. 2025, arXiv 2505.24864): the KL anchor moves to the
        current policy, so the KL term stops pulling the policy back towards where training
        started and pulls it towards where it is now. (ProRL also resets the optimizer's
        moments; adarl keeps them.) Collective under ZeRO-3."""
        if self._reference is None:
            raise RuntimeError(
                "reset_reference needs a KL reference model: set learner.loss.kl_coef > 0"
            )
        policy = dict(self.module.named_parameters())
        targets = dict(self._reference_module.named_parameters())
        if targets.keys() != policy.keys():
            raise RuntimeError("the KL reference and the policy have different parameters")
        if self.zero_stage == 3:
            import deepspeed

            # Every rank gathers both; rank 0's copy is partitioned back into the reference.
            with (
                deepspeed.zero.GatheredParameters(list(policy.values()), modifier_rank=None),
                deepspeed.zero.GatheredParameters(list(targets.values()), modifier_rank=0),
            ):
                if self.rank == 0:
                    for name, target in targets.items():
                        target.copy_(policy[name])
        else:
            for name, target in targets.items():
                target.copy_(policy[name])
        self._reference_was_reset = True

    def load_weights(self, directory: str, *, tag: str) -> None:
        """Only the policy's weights from what `save_checkpoint` wrote, by any number of ranks;
        the optimizer, scheduler and step counters are left as they are."""
        load_engine_weights(self.engine, directory, tag=tag)
