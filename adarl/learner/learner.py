"""One data-parallel learner rank: its training steps on a DeepSpeed engine over an HF causal LM,
with the generic loss and the loss terms it was given.

A `Learner` is a plain class. `LearnerGroup` (adarl/learner/group.py) runs N of them as Ray actors
(or one in-process), cuts each TrainBatch across them and sums what they report.

Life cycle: `Learner(...)` only records settings; `setup(master_addr=..., master_port=...)` joins
the process group (adarl/learner/process_group.py) and builds what the rank trains with (its
engine and, when a loss term needs it, the frozen reference: adarl/learner/engine.py). What else
a rank does lives beside this module, each concern in its own: its forward passes and the
statistics taken without training (adarl/learner/scoring.py), its reference model and ProRL's
reset of it (adarl/learner/reference.py), its weights (listed, gathered, broadcast to the engines,
exported as an HF model: adarl/learner/weights.py) and its checkpoint (adarl/learner/
checkpoint.py). The `Learner` methods of those names are the actor's interface: the group and
weight sync call them by name on every rank, and they hand the work to those modules.

A training step accumulates gradients over as many micro-batches as its token budget needs and
calls `engine.step()` once per mini-batch. Every micro-batch's loss is its additive share of the
whole-batch loss (adarl.algo.loss normalises by whole-batch counts) times the world size,
undoing DeepSpeed's averaging over ranks, so the accumulated gradient is exactly the gradient of
the one big batch.

A step whose loss or gradient norm is NaN or infinite changes nothing: a micro-batch with a
non-finite loss back-propagates NaN, and the optimizer then discards the whole update on every
rank (adarl/learner/engine.py). The rank reports `skipped_nonfinite`.

The policy is π_T = softmax(logits / T) at the rollouts' temperature T (`temperature`): policy
log-probs, entropy and the reference model's log-probs all use it, so the PPO ratio and the KL
compare the distribution the engines sampled from (adarl/rollout/common.py).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from adarl.algo.loss import LossInputs, LossTerm, TermNeeds, TermRows, policy_loss
from adarl.config.learner import LearnerConfig, PolicyLossConfig
from adarl.learner.batching import MiniBatchShard, RowCounts
from adarl.learner.checkpoint import load_engine_state, save_engine_state
from adarl.learner.engine import EngineSettings, Stage0Clip, build_engine, build_reference
from adarl.learner.logprobs import TokenScorer
from adarl.learner.loss_terms import build_loss_terms
from adarl.learner.process_group import (
    free_port,
    join_process_group,
    leave_process_group,
    use_deepspeed_accelerator,
)
from adarl.learner.reference import ReferenceModel
from adarl.learner.scoring import (
    Forward,
    forward,
    micro_batches,
    sample_gradient_norms,
    score_positions,
)
from adarl.learner.weights import PolicyWeights, WeightInfo
from adarl.types import TrainBatch

if TYPE_CHECKING:
    from adarl.weight_transport import BucketLayout

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
        terms: Sequence[LossTerm] | None = None,
        reference_model_path: str | None = None,
        seed: int = 0,
        device: str = "auto",
        collective_timeout_s: float = 600.0,
        temperature: float = 1.0,
        logprob_chunk_tokens: int = 1024,
        activation_checkpointing: bool = False,
    ) -> None:
        """`loss`: the clipped term's settings (`PolicyLossConfig`: aggregation, clip range,
        ratio reference, TIS cap). `terms`: the loss terms, built once from config
        (adarl/learner/loss_terms.py, `build_loss_terms`); None = those `loss` turns on (every
        term but DPH-RL's rehearsal, which its store in the allocator feeds). The frozen
        reference (`reference_model_path`, default the initial policy) is loaded only when a
        term needs it."""
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is outside world_size {world_size}")
        # The config's record, defaults and checks: the loss settings are written once.
        loss = loss or PolicyLossConfig()
        loss.validate()
        self.settings = EngineSettings(
            zero_stage=zero_stage,
            precision=precision,
            learning_rate=learning_rate,
            adam_betas=adam_betas,
            adam_eps=adam_eps,
            weight_decay=weight_decay,
            lr_warmup_steps=lr_warmup_steps,
            max_grad_norm=max_grad_norm,
            temperature=temperature,
            logprob_chunk_tokens=logprob_chunk_tokens,
            activation_checkpointing=activation_checkpointing,
        )
        self.model_path = model_path
        self.rank = rank
        self.world_size = world_size
        self.zero_stage = zero_stage
        self.max_tokens_per_micro_batch = max_tokens_per_micro_batch
        self.loss = loss
        self.terms = tuple(build_loss_terms(LearnerConfig(loss=loss)) if terms is None else terms)
        self.needs = TermNeeds(
            reference=any(t.needs.reference for t in self.terms),
            entropy_grad=any(t.needs.entropy_grad for t in self.terms),
            top_k=max((t.needs.top_k for t in self.terms), default=0),
        )
        self.reference_model_path = reference_model_path or model_path
        self.seed = seed
        self.device_kind = device
        self.collective_timeout_s = collective_timeout_s
        self._engine: Any = None
        self._clip: Stage0Clip | None = None
        self._reference: ReferenceModel | None = None
        self._device = torch.device("cpu")
        self._owns_process_group = False
        self._weights: PolicyWeights | None = None

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
        self._engine, self._clip = build_engine(self.model_path, self.settings)
        self._weights = PolicyWeights(
            self.module, rank=self.rank, zero_stage=self.zero_stage, device=self._device
        )
        if self.needs.reference:
            model = build_reference(self.reference_model_path, self.settings, self._device)
            self._reference = ReferenceModel(model, rank=self.rank, zero_stage=self.zero_stage)

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

    # ----------------------------------------------------------------------------- training

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

    def _micro_batches(
        self, batch: TrainBatch, num_micro_batches: int
    ) -> list[tuple[list[int], TrainBatch] | None]:
        return micro_batches(
            batch, num_micro_batches, max_tokens=self.max_tokens_per_micro_batch, rank=self.rank
        )

    @torch.no_grad()
    def _response_logprobs(self, mini: MiniBatchShard) -> torch.Tensor:  # [B, T] of the shard
        """log π_T of the shard's tokens under the current weights, micro-batch by micro-batch
        (the same number on every rank, for ZeRO-3's collective gathers)."""
        shard = mini.shard
        out = torch.zeros(shard.input_ids.shape, device=self._device)
        for part in self._micro_batches(shard, mini.num_micro_batches):
            micro = None if part is None else part[1]
            logprobs = forward(self.engine, micro, device=self._device).logprobs
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
                shares = self._accumulate_gradients(micro, mini, proximal_logprobs=old)
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
        mini: MiniBatchShard,
        *,
        proximal_logprobs: torch.Tensor | None = None,
    ) -> dict[str, float]:
        """Forward and backward of one micro-batch of `mini`: its share of the mini-batch's loss
        gradient is added to the engine's gradients; returns its additive metric shares. `None`
        is an empty pass (zero gradient, no metrics) that keeps ZeRO's collectives in step.
        `proximal_logprobs`: π_old scored earlier; None with ratio_reference "learner" means
        the current weights (the first and only optimizer step of a training step)."""
        engine = self.engine
        scores = forward(
            engine,
            micro,
            device=self._device,
            entropy_grad=self.needs.entropy_grad,
            top_k=self.needs.top_k,
        )
        if micro is None:
            if self._reference is not None and self.zero_stage == 3:
                # The partitioned reference gathers its parameters collectively in every
                # forward: a rank without a micro-batch runs the same empty pass through it as
                # the ranks that score theirs, or they would wait for it.
                with torch.no_grad():
                    forward(self._reference.model, None, device=self._device)
            engine.backward(scores.logprobs.sum() * 0.0, scale_wrt_gas=False)
            return {}
        settings = self.loss
        out = policy_loss(
            self._loss_inputs(micro, mini, scores, proximal_logprobs),
            aggregation=settings.aggregation,  # type: ignore[arg-type]  # validated in __init__
            clip_low=settings.clip_low,
            clip_high=settings.clip_high,
            dual_clip=settings.dual_clip,
            tis_cap=settings.tis_cap,
            terms=self.terms,
        )
        # DeepSpeed averages gradients over ranks; the shares must be summed instead.
        loss = out.loss * self.world_size
        if not bool(torch.isfinite(out.loss)):
            # Make every gradient of this pass NaN (a NaN term that is constant in the
            # weights would otherwise leave finite gradients), so that the optimizer's
            # check discards the whole update on every rank.
            loss = scores.logprobs.sum() * float("nan")
        engine.backward(loss, scale_wrt_gas=False)
        return out.metrics

    def _loss_inputs(
        self,
        micro: TrainBatch,
        mini: MiniBatchShard,
        scores: Forward,
        proximal_logprobs: torch.Tensor | None,
    ) -> LossInputs:
        """The micro-batch as the loss reads it: its tensors on this rank's device, the
        mini-batch's counts, π_ref's log-probs where a term needs them, π_old per
        ratio_reference, and the rows each term trains alone."""
        device, logprobs = self._device, scores.logprobs
        owners = {term.name for term in self.terms if term.needs.owns_rows}
        term_rows = {}
        for name, rows in micro.term_rows.items():
            if name not in owners and bool(rows.any()):
                raise RuntimeError(
                    f"the batch holds rows trained by the loss term {name!r} but this learner "
                    f"has no such term (its terms: {[t.name for t in self.terms]}): build the "
                    "learners with the run's terms (build_loss_terms(config.learner, rehearsal="
                    "config.allocator.rehearsal), as the session does)"
                )
            counts = mini.term_rows.get(name, RowCounts(0, 0))
            term_rows[name] = TermRows(
                rows.to(device), float(counts.tokens), float(counts.sequences)
            )
        ref_logprobs = None
        if self._reference is not None:
            with torch.no_grad():
                ref_logprobs = forward(self._reference.model, micro, device=device).logprobs
        if self.loss.ratio_reference != "learner":
            proximal_logprobs = None
        elif proximal_logprobs is None:
            proximal_logprobs = logprobs.detach()
        weights = micro.sequence_weights
        return LossInputs(
            logprobs=logprobs,
            behaviour_logprobs=micro.behaviour_logprobs.to(device),
            advantages=micro.advantages.to(device),
            response_mask=micro.response_mask.to(device),
            global_num_tokens=mini.global_num_tokens,
            global_num_sequences=mini.global_num_sequences,
            sequence_weights=None if weights is None else weights.to(device),
            proximal_logprobs=proximal_logprobs,
            ref_logprobs=ref_logprobs,
            entropy=scores.entropy,
            top_logprobs=scores.top_logprobs,
            is_top1=scores.is_top1,
            term_rows=term_rows,
        )

    def _last_grad_norm(self) -> float:
        if self._clip is not None:
            assert self._clip.last_norm is not None
            return self._clip.last_norm
        norm = self.engine.get_global_grad_norm()
        if norm is None:
            raise RuntimeError("DeepSpeed reported no gradient norm after the step")
        return float(norm)

    # ------------------------------------------------------------------- the actor's interface
    # What leaves the rank, called by name on every rank by the group and weight sync; the work
    # is done in adarl/learner/scoring.py, reference.py, weights.py and checkpoint.py.

    def sample_gradient_norms(
        self, batch: TrainBatch, *, num_micro_batches: int
    ) -> torch.Tensor:  # [B] float32
        """‖∇_E NLL_b‖ per row, weights unchanged (`scoring.sample_gradient_norms`)."""
        parts = self._micro_batches(batch, num_micro_batches)
        return sample_gradient_norms(
            self.scorer, parts, num_rows=batch.num_sequences, device=self._device
        )

    def score(self, batch: TrainBatch) -> torch.Tensor:  # [B, T] float32
        """log π_T at every real position of `batch` (0 at position 0 and on padding), for tests
        and diagnostics. A collective under ZeRO-3: call on all ranks with the same batch."""
        return score_positions(
            self.scorer, batch, max_tokens=self.max_tokens_per_micro_batch, device=self._device
        )

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
        if self._reference is not None:
            self._reference.save(directory, tag=tag)

    def load_checkpoint(self, directory: str, *, tag: str) -> dict[str, Any]:
        """Restore what `save_checkpoint` wrote; returns its `client_state`."""
        state = load_engine_state(self.engine, directory, tag=tag)
        if self._reference is not None:
            self._reference.load(directory, tag=tag)
        return state

    def reset_reference(self) -> None:
        """ProRL's reference reset (`ReferenceModel.reset_to`): the KL anchor moves to the
        current policy. (ProRL also resets the optimizer's moments; adarl keeps them.)
        Collective under ZeRO-3."""
        if self._reference is None:
            raise RuntimeError(
                "reset_reference needs a KL reference model: set learner.loss.kl_coef > 0"
            )
        self._reference.reset_to(self.module)
