"""Structured config of the learners (DeepSpeed ZeRO), the policy loss and weight sync.

Placement (how many learner actors, CPUs/GPUs each) lives in the cluster config; the model
(path, tokenizer) in the model config. `build_learner_group` (adarl.learner) joins them. The
learner's policy is softmax(logits / T) at the rollouts' `rollout.temperature` (the builder's
`temperature` argument), so log-probs, entropy and the KL reference use the sampling distribution.

`LearnerConfig`
    zero_stage: DeepSpeed ZeRO stage 0-3 (0: plain data parallel; 1: optimizer state sharded;
        2: + gradients; 3: + parameters).
    precision: "fp32", or "bf16" (bf16 weights/activations, fp32 master weights and optimizer;
        the model is loaded in bf16). With `model=hf` on GPUs use bf16 (and `rollout.dtype=
        bfloat16` for the engines); fp32 on CPU.
    learning_rate: peak AdamW learning rate (torch.optim.AdamW, no compiled optimizer).
    adam_beta1, adam_beta2, adam_eps, weight_decay: the other AdamW settings.
    lr_warmup_steps: linear warm-up from 0 to `learning_rate` over this many optimizer steps,
        then constant.
    max_grad_norm: clip the global gradient norm to this; 0 disables clipping (the norm is
        logged either way as train/grad_norm).
    max_tokens_per_micro_batch: token budget of one forward/backward (padded sequence length ×
        sequences). An optimizer step accumulates gradients over as many micro-batches as its
        (mini-)batch needs; the result equals one big batch. A sequence longer than the budget
        gets a micro-batch of its own.
    mini_batches_per_step: optimizer steps per training step: the step's batch is cut into this
        many mini-batches of whole groups (a group is never split), in batch order, of equal
        numbers of groups, each normalised by its own counts (verl's ppo_mini_batch_size, as a
        count; the Reinforce-Ada recipe's 4 mini-batches of 128 of its 512 prompts). 1 = one
        optimizer step on the whole batch. docs/algorithms.md "Mini-batch updates" says what the
        first and the later mini-batches optimise.
    epochs_per_step: passes over the step's mini-batches (verl's ppo_epochs, TRL's
        num_iterations); each pass takes one optimizer step per mini-batch.
    logprob_chunk_tokens: scored tokens per chunk of the output head. Log-probs and entropy are
        computed only at response positions, this many at a time under activation
        checkpointing, so the logits never exist as a [B, T, V] tensor: the head's memory grows
        by about 2 × logprob_chunk_tokens × vocabulary × 4 bytes (measured, docs/benchmarks.md
        "Learner memory"; 1024 × 152k ≈ 1.2 GB: lower it for large vocabularies on small GPUs).
        Results do not depend on it.
    activation_checkpointing: recompute each transformer layer's activations in backward
        instead of keeping them (HF gradient checkpointing, non-reentrant): memory per layer
        falls from all its activations to its input, at about one extra forward of compute.
    seed: seed of each learner's torch RNG; None (default) = derived from the root `seed`.
    reference_model: a model directory for the frozen KL reference; None = the initial policy.
        Loaded only when `loss.kl_coef` ≠ 0 or with rehearsal (`allocator.rehearsal.enabled`,
        whose term anchors to it).
    reference_reset_every_steps: ProRL's reference reset (arXiv 2505.24864): every this many
        training steps the KL reference becomes a copy of the current policy (the optimizer's
        moments are kept; ProRL also resets them). Needs `loss.kl_coef` > 0, and no rehearsal
        (whose anchor is the base). None = never: the KL anchors the policy to where training
        started. Checkpoints hold the moved reference.
    loss: the policy loss (`PolicyLossConfig`).
    weight_sync: how new weights reach the rollout engines (`WeightSyncConfig`).

`PolicyLossConfig` (equations: adarl/algo/loss.py; `Learner` takes this record itself, so these
defaults are the only ones)
    aggregation: "token_mean", "sequence_mean" or "sequence_sum"; normalised by whole-batch
        counts, so the loss does not depend on how the batch is split across ranks/micro-batches.
    clip_low, clip_high: PPO ratio clip range [1 - clip_low, 1 + clip_high].
    dual_clip: bound -A·c on the loss of negative-advantage tokens (c > 1, e.g. 3); None = off.
    ratio_reference: the policy the PPO ratio is taken against: "behaviour" (the engine's
        log-probs: staleness and engine/learner mismatch are both inside the clipped ratio) or
        "learner" (the learner's own log-probs under the weights the training step starts
        from, scored before its first update when it takes several; with one optimizer step
        the ratio is then 1 and only `tis_cap` corrects the mismatch).
    tis_cap: truncated importance-sampling cap C on π_learner/π_engine (needs ratio_reference
        "learner"); None = no correction.
    kl_coef: weight of the KL(π_θ ‖ π_ref) loss term; 0 = no reference model is loaded.
    kl_estimator: "k1", "k2" or "k3".
    entropy_coef: weight of the entropy bonus (subtracted from the loss); 0 = logged only.
    simko_alpha: SimKO (arXiv 2510.14807): on the high-entropy tokens of responses with a
        positive advantage, this share α of the ratio's gradient goes to the top-K candidate
        tokens instead of the sampled one (0 = off; the paper's 0.01). Its other settings:
        simko_top_k (K, 3), simko_entropy_quantile (a token is high-entropy above this quantile
        of its response's token entropies, 0.8), simko_negative_scale (the advantage of a
        negative response's high-entropy token is multiplied by this where the token is the
        policy's most likely one, 1.1). adarl/algo/loss.py `simko_ratio`; docs/algorithms.md §14.
    rehearsal_coef: DPH-RL's η (arXiv 2509.07430; the paper's 0.01-0.05): weight of the
        forward-KL term k3(log π_ref - log π_θ) on the rehearsal rows, normalised over their
        own tokens (adarl/algo/loss.py `rehearsal_forward_kl`). Acts only with rehearsal rows
        in the batch: `allocator.rehearsal.enabled` turns rehearsal on.

`WeightSyncConfig`
    method: "object_store" (CPU path: full weights gathered once, shipped in buckets through
        Ray's object store) or "broadcast" (GPU path: a NCCL broadcast group from learner rank 0
        to the engines).
    bucket_size_bytes: upper bound on the size of one bucket of weights (a tensor larger than
        this travels alone).
    broadcast_backend: torch.distributed backend of the broadcast group ("nccl" on GPUs; "gloo"
        works with CPU or CUDA tensors and is what the single-GPU test uses).
    broadcast_timeout_s: timeout of the broadcast group's rendezvous and collectives.
"""

