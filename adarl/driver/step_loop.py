"""The step loop. One named call per stage; which algorithm runs is decided by which objects were
built (`adarl.session`), never by a branch here.

    PromptSource ─► BudgetAllocator ─ PromptRequest ─► RolloutPool (engines)
       ▲               ▲   │                              │ GenerationResult ─► Rollout
       │               │   └─ collapsed? ─► HintGenerator ┘ (re-rolled on (x, h))
       │               │                                   ▼
       │               └── observe(ScoredRollout) ◄── RewardPool
       │                                                   ▼
       │                GroupBuilder (inside the allocator): pool ─► downsample ─► correct
       │                                                   │ Group ─► TrainBatch
       │                                                   ▼
       │                LearnerGroup (DeepSpeed ZeRO): one generic loss, one optimizer step
       │                     │ statistics requests (GVM's gradient norms) ◄─► BudgetAllocator
       └── Checkpoint ◄── WeightSync ─► engines (new weight version)

A step:

    examples = prompts.next_batch(prompts_per_step)
    phase    = collect_groups(step, examples, parts)   # adarl/driver/rollout_phase.py: allocator ⇄
                                                       # rollout pool ⇄ reward pool, streaming
    batch    = TrainBatch.from_groups(phase.result.groups)  # + its term groups (DPH-RL), if any
    trained  = learners.train_step(batch)
    version  = sync_weights()                          # learners ─► engines
    evaluate / log / checkpoint                        # adarl/session.py

The rollout phase's collaborators (allocator, pools, prompt source, codec, hint generator, pool
reward stage, statistics, clock) travel as one record, `PhaseParts`, built by the session.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from adarl.allocator.allocator import StepResult
from adarl.driver.rollout_phase import PhaseParts, RolloutPhase, RolloutStream, collect_groups
from adarl.learner.group import LearnerGroup, PendingTrainStep
from adarl.step_metrics import StageTimer, merge_metrics
from adarl.types import Group, TaskExample, TrainBatch
from adarl.weight_sync.base import WeightSync


@dataclass
class StepOutcome:
    step: int
    metrics: dict[str, float]
    result: StepResult


class Driver:
    """Runs steps; owns no algorithm. `adarl.session.TrainingSession` builds it from config.

    With `max_off_policy_steps` = k ≥ 1 the rollout phase of later steps runs while the learners
    train (`rollout.max_off_policy_steps`):

        phase_t = the phase sampled ahead for t, or collect_groups(t) now
        learners.start_train_step(batch_t)           # returns at once
        sample ahead t+1..min(t+k, through)          # engines on the weights they hold
        learners.finish_train_step(); sync_weights()

    A phase sampled ahead used weights ≤ t-1 and is trained at t' ≤ t+k, so it lags by ≤ k
    versions. With k = 0 nothing is sampled ahead and a step is exactly the synchronous loop.

    With `cross_step_allocation` (`rollout.cross_step_allocation`, k ≥ 1) the phases are not
    sampled ahead whole but streamed into each other (`RolloutStream`):

        phase_t = stream.run_until_complete(t)        # step t+1..t+k open as soon as allowed
        learners.start_train_step(batch_t)
        stream.run_while(the learners train)         # steps t+1..t+k keep sampling
        learners.finish_train_step(); sync_weights()  # lands between engine calls

    A step t' opens while step t'-k or later is current, so its samples are drawn on the
    weights that step sampled with or newer and trained at t': they lag by ≤ k versions, as
    above, and no step's tail holds the engines idle while a later step could sample.

    With `write_hints_ahead` (`hints.write_ahead`, k = 0) the engines, idle while the learners
    train, write hints for step t+1 instead: its prompts are drawn then (the draw the next step
    would make) and the allocator names those whose record predicts a collapse.
    """

    def __init__(
        self,
        *,
        parts: PhaseParts,
        learners: LearnerGroup,
        weight_sync: WeightSync,
        prompts_per_step: int,
        on_step_end: Callable[[StepOutcome], None] | None = None,
        max_off_policy_steps: int = 0,
        max_rollouts: int | None = None,
        max_sequence_tokens: int | None = None,
        write_hints_ahead: bool = False,
        cross_step_allocation: bool = False,
    ) -> None:
        self.parts = parts
        self.learners = learners
        self.weight_sync = weight_sync
        self.prompts_per_step = prompts_per_step
        self.on_step_end = on_step_end
        self.max_off_policy_steps = max_off_policy_steps
        # No step is sampled ahead once this many rollouts, or sequence tokens, are trained.
        self.max_rollouts = max_rollouts
        self.max_sequence_tokens = max_sequence_tokens
        self.timer = StageTimer()
        # Training rollouts of the steps run so far (evaluation, and phases sampled ahead and
        # not yet trained, are counted apart).
        self.rollouts_generated = 0
        self.tokens_generated = 0
        self.sequence_tokens_generated = 0  # prompt + response tokens: what the learner reads
        self.ahead: dict[int, RolloutPhase] = {}  # step -> its phase, sampled ahead (k ≥ 1)
        self.dropped_stale_groups = 0
        if write_hints_ahead and (parts.hints is None or max_off_policy_steps):
            raise ValueError(
                "write_hints_ahead needs a hint generator and max_off_policy_steps=0 (sampling "
                "ahead writes the next steps' hints already)"
            )
        self.write_hints_ahead = write_hints_ahead
        # The next step's prompts, drawn while this step trained to write their hints.
        self.drawn_ahead: tuple[int, list[TaskExample]] | None = None
        if cross_step_allocation and (
            max_off_policy_steps < 1 or parts.hints is not None or parts.pool_reward
        ):
            raise ValueError(
                "cross_step_allocation needs max_off_policy_steps >= 1, no hint generator and no "
                "pool reward stage (rollout.cross_step_allocation)"
            )
        # The steps' phases streamed into each other (None: one phase at a time).
        self.stream = RolloutStream(parts) if cross_step_allocation else None

    # -- one step, stage by stage ---------------------------------------------------------------

    def step(self, step: int, *, sample_ahead_through: int | None = None) -> StepOutcome:
        """Run `step`; with k ≥ 1, also sample steps up to min(step + k, sample_ahead_through)
        while it trains (the session stops at a checkpoint so that none holds samples in
        flight; None = no limit but k)."""
        step_start = time.perf_counter()
        if self.stream is not None:
            phase = self.streamed_phase(step, through=sample_ahead_through)
        elif (ahead := self.ahead.pop(step, None)) is not None:
            phase = ahead
        else:
            with self.timer.stage("data"):
                examples = self.next_examples(step)
            with self.timer.stage("rollout"):
                phase = self.collect_groups(step, examples)
        self.rollouts_generated += phase.rollouts
        self.tokens_generated += phase.tokens
        self.sequence_tokens_generated += phase.tokens + phase.prompt_tokens
        result = phase.result
        groups, stale_metrics = self.drop_stale(result.groups)
        # Groups a loss term trains alone (DPH-RL's rehearsal rows) ride with a step's groups: a
        # step without any group trains nothing.
        rows = [*groups, *result.term_groups] if groups else []
        with self.timer.stage("batch"):
            batch = TrainBatch.from_groups(rows, pad_token_id=self.parts.codec.pad_token_id)
        with self.timer.stage("train"):
            training = self.start_training(batch)
        if self.stream is not None:
            with self.timer.stage("rollout_ahead"):
                self.stream.run_while(
                    lambda: training is not None and not self.learners.train_step_done(training),
                    self.step_opener(step, through=sample_ahead_through),
                )
        else:
            self.sample_ahead(step, through=sample_ahead_through)
        hints_ahead = self.hints_ahead(step, through=sample_ahead_through)
        with self.timer.stage("train"):
            train_metrics = self.finish_training(training)
        sync_metrics: dict[str, float] = {}
        if train_metrics["train/skipped_empty_batch"] == 0.0:  # new weights exist only then
            with self.timer.stage("weight_sync"):
                sync_metrics = self.sync_weights()
        timings = self.timer.pop_step()
        timings["timing/step_s"] = time.perf_counter() - step_start
        metrics = merge_metrics(
            {
                "allocator": result.metrics,
                "learners": train_metrics,
                "weight sync": sync_metrics,
                "rollout phase": phase.metrics,
                "prompt source": self.parts.prompts.metrics(),
                "pipeline": stale_metrics,
                "hints ahead": hints_ahead,
                "driver": {
                    **timings,
                    "perf/rollouts_total": float(self.rollouts_generated),
                    "perf/tokens_total": float(self.tokens_generated),
                    "perf/sequence_tokens_total": float(self.sequence_tokens_generated),
                },
            }
        )
        outcome = StepOutcome(step=step, metrics=metrics, result=result)
        if self.on_step_end is not None:
            self.on_step_end(outcome)
        return outcome

    def collect_groups(self, step: int, examples: Sequence[TaskExample]) -> RolloutPhase:
        """This step's rollout phase (`adarl.driver.rollout_phase.collect_groups`)."""
        return collect_groups(step, examples, self.parts)

    def budget_reached(self, *, rollouts_ahead: int = 0, sequence_tokens_ahead: int = 0) -> bool:
        """Whether the rollouts (or their prompt + response tokens) trained, with those sampled
        ahead and not yet trained, reach the run's budget: no further step is sampled then."""
        rollouts = self.rollouts_generated + rollouts_ahead
        tokens = self.sequence_tokens_generated + sequence_tokens_ahead
        return (self.max_rollouts is not None and rollouts >= self.max_rollouts) or (
            self.max_sequence_tokens is not None and tokens >= self.max_sequence_tokens
        )

    def sample_ahead(self, step: int, *, through: int | None) -> None:
        """While step `step` trains, sample the phases of steps step+1..step+k (k =
        `max_off_policy_steps`), at most through `through`, while the rollouts trained and
        sampled ahead stay under the budget (`budget_reached`)."""
        last = step + self.max_off_policy_steps
        if through is not None:
            last = min(last, through)
        for ahead in range(step + 1, last + 1):
            if ahead in self.ahead:
                continue
            phases = self.ahead.values()
            if self.budget_reached(
                rollouts_ahead=sum(p.rollouts for p in phases),
                sequence_tokens_ahead=sum(p.tokens + p.prompt_tokens for p in phases),
            ):
                return  # the run ends at `step` or before `ahead`: nothing to sample for
            with self.timer.stage("rollout_ahead"):
                examples = self.parts.prompts.next_batch(self.prompts_per_step)
                self.ahead[ahead] = self.collect_groups(ahead, examples)

    def streamed_phase(self, step: int, *, through: int | None) -> RolloutPhase:
        """Step `step`'s phase from the stream: opened now unless it opened while earlier steps
        sampled, streamed until it is finished, later steps opening as they are allowed."""
        assert self.stream is not None
        phase = self.stream.take(step)
        if phase is not None:
            return phase
        if step not in self.stream.open_steps():
            with self.timer.stage("data"):
                examples = self.next_examples(step)
            with self.timer.stage("rollout"):
                self.stream.open_step(step, examples)
        with self.timer.stage("rollout"):
            return self.stream.run_until_complete(step, self.step_opener(step, through=through))

    def step_opener(
        self, step: int, *, through: int | None
    ) -> Callable[[], tuple[int, list[TaskExample]] | None]:
        """While `step` samples or trains: the next step to open in the stream, if it may open
        now: within k of `step`, not past `through` (a checkpoint), and while the rollouts
        trained and sampling stay under the budget (`budget_reached`)."""
        assert self.stream is not None
        stream = self.stream
        last = step + self.max_off_policy_steps
        if through is not None:
            last = min(last, through)

        def open_next() -> tuple[int, list[TaskExample]] | None:
            coming = max([step, *stream.open_steps(), *stream.finished]) + 1
            if coming > last:
                return None
            if self.budget_reached(
                rollouts_ahead=stream.sampling(),
                sequence_tokens_ahead=stream.sampling_sequence_tokens(),
            ):
                return None
            return coming, self.parts.prompts.next_batch(self.prompts_per_step)

        return open_next

    def end_stream(self) -> dict[str, float]:
        """At the run's end: wait for the steps still sampling and drop them (counted in
        `sampling/rollouts_discarded_at_end`), so that the last checkpoint holds none."""
        if self.stream is None:
            return {}
        return {"sampling/rollouts_discarded_at_end": float(self.stream.discard_open())}

    def next_examples(self, step: int) -> list[TaskExample]:
        """Step `step`'s prompts: those drawn for it while the step before trained, or the next
        batch of the source."""
        if self.drawn_ahead is not None:
            drawn_for, examples = self.drawn_ahead
            self.drawn_ahead = None
            if drawn_for != step:
                raise RuntimeError(
                    f"step {step}: the prompts drawn ahead were for step {drawn_for}; steps must "
                    "run in order"
                )
            return examples
        return self.parts.prompts.next_batch(self.prompts_per_step)

    def hints_ahead(self, step: int, *, through: int | None) -> dict[str, float]:
        """While `step` trains: draw step+1's prompts and write hints for those the allocator
        predicts to collapse (`write_hints_ahead`), unless the run may end first (the next step
        is past `through`, a checkpoint, or the rollout budget is spent), so that no checkpoint
        holds prompts drawn for a step not run."""
        if not self.write_hints_ahead or self.parts.hints is None:
            return {}
        coming = step + 1
        chosen: list[TaskExample] = []
        run_may_end = (through is not None and coming > through) or self.budget_reached()
        if run_may_end:
            written = self.parts.hints.write_ahead(coming, [])  # no work: its metrics, at zero
        else:
            with self.timer.stage("hint_ahead"):
                examples = self.parts.prompts.next_batch(self.prompts_per_step)
                self.drawn_ahead = (coming, examples)
                predicted = set(self.parts.allocator.predicted_collapses(coming, examples))
                chosen = [e for e in examples if e.prompt_id in predicted]
                written = self.parts.hints.write_ahead(coming, chosen)
        return {"sampling/hints_ahead_predicted": float(len(chosen)), **written}

    def drop_stale(self, groups: Sequence[Group]) -> tuple[list[Group], dict[str, float]]:
        """Drop each group with a sample more than `max_off_policy_steps` versions behind the
        learners (counted); k = 0 checks nothing (its samples are always current)."""
        if self.max_off_policy_steps == 0:
            return list(groups), {}
        current = self.learners.weight_version().version
        kept = [
            g
            for g in groups
            if all(
                current - s.rollout.weight_version <= self.max_off_policy_steps for s in g.rollouts
            )
        ]
        self.dropped_stale_groups += len(groups) - len(kept)
        ahead = len(self.ahead)
        if self.stream is not None:  # later steps opened, finished or not, and not yet trained
            ahead += len(self.stream.open_steps()) + len(self.stream.finished)
        return kept, {
            "sampling/dropped_stale_groups": float(self.dropped_stale_groups),
            "sampling/steps_sampled_ahead": float(ahead),
        }

    def start_training(self, batch: TrainBatch) -> PendingTrainStep | None:
        """Send `batch` to the learners; None when there is nothing to learn from (e.g. every
        prompt collapsed): a deliberate skip, logged by `finish_training`."""
        if batch.num_sequences == 0:
            return None
        return self.learners.start_train_step(batch)

    def finish_training(self, training: PendingTrainStep | None) -> dict[str, float]:
        if training is None:
            return {"train/skipped_empty_batch": 1.0, "train/sequences": 0.0}
        trained = self.learners.finish_train_step(training)
        return {**trained.metrics, "train/skipped_empty_batch": 0.0}

    def sync_weights(self) -> dict[str, float]:
        """Push the learners' weights to every engine (their version travels with rollouts)."""
        return self.weight_sync.push(self.learners).metrics()
