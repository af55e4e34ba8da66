"""What a learner rank trains with, built at set-up: its model, its DeepSpeed engine and optimizer,
and the frozen reference model.

The optimizer is torch's AdamW, passed to DeepSpeed as a client optimizer, so that a fresh CPU
machine compiles no C++ on first use (measured, DeepSpeed 0.19.8: FusedAdam ≈ 43 s, CPUAdam
≈ 45 s; the process group's part of this: adarl/learner/process_group.py).

Gradient accumulation is caller-owned (`managed_gradient_accumulation: false`): a step runs as
many micro-batches as its token budget needs and calls `engine.step()` once (adarl/learner/
learner.py).

A step whose gradient norm is NaN or infinite changes nothing: DeepSpeed's overflow check
discards the update at ZeRO 1-3 and under bf16; for the stage-0 fp32 client optimizer, which
DeepSpeed does not check, `Stage0Clip` clips the gradients itself and marks the overflow. The
weights, the optimizer state and the LR schedule stay as they were.

The model is loaded in the training precision (bf16 weights under `precision="bf16"`) as a
`TokenScorer` at the rollouts' temperature (adarl/learner/logprobs.py); under ZeRO-3 a local
checkpoint is loaded partitioned (adarl/learner/loading.py), so no rank ever holds the whole
model.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import torch

from adarl.learner.loading import checkpoint_files, load_partitioned
from adarl.learner.logprobs import TokenScorer, enable_activation_checkpointing

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class EngineSettings:
    """A rank's model, optimizer and DeepSpeed settings (`Learner`'s arguments of those names)."""

    zero_stage: int = 1
    precision: str = "fp32"
    learning_rate: float = 1e-5
    adam_betas: tuple[float, float] = (0.9, 0.999)
    adam_eps: float = 1e-8
    weight_decay: float = 0.0
    lr_warmup_steps: int = 0
    max_grad_norm: float = 1.0
    temperature: float = 1.0
    logprob_chunk_tokens: int = 1024
    activation_checkpointing: bool = False

    def __post_init__(self) -> None:
        if self.zero_stage not in (0, 1, 2, 3):
            raise ValueError(f"zero_stage must be 0, 1, 2 or 3, got {self.zero_stage}")
        if self.precision not in ("fp32", "bf16"):
            raise ValueError(f"precision must be 'fp32' or 'bf16', got {self.precision!r}")
        if self.temperature <= 0:
            raise ValueError(
                f"temperature must be > 0 (the rollouts' sampling temperature), got "
                f"{self.temperature}"
            )
        if self.logprob_chunk_tokens < 1:
            raise ValueError(f"logprob_chunk_tokens must be >= 1, got {self.logprob_chunk_tokens}")

    @property
    def stage0_fp32(self) -> bool:
        """DeepSpeed steps the client optimizer itself and keeps no gradient norm: `Stage0Clip`."""
        return self.zero_stage == 0 and self.precision == "fp32"

    def deepspeed_config(self) -> dict[str, Any]:
        # Stage 0 fp32 uses the client optimizer directly and DeepSpeed does not keep the norm it
        # clips with; clip in an optimizer pre-step hook instead (`Stage0Clip`).
        return {
            "train_micro_batch_size_per_gpu": 1,
            "gradient_accumulation_steps": 1,
            "managed_gradient_accumulation": False,
            "gradient_clipping": 0.0 if self.stage0_fp32 else self.max_grad_norm,
            "zero_optimization": {"stage": self.zero_stage},
            "zero_allow_untested_optimizer": True,
            "bf16": {"enabled": self.precision == "bf16"},
            "steps_per_print": 1 << 30,
            "wall_clock_breakdown": False,
        }


def load_scorer(path: str, settings: EngineSettings) -> TokenScorer:
    """The model at `path` in the training precision, in evaluation mode (no dropout: the
    learner's log-probs are the engines' policy), as a `TokenScorer`."""
    from transformers import AutoModelForCausalLM

    # Loaded in the training precision: DeepSpeed's bf16 mode casts the parameters to bf16
    # (buffers such as rotary inv_freq stay fp32, as they do in a bf16 load) before it makes
    # its fp32 master copies, so an fp32 load would only cost a transient fp32 copy per rank.
    # Under ZeRO-3 a local checkpoint is loaded partitioned (`load_partitioned`): no rank
    # ever holds the whole model; elsewhere every rank loads it whole, as DeepSpeed needs.
    dtype = torch.bfloat16 if settings.precision == "bf16" else torch.float32
    files = checkpoint_files(path)
    if settings.zero_stage == 3 and files:
        model = load_partitioned(
            path, files, dtype=dtype, deepspeed_config=settings.deepspeed_config()
        )
    else:
        if settings.zero_stage == 3:
            logger.warning(
                "%s is not a local safetensors checkpoint: every ZeRO-3 rank loads the whole "
                "model before it is partitioned; download it to a directory to load it "
                "partitioned",
                path,
            )
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    model.eval()
    return TokenScorer(
        model, temperature=settings.temperature, chunk_tokens=settings.logprob_chunk_tokens
    )


class Stage0Clip:
    """The stage-0 fp32 client optimizer's gradient clipping (an optimizer pre-step hook):
    the global norm clipped to `max_grad_norm` (0: no clipping) and kept for the step's report;
    a non-finite norm drops every gradient and marks the step an overflow, as DeepSpeed's own
    optimizers do for ZeRO 1-3 (no LR-schedule step, `was_step_applied()` False)."""

    def __init__(self, max_grad_norm: float) -> None:
        self.max_grad_norm = max_grad_norm
        self.last_norm: float | None = None

    def __call__(self, optimizer: torch.optim.Optimizer, *_: Any) -> None:
        params = [p for group in optimizer.param_groups for p in group["params"]]
        max_norm = self.max_grad_norm if self.max_grad_norm > 0 else float("inf")
        norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
        self.last_norm = float(norm)
        finite = bool(torch.isfinite(norm))
        if not finite:
            # No gradient, no update: AdamW skips parameters whose grad is None.
            for param in params:
                param.grad = None
        # DeepSpeed reads `overflow` after the step (this client optimizer has no check).
        optimizer.overflow = not finite  # type: ignore[attr-defined]


def build_engine(model_path: str, settings: EngineSettings) -> tuple[Any, Stage0Clip | None]:
    """The policy's DeepSpeed engine (AdamW, linear warm-up then a constant learning rate), and
    the stage-0 clip hook where DeepSpeed does not clip (None elsewhere)."""
    import deepspeed

    model = load_scorer(model_path, settings)
    optimizer = torch.optim.AdamW(
        [p for p in model.parameters() if p.requires_grad],
        lr=settings.learning_rate,
        betas=settings.adam_betas,
        eps=settings.adam_eps,
        weight_decay=settings.weight_decay,
    )
    clip = None
    if settings.stage0_fp32:
        clip = Stage0Clip(settings.max_grad_norm)
        optimizer.register_step_pre_hook(clip)
    warmup = settings.lr_warmup_steps

    def schedule(opt: torch.optim.Optimizer) -> torch.optim.lr_scheduler.LRScheduler:
        # Linear warm-up over `warmup` steps, then constant. Step s uses factor (s+1)/warmup.
        return torch.optim.lr_scheduler.LambdaLR(
            opt, lambda s: min(1.0, (s + 1) / warmup) if warmup > 0 else 1.0
        )

    engine, _, _, _ = deepspeed.initialize(
        model=model,
        optimizer=optimizer,
        lr_scheduler=schedule,
        config=settings.deepspeed_config(),
        dist_init_required=False,
    )
    engine.eval()
    if settings.activation_checkpointing:
        # After engine.eval(), which would clear the layers' training flag again.
        enable_activation_checkpointing(engine.module.hf_model)
    return engine, clip


def build_reference(path: str, settings: EngineSettings, device: torch.device) -> Any:
    """The frozen reference model: a plain `TokenScorer` on `device`, or under ZeRO-3 a frozen
    engine (no optimizer) partitioned like the policy."""
    import deepspeed

    model = load_scorer(path, settings)
    for p in model.parameters():
        p.requires_grad_(False)
    if settings.zero_stage != 3:
        return model.to(device=device)
    config = {k: v for k, v in settings.deepspeed_config().items() if k != "gradient_clipping"}
    engine, _, _, _ = deepspeed.initialize(model=model, config=config, dist_init_required=False)
    engine.eval()
    return engine