from __future__ import annotations

from dataclasses import dataclass, field

ZERO_STAGES = (0, 1, 2, 3)
PRECISIONS = ("fp32", "bf16")
AGGREGATIONS = ("token_mean", "sequence_mean", "sequence_sum")
RATIO_REFERENCES = ("behaviour", "learner")
KL_ESTIMATORS = ("k1", "k2", "k3")
WEIGHT_SYNC_METHODS = ("object_store", "broadcast")


@dataclass
class PolicyLossConfig:
    aggregation: str = "token_mean"
    clip_low: float = 0.2
    clip_high: float = 0.28
    dual_clip: float | None = None
    ratio_reference: str = "behaviour"
    tis_cap: float | None = None
    kl_coef: float = 0.0
    kl_estimator: str = "k3"
    entropy_coef: float = 0.0
    simko_alpha: float = 0.0
    simko_top_k: int = 3
    simko_entropy_quantile: float = 0.8
    simko_negative_scale: float = 1.1
    rehearsal_coef: float = 0.02

    def validate(self) -> None:
        if self.aggregation not in AGGREGATIONS:
            raise ValueError(
                f"learner.loss.aggregation={self.aggregation!r}; use one of {list(AGGREGATIONS)}"
            )
        if not 0.0 <= self.clip_low < 1.0:
            raise ValueError(f"learner.loss.clip_low={self.clip_low} must be in [0, 1)")
        if self.clip_high < 0.0:
            raise ValueError(f"learner.loss.clip_high={self.clip_high} must be >= 0")
        if self.dual_clip is not None and self.dual_clip <= 1.0:
            raise ValueError(
                f"learner.loss.dual_clip={self.dual_clip} must be > 1 (e.g. 3) or null to disable"
            )
        if self.ratio_reference not in RATIO_REFERENCES:
            raise ValueError(
                f"learner.loss.ratio_reference={self.ratio_reference!r}; use one of "
                f"{list(RATIO_REFERENCES)}"
            )
        if self.tis_cap is not None:
            if self.tis_cap <= 0:
                raise ValueError(f"learner.loss.tis_cap={self.tis_cap} must be > 0 (e.g. 2)")
            if self.ratio_reference != "learner":
                raise ValueError(
                    "learner.loss.tis_cap needs learner.loss.ratio_reference=learner: with "
                    "'behaviour' the ratio already includes the engine/learner mismatch"
                )
        if self.kl_coef < 0:
            raise ValueError(f"learner.loss.kl_coef={self.kl_coef} must be >= 0")
        if self.rehearsal_coef < 0:
            raise ValueError(
                f"learner.loss.rehearsal_coef={self.rehearsal_coef} must be >= 0 (DPH-RL's η, "
                "0.01-0.05)"
            )
        if not 0.0 <= self.simko_alpha < 1.0:
            raise ValueError(
                f"learner.loss.simko_alpha={self.simko_alpha} must be in [0, 1) (0 = off; the "
                "paper's 0.01)"
            )
        if self.simko_top_k < 1 or not 0.0 < self.simko_entropy_quantile < 1.0:
            raise ValueError(
                f"learner.loss.simko_top_k={self.simko_top_k} must be >= 1 and "
                f"learner.loss.simko_entropy_quantile={self.simko_entropy_quantile} in (0, 1)"
            )
        if self.simko_negative_scale <= 0:
            raise ValueError(
                f"learner.loss.simko_negative_scale={self.simko_negative_scale} must be > 0"
            )
        if self.kl_estimator not in KL_ESTIMATORS:
            raise ValueError(
                f"learner.loss.kl_estimator={self.kl_estimator!r}; use one of {list(KL_ESTIMATORS)}"
            )


