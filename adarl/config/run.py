"""Run-level structured config: the step loop, evaluation and cluster placement.

`TrainerConfig`
    total_steps: optimizer steps to run (each step = one allocator step + one learner update).
    max_rollouts: stop after the step at which the run's training rollouts (cumulative, every
        response drawn for training; evaluation excluded) reach this many, even before
        `total_steps`; None = no rollout budget. Compute-matched comparisons
        (`python -m adarl.bench learning`) give every method the same budget this way.
    max_sequence_tokens: likewise, for the training rollouts' prompt + response tokens (what
        the learner reads, so its cost); None = no token budget. The run stops at whichever
        budget it reaches first: `make run`'s rollout budget on the built-in task, its token
        budget on a task whose prompts are ten times longer (conf/experiment/grpo_anchored.yaml).
        Checkpointing and resume are configured under `checkpoint` (adarl/config/checkpoint.py).
    signal_check_steps, min_mixed_group_fraction: a run that cannot learn stops early. After
        `signal_check_steps` training steps (5), if fewer than `min_mixed_group_fraction` (2%) of
        the groups they trained had both a right and a wrong answer, the policy is getting (almost)
        no gradient: the run stops there (final evaluation, checkpoint and model as at any end),
        says why with the numbers (the warm start's held-aside accuracy against the best
        constant answer, the base evaluation, the mixed-group fraction) and what would help,
        and records `stop_reason: "no_learning_signal"` in summary.json. Checked once, at that
        step. min_mixed_group_fraction=0 runs anyway.
    stop_below_prior: a run whose policy starts below the answers' prior stops after its base
        evaluation, before any rollout: when the tiny model's task warm start ran out of budget
        before it was clearly above the best constant answer and the guesser (its record's
        `stopped_by`), or, for any model, when the base evaluation's pass@1 is below the best
        constant answer's. RL from there first learns the prior (measured: count_bits,
        letter_counting and simple_equations end within 2 points of their constant answer).
        The message gives the numbers and what would help; false runs anyway.

`EvalConfig` (held-out split, never with a hint)
    every_steps: evaluate every this many steps (and at the start and the end); 0 = only at the
        start and the end.
    every_rollouts: also evaluate each time the cumulative training rollouts cross a multiple of
        this (evaluation at equal compute across methods); None = off.
    num_prompts: held-out prompts per evaluation (the first N of the fixed test split; 0 = all).
    samples_per_prompt: samples per prompt at `temperature` in the evaluations during training;
        accuracy (pass@1) is their mean, and pass@k is reported for k = 2, 4, … up to it
        (adarl/evaluation).
    final_samples_per_prompt: samples per prompt of the base (step 0) and the final evaluation,
        drawn with the same seeds so that base → final pass@k is paired (64: pass@64, the
        coverage the base model starts with); None = samples_per_prompt.
    temperature: sampling temperature of the sampled evaluation (1.0 = the policy itself).
    greedy: also report greedy (temperature 0) accuracy.
    max_new_tokens: response length limit during evaluation.
    completions_to_log: sampled completions shown in the W&B table per evaluation.
    seed: seeds the evaluation draws (the same draws at every evaluation of a run); None
        (default) = derived from the root `seed` (adarl/config/seeds.py).

`ClusterConfig` (where components run; validated against the cluster before any actor starts)
    address: Ray address of a running cluster ("auto", "ray://HOST:10001"); None starts a local
        cluster in this process.
    num_cpus: CPUs of the local cluster; None = all of this machine's. Ignored with `address`.
    in_process: run every component in the driver process, without Ray (tests, debugging).
    rollout_engines: rollout engine actors; cpus_per_engine / gpus_per_engine their resources.
    learners: data-parallel learner actors; cpus_per_learner / gpus_per_learner their resources.
    cpus_for_allocator: CPUs reserved for the budget-allocator actor (it is light: 0 is fine).
    cpus_for_hint_generator: CPUs reserved for the hint-generator actor, started when hints are on
        (`hints.schedule` not "off"). It writes hint-mode prompts and reads what comes back
        (parsing, leak checks): light, 0 is fine. Its generations run on the rollout engines
        (`hints.source=self`) or on the hint engine below.
    cpus_for_hint_engine, gpus_for_hint_engine: resources of the hint model's own engine actor
        (`hints.source=model`: `hints.model` on an engine built with the `rollout` settings),
        placed by the same plan as the rollout engines and checked against the cluster with
        them. A GPU cluster gives it its own GPU (or a fraction: it shares the card's memory),
        so the hint model never runs on the driver's node. Ignored for other sources.
    allocator_in_driver: run the budget allocator in the driver process instead of as its own
        Ray actor. Every allocator call is then a plain call: no actor round trip (24 calls per
        step of the embedded default at 5.6 ms each, 8.6% of its step time on a loaded 2-core
        machine: docs/benchmarks.md "Overhead"). The actor (default) keeps the allocator's CPU
        and memory apart from the driver's.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class TrainerConfig:
    total_steps: int = 200
    max_rollouts: int | None = None
    max_sequence_tokens: int | None = None
    signal_check_steps: int = 5
    min_mixed_group_fraction: float = 0.02
    stop_below_prior: bool = True

    def validate(self) -> None:
        if self.total_steps < 1:
            raise ValueError(f"trainer.total_steps={self.total_steps} must be >= 1")
        if self.max_rollouts is not None and self.max_rollouts < 1:
            raise ValueError(
                f"trainer.max_rollouts={self.max_rollouts} must be >= 1, or null for no budget"
            )
        if self.signal_check_steps < 1 or not 0.0 <= self.min_mixed_group_fraction < 1.0:
            raise ValueError(
                f"trainer.signal_check_steps={self.signal_check_steps} must be >= 1 and "
                f"trainer.min_mixed_group_fraction={self.min_mixed_group_fraction} in [0, 1) "
                "(0 = run whatever the signal)"
            )
        if self.max_sequence_tokens is not None and self.max_sequence_tokens < 1:
            raise ValueError(
                f"trainer.max_sequence_tokens={self.max_sequence_tokens} must be >= 1, or null "
                "for no token budget"
            )


@dataclass
class EvalConfig:
    every_steps: int = 50
    every_rollouts: int | None = None
    num_prompts: int = 256
    samples_per_prompt: int = 8
    final_samples_per_prompt: int | None = 64
    temperature: float = 1.0
    greedy: bool = True
    max_new_tokens: int = 8
    completions_to_log: int = 8
    seed: int | None = None

    def validate(self) -> None:
        if self.every_steps < 0:
            raise ValueError(f"eval.every_steps={self.every_steps} must be >= 0")
        if self.every_rollouts is not None and self.every_rollouts < 1:
            raise ValueError(
                f"eval.every_rollouts={self.every_rollouts} must be >= 1, or null (off)"
            )
        if self.num_prompts < 0:
            raise ValueError(f"eval.num_prompts={self.num_prompts} must be >= 0 (0 = all)")
        if self.samples_per_prompt < 1:
            raise ValueError(f"eval.samples_per_prompt={self.samples_per_prompt} must be >= 1")
        if self.final_samples_per_prompt is not None and self.final_samples_per_prompt < 1:
            raise ValueError(
                f"eval.final_samples_per_prompt={self.final_samples_per_prompt} must be >= 1, or "
                "null (= eval.samples_per_prompt)"
            )
        if self.temperature <= 0:
            raise ValueError(
                f"eval.temperature={self.temperature} must be > 0; greedy accuracy is reported "
                "separately with eval.greedy=true"
            )
        if self.max_new_tokens < 1:
            raise ValueError(f"eval.max_new_tokens={self.max_new_tokens} must be >= 1")


@dataclass
class ClusterConfig:
    address: str | None = None
    num_cpus: int | None = None
    in_process: bool = False
    rollout_engines: int = 1
    cpus_per_engine: float = 1.0
    gpus_per_engine: float = 0.0
    learners: int = 1
    cpus_per_learner: float = 1.0
    gpus_per_learner: float = 0.0
    cpus_for_allocator: float = 0.0
    allocator_in_driver: bool = False
    cpus_for_hint_generator: float = 0.0
    cpus_for_hint_engine: float = 1.0
    gpus_for_hint_engine: float = 0.0

    def validate(self) -> None:
        for key in ("rollout_engines", "learners"):
            if getattr(self, key) < 1:
                raise ValueError(f"cluster.{key}={getattr(self, key)} must be >= 1")
        for key in (
            "cpus_per_engine",
            "gpus_per_engine",
            "cpus_per_learner",
            "gpus_per_learner",
            "cpus_for_allocator",
            "cpus_for_hint_generator",
            "cpus_for_hint_engine",
            "gpus_for_hint_engine",
        ):
            if getattr(self, key) < 0:
                raise ValueError(f"cluster.{key}={getattr(self, key)} must be >= 0")
        if self.allocator_in_driver and self.cpus_for_allocator > 0:
            raise ValueError(
                f"cluster.cpus_for_allocator={self.cpus_for_allocator} reserves CPUs for the "
                "allocator actor, which cluster.allocator_in_driver=true does not start; set one "
                "of them back"
            )
        if self.in_process and (self.rollout_engines > 1 or self.learners > 1):
            raise ValueError(
                "cluster.in_process=true runs one engine and one learner in this process; set "
                "cluster.rollout_engines=1 cluster.learners=1, or cluster.in_process=false"
            )
