"""`PromptSource`: a fixed list of examples served in a seeded, per-epoch shuffled order.

Every prompt source (jsonl, parquet, HF `datasets`, the built-in arithmetic task) is this one class
over a different list of `TaskExample`s, so that shuffling and the resumable cursor exist once.

Order: epoch `e` visits the examples in `permutation(seed, e)` (the identity when `shuffle` is
off); `next_batch(n)` continues from the cursor `(epoch, position)` and crosses epoch boundaries,
so a batch may end one epoch and start the next. The order is a pure function of
`(seed, epoch)`: a source restored with `load_state_dict` continues with exactly the examples an
uninterrupted source would have produced.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from adarl.types import TaskExample


class PromptSource:
    def __init__(
        self,
        *,
        examples: Sequence[TaskExample],
        seed: int,
        shuffle: bool = True,
        name: str = "prompts",
        rows_skipped: Mapping[str, int] | None = None,
    ) -> None:
        """`rows_skipped`: bad rows dropped while loading, per problem (reported in metrics)."""
        if not examples:
            raise ValueError(f"prompt source {name!r} has no examples")
        seen: set[str] = set()
        for example in examples:
            if example.prompt_id in seen:
                raise ValueError(
                    f"prompt source {name!r}: duplicate prompt_id {example.prompt_id!r}; "
                    "prompt ids key per-prompt statistics and must be unique"
                )
            seen.add(example.prompt_id)
        self._examples = tuple(examples)
        self._seed = seed
        self._shuffle = shuffle
        self._name = name
        self._rows_skipped = dict(rows_skipped or {})
        self._epoch = 0
        self._position = 0
        self._order_epoch = -1
        self._order = np.arange(0)
        # Swaps (position, later position) applied to this epoch's order so that a batch that
        # straddles an epoch boundary never holds one prompt twice; saved with the cursor.
        self._swaps: list[tuple[int, int]] = []
        # Identifies the example list in checkpoints, so that resuming on other data fails loudly.
        digest = hashlib.sha256()
        for example in self._examples:
            digest.update(example.prompt_id.encode())
            digest.update(b"\0")
        self._fingerprint = digest.hexdigest()[:16]

    @property
    def name(self) -> str:
        return self._name

    @property
    def examples(self) -> tuple[TaskExample, ...]:
        """The examples in load order (not the shuffled order)."""
        return self._examples

    @property
    def epoch(self) -> int:
        return self._epoch

    @property
    def position(self) -> int:
        """Examples of the current epoch already served."""
        return self._position

    def __len__(self) -> int:
        return len(self._examples)

    def _epoch_order(self, epoch: int) -> np.ndarray:
        if epoch != self._order_epoch:
            n = len(self._examples)
            if self._shuffle:
                self._order = np.random.default_rng([self._seed, epoch]).permutation(n)
            else:
                self._order = np.arange(n)
            self._order_epoch = epoch
            for a, b in self._swaps:
                self._order[[a, b]] = self._order[[b, a]]
        return self._order

    def next_batch(self, num_examples: int) -> list[TaskExample]:
        """The next `num_examples` examples; crosses (and reshuffles at) epoch boundaries.

        A batch holds each example at most once (unless it asks for more than the dataset has):
        when the new epoch's order would repeat an example already in the batch, that example
        is swapped with the next one that is not, so it is still seen exactly once per epoch.
        """
        if num_examples < 0:
            raise ValueError(f"next_batch: num_examples must be >= 0, got {num_examples}")
        distinct = num_examples <= len(self._examples)
        batch: list[TaskExample] = []
        in_batch: set[int] = set()
        while len(batch) < num_examples:
            order = self._epoch_order(self._epoch)
            if distinct and int(order[self._position]) in in_batch:
                later = next(
                    k
                    for k in range(self._position + 1, len(order))
                    if int(order[k]) not in in_batch
                )
                order[[self._position, later]] = order[[later, self._position]]
                self._swaps.append((self._position, later))
            index = int(order[self._position])
            batch.append(self._examples[index])
            in_batch.add(index)
            self._position += 1
            if self._position == len(order):
                self._epoch += 1
                self._position = 0
                self._swaps = []
        return batch

    def state_dict(self) -> dict[str, Any]:
        return {
            "epoch": self._epoch,
            "position": self._position,
            "swaps": [list(pair) for pair in self._swaps],
            "seed": self._seed,
            "shuffle": self._shuffle,
            "num_examples": len(self._examples),
            "fingerprint": self._fingerprint,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        expected = {
            "seed": self._seed,
            "shuffle": self._shuffle,
            "num_examples": len(self._examples),
            "fingerprint": self._fingerprint,
        }
        for key, value in expected.items():
            if state[key] != value:
                raise ValueError(
                    f"prompt source {self._name!r}: checkpoint has {key}={state[key]!r} but this "
                    f"source has {key}={value!r}; resume with the data and seed the checkpoint "
                    "was written with"
                )
        epoch, position = int(state["epoch"]), int(state["position"])
        if epoch < 0 or not 0 <= position < len(self._examples):
            raise ValueError(
                f"prompt source {self._name!r}: invalid cursor epoch={epoch} position={position} "
                f"for {len(self._examples)} examples"
            )
        self._epoch, self._position = epoch, position
        self._swaps = [(int(a), int(b)) for a, b in state.get("swaps", [])]
        self._order_epoch = -1  # rebuild this epoch's order with its swaps

    def metrics(self) -> dict[str, float]:
        metrics = {
            "sampling/data_epoch": float(self._epoch),
            "sampling/data_epoch_progress": self._position / len(self._examples),
            "sampling/data_num_examples": float(len(self._examples)),
            "sampling/data_rows_skipped": float(sum(self._rows_skipped.values())),
        }
        for problem, count in sorted(self._rows_skipped.items()):
            metrics[f"sampling/data_rows_skipped_{problem}"] = float(count)
        return metrics
