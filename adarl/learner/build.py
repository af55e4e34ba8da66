"""Config → components: `build_learner_group` translates `LearnerConfig` into `LearnerGroup`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from adarl.config.faults import FaultsConfig
from adarl.config.seeds import seed_or_default
from adarl.learner.group import LearnerGroup
from adarl.learner.loss_terms import build_loss_terms

if TYPE_CHECKING:
    from adarl.algo.loss import LossTerm
    from adarl.config.learner import LearnerConfig


def build_learner_group(
    config: LearnerConfig,
    *,
    model_path: str,
    temperature: float,
    num_learners: int = 1,
    in_process: bool = False,
    cpus_per_learner: float = 1.0,
    gpus_per_learner: float = 0.0,
    faults: FaultsConfig | None = None,
    scheduling: Sequence[Any] | None = None,
    terms: Sequence[LossTerm] | None = None,
) -> LearnerGroup:
    """Start `num_learners` learners on the policy at `model_path` (an HF model directory).

    `temperature`: the training rollouts' sampling temperature (`rollout.temperature`); the
    learners score softmax(logits / temperature), the distribution the engines sampled from.
    `faults`: the call time limit and the non-finite streak (defaults: `FaultsConfig()`);
    `scheduling`: the resource plan's placement of each rank. `terms`: the loss terms
    (`build_loss_terms`, with the run's `allocator.rehearsal`); None = those `config` turns on.
    """
    config.validate()
    faults = faults or FaultsConfig()
    faults.validate()
    return LearnerGroup(
        num_learners=num_learners,
        in_process=in_process,
        cpus_per_learner=cpus_per_learner,
        gpus_per_learner=gpus_per_learner,
        scheduling=scheduling,
        call_timeout_s=faults.learner_call_timeout_s,
        max_nonfinite_streak=faults.max_nonfinite_streak,
        mini_batches_per_step=config.mini_batches_per_step,
        epochs_per_step=config.epochs_per_step,
        reference_reset_every_steps=config.reference_reset_every_steps,
        model_path=model_path,
        zero_stage=config.zero_stage,
        precision=config.precision,
        learning_rate=config.learning_rate,
        adam_betas=(config.adam_beta1, config.adam_beta2),
        adam_eps=config.adam_eps,
        weight_decay=config.weight_decay,
        lr_warmup_steps=config.lr_warmup_steps,
        max_grad_norm=config.max_grad_norm,
        max_tokens_per_micro_batch=config.max_tokens_per_micro_batch,
        logprob_chunk_tokens=config.logprob_chunk_tokens,
        activation_checkpointing=config.activation_checkpointing,
        temperature=temperature,
        loss=config.loss,
        reference_model_path=config.reference_model,
        seed=seed_or_default(config.seed),
        device="cuda" if gpus_per_learner > 0 else "cpu",
        terms=build_loss_terms(config) if terms is None else tuple(terms),
    )
