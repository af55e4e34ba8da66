"""A learner rank's frozen reference model π_ref: what the terms that need it read
(`TermNeeds.reference`: the KL anchor, DPH-RL's rehearsal term), ProRL's reset of it to the
current policy, and its weights in the rank's checkpoint once that reset has moved them."""

from __future__ import annotations

from typing import Any

import torch

from adarl.learner.checkpoint import load_reference_state, save_reference_state


class ReferenceModel:
    """The reference of one rank: a `TokenScorer`, or under ZeRO-3 a frozen DeepSpeed engine
    around one (adarl/learner/engine.py, `build_reference`)."""

    def __init__(self, model: Any, *, rank: int, zero_stage: int) -> None:
        self.model = model  # what a forward pass runs (a scorer, or its engine)
        self._rank = rank
        self._partitioned = zero_stage == 3
        self.was_reset = False  # it holds other weights than it loaded

    @property
    def module(self) -> torch.nn.Module:
        """The reference's `TokenScorer` (inside its frozen engine under ZeRO-3)."""
        return getattr(self.model, "module", self.model)

    @torch.no_grad()
    def reset_to(self, policy: torch.nn.Module) -> None:
        """ProRL's reference reset (Liu et al. 2025, arXiv 2505.24864): the reference becomes a
        copy of `policy` (the policy's `TokenScorer`), so a KL term stops pulling the policy back
        towards where training started and pulls it towards where it is now. Collective under
        ZeRO-3."""
        source = dict(policy.named_parameters())
        targets = dict(self.module.named_parameters())
        if targets.keys() != source.keys():
            raise RuntimeError("the KL reference and the policy have different parameters")
        if self._partitioned:
            import deepspeed

            # Every rank gathers both; rank 0's copy is partitioned back into the reference.
            with (
                deepspeed.zero.GatheredParameters(list(source.values()), modifier_rank=None),
                deepspeed.zero.GatheredParameters(list(targets.values()), modifier_rank=0),
            ):
                if self._rank == 0:
                    for name, target in targets.items():
                        target.copy_(source[name])
        else:
            for name, target in targets.items():
                target.copy_(source[name])
        self.was_reset = True

    def save(self, directory: str, *, tag: str) -> None:
        """Its weights beside the engine's state of `tag`, once a reset has moved them (a
        reference never reset is the model it loads, and is not saved)."""
        if self.was_reset:
            save_reference_state(
                self.module, directory, tag=tag, rank=self._rank, partitioned=self._partitioned
            )

    def load(self, directory: str, *, tag: str) -> None:
        """What `save` wrote for `tag`, if anything."""
        self.was_reset = load_reference_state(
            self.module, directory, tag=tag, partitioned=self._partitioned
        )
