"""`RehearsalStore`: DPH-RL's D_pef from the run's own first pools, and the rows it rehearses.

DPH-RL (arXiv 2509.07430; seamoke/DPH-RL) samples 8 responses per training prompt from the base
model π₀ before training; prompts with 8/8 correct form D_pef, the rest D_exp. RL trains on
D_exp only, and on D_pef one stored correct π₀ response y per prompt adds η·Agg_t[k3(log π₀ -
log π_θ)] to the loss, an estimate of the forward KL(π₀ ‖ π_θ): the loss term `Rehearsal`
(adarl/algo/loss_terms.py), which trains these rows alone.

adarl draws no extra rollouts for it (every rollout an arm draws counts): the store is fed from
the pools the run samples anyway. A prompt whose **first** pool of the run holds at least
`min_samples` samples, all correct (reward > the positive threshold), joins D_pef, and the first
correct sample of that pool in draw order is stored (its prompt and response tokens), so the
store is a deterministic function of the run's draws. Then:

* a D_pef prompt drawn again is not sampled for RL (`holds`; the allocator leaves it out of the
  step before any rollout, counted as `sampling/rehearsal_skipped_prompts`);
* each step trains up to `rows_per_step` stored samples as rehearsal rows (`rows`: `Group`s
  `trained_by` the rehearsal term, advantage 0), cycling through the store in insertion order.

That is all of DPH-RL: this store, the loss term, and its registry entry (adarl/learner/
loss_terms.py, which builds the term when `allocator.rehearsal.enabled`); the batch, the
mini-batch cut, the loss and the learner handle its rows as any term's own rows.

The stored sample was drawn by the policy of its step, not exactly by π₀ (early in a run the two
are close: a prompt's first pool comes at its first visit); π₀'s log-probs come from the
learner's frozen reference model, the base unless `learner.reference_model` says otherwise, so
the term is exactly η·k3 against the reference on those tokens. The store's whole state is in
`state_dict` (exact resume).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from adarl.allocator.samplers.base import is_positive
from adarl.types import Group, ScoredRollout, TaskExample

# The loss term that trains the stored rows (adarl/algo/loss_terms.py `Rehearsal`, of this name).
REHEARSAL_TERM = "rehearsal"


class RehearsalStore:
    """D_pef and its stored samples (see the module docstring). Plain state: picklable."""

    def __init__(self, *, min_samples: int, rows_per_step: int, positive_threshold: float) -> None:
        if min_samples < 1 or rows_per_step < 1:
            raise ValueError(
                f"rehearsal: min_samples ({min_samples}) and rows_per_step ({rows_per_step}) "
                "must be >= 1"
            )
        self.min_samples = min_samples
        self.rows_per_step = rows_per_step
        self.positive_threshold = positive_threshold
        self._seen: set[str] = set()  # prompts whose first pool was observed
        self._samples: dict[str, ScoredRollout] = {}  # D_pef, in the order prompts joined
        self._cursor = 0  # the next stored sample to rehearse (an index into `_samples`)

    def holds(self, prompt_id: str) -> bool:
        """Whether the prompt is in D_pef (trained by rehearsal, not sampled for RL)."""
        return prompt_id in self._samples

    def leave_out(
        self, examples: Sequence[TaskExample], left_out: list[str]
    ) -> tuple[list[TaskExample], bool]:
        """`examples` less the prompts the store holds, each appended once to the step's
        `left_out`; and whether one of them was new to the step (a refill of only those is not
        the prompt source running dry)."""
        kept, new = [], False
        for example in examples:
            pid = example.prompt_id
            if not self.holds(pid):
                kept.append(example)
            elif pid not in left_out:
                left_out.append(pid)
                new = True
        return kept, new

    def observe_pools(self, pools: Mapping[str, Sequence[ScoredRollout]]) -> RehearsalStore:
        """A finished step's pools by prompt, in the step's prompt order (unhinted prompts
        only): each prompt's first non-empty pool of the run decides whether it joins D_pef.
        Returns the store (then `rows`)."""
        for prompt_id, pool in pools.items():
            if not pool or prompt_id in self._seen:
                continue
            self._seen.add(prompt_id)
            correct = [s for s in pool if is_positive(s.reward, self.positive_threshold)]
            if len(pool) >= self.min_samples and len(correct) == len(pool):
                self._samples[prompt_id] = correct[0]
        return self

    def rows(self) -> list[Group]:
        """This step's rehearsal rows: the next `rows_per_step` stored samples (each at most
        once), cycling through the store in insertion order."""
        stored = list(self._samples.values())
        take = min(self.rows_per_step, len(stored))
        chosen = [stored[(self._cursor + i) % len(stored)] for i in range(take)]
        self._cursor = (self._cursor + take) % len(stored) if stored else 0
        return [
            Group(
                prompt_id=scored.rollout.prompt_id,
                rollouts=(scored,),
                advantages=(0.0,),
                pool_size=0,  # no sample drawn for it this step
                pool_positives=0,
                resolved=True,
                trained_by=REHEARSAL_TERM,
            )
            for scored in chosen
        ]

    def metrics(self, *, skipped: Sequence[str]) -> dict[str, float]:
        """The store's size, and the step's prompts left out of RL (`skipped`)."""
        return {
            "sampling/rehearsal_store_size": float(len(self._samples)),
            "sampling/rehearsal_skipped_prompts": float(len(skipped)),
        }

    def state_dict(self) -> dict[str, Any]:
        return {
            "seen": sorted(self._seen),
            "samples": list(self._samples.items()),
            "cursor": self._cursor,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self._seen = set(state["seen"])
        self._samples = dict(state["samples"])
        self._cursor = int(state["cursor"])
