"""One root seed seeds everything: each component's seed is derived from it unless set.

`AdarlConfig.seed` is the run's seed. A component seed left at None (`task.seed`,
`allocator.seed`, `rollout.seed`, `learner.seed`, `eval.seed`, `hints.seed`) becomes
`component_seed(root, name)` when the root config is built, and the resolved config saved in the
run directory records the derived values. A seed set explicitly is kept. What the root seed does
not touch, on purpose: the task's data (`task.arithmetic.seed`, `test_seed`, `split_seed`) and the
built-in base model (`model.tiny.init_seed`, `sft_seed`), so runs of several seeds share the same
prompts and the same base policy and differ in prompt order, sampling and learner randomness.
"""

from __future__ import annotations

import hashlib

# Component seeds the root seed derives, by config path.
DERIVED_SEEDS: tuple[str, ...] = (
    "task.seed",
    "allocator.seed",
    "rollout.seed",
    "learner.seed",
    "eval.seed",
    "hints.seed",
)


def component_seed(root: int, component: str) -> int:
    """A stable 31-bit seed for `component` from the root seed (fits every engine's seed type)."""
    digest = hashlib.blake2b(f"adarl/{root}/{component}".encode(), digest_size=4).digest()
    return int.from_bytes(digest, "little") >> 1


def seed_or_default(seed: int | None) -> int:
    """A component config used on its own (tests, benchmarks) with no root to derive from: 0."""
    return 0 if seed is None else seed