@dataclass
class WeightSyncConfig:
    method: str = "object_store"
    bucket_size_bytes: int = 64 * 1024 * 1024
    broadcast_backend: str = "nccl"
    broadcast_timeout_s: float = 600.0

    def validate(self) -> None:
        if self.method not in WEIGHT_SYNC_METHODS:
            raise ValueError(
                f"learner.weight_sync.method={self.method!r}; use one of "
                f"{list(WEIGHT_SYNC_METHODS)}"
            )
        if self.bucket_size_bytes < 1:
            raise ValueError(
                f"learner.weight_sync.bucket_size_bytes={self.bucket_size_bytes} must be >= 1"
            )
        if self.broadcast_backend not in ("nccl", "gloo"):
            raise ValueError(
                f"learner.weight_sync.broadcast_backend={self.broadcast_backend!r}; use nccl "
                "(GPUs) or gloo"
            )
        if self.broadcast_timeout_s <= 0:
            raise ValueError(
                f"learner.weight_sync.broadcast_timeout_s={self.broadcast_timeout_s} must be > 0"
            )


@dataclass
class LearnerConfig:
    zero_stage: int = 1
    precision: str = "fp32"
    learning_rate: float = 1e-5
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    adam_eps: float = 1e-8
    weight_decay: float = 0.0
    lr_warmup_steps: int = 0
    max_grad_norm: float = 1.0
    max_tokens_per_micro_batch: int = 8192
    mini_batches_per_step: int = 1
    epochs_per_step: int = 1
    logprob_chunk_tokens: int = 1024
    activation_checkpointing: bool = False
    seed: int | None = None
    reference_model: str | None = None
    reference_reset_every_steps: int | None = None
    loss: PolicyLossConfig = field(default_factory=PolicyLossConfig)
    weight_sync: WeightSyncConfig = field(default_factory=WeightSyncConfig)

    def validate(self) -> None:
        if self.zero_stage not in ZERO_STAGES:
            raise ValueError(f"learner.zero_stage={self.zero_stage}; use one of {ZERO_STAGES}")
        if self.precision not in PRECISIONS:
            raise ValueError(f"learner.precision={self.precision!r}; use one of {list(PRECISIONS)}")
        if self.learning_rate <= 0:
            raise ValueError(f"learner.learning_rate={self.learning_rate} must be > 0")
        for key in ("adam_beta1", "adam_beta2"):
            if not 0.0 <= getattr(self, key) < 1.0:
                raise ValueError(f"learner.{key}={getattr(self, key)} must be in [0, 1)")
        if self.adam_eps <= 0:
            raise ValueError(f"learner.adam_eps={self.adam_eps} must be > 0")
        if self.weight_decay < 0:
            raise ValueError(f"learner.weight_decay={self.weight_decay} must be >= 0")
        if self.lr_warmup_steps < 0:
            raise ValueError(f"learner.lr_warmup_steps={self.lr_warmup_steps} must be >= 0")
        if self.max_grad_norm < 0:
            raise ValueError(
                f"learner.max_grad_norm={self.max_grad_norm} must be >= 0 (0 disables clipping)"
            )
        if self.max_tokens_per_micro_batch < 1:
            raise ValueError(
                f"learner.max_tokens_per_micro_batch={self.max_tokens_per_micro_batch} must be "
                ">= 1 (it should hold at least your longest prompt + response)"
            )
        for key in ("mini_batches_per_step", "epochs_per_step"):
            if getattr(self, key) < 1:
                raise ValueError(
                    f"learner.{key}={getattr(self, key)} must be >= 1 (1 = one optimizer step "
                    "per training step)"
                )
        if self.logprob_chunk_tokens < 1:
            raise ValueError(
                f"learner.logprob_chunk_tokens={self.logprob_chunk_tokens} must be >= 1 (e.g. "
                "1024; lower it if the output head runs out of memory)"
            )
        self.loss.validate()
        self.weight_sync.validate()
        every = self.reference_reset_every_steps
        if every is not None and (every < 1 or self.loss.kl_coef <= 0):
            raise ValueError(
                f"learner.reference_reset_every_steps={every} needs a value >= 1 and a KL term "
                f"to reset (learner.loss.kl_coef={self.loss.kl_coef}): set learner.loss.kl_coef "
                "> 0, or learner.reference_reset_every_steps=null"
            )
