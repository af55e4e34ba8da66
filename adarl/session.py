"""A training session: components built from config, placed, resumed, run, checkpointed, closed.

`TrainingSession.train()` is the outer loop around `Driver.step` (adarl/driver/step_loop.py):

    base eval ─► for step in (resume + 1)..total_steps:
                     driver.step(step) ─► eval if due ─► log ─► checkpoint if due
             ─► final eval ─► final checkpoint ─► final model (RUN_DIR/model) ─► RunSummary
"""

from __future__ import annotations

import functools
import logging
import math
import time
import traceback
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from omegaconf import OmegaConf

from adarl.allocator.allocator import BudgetAllocator
from adarl.allocator.build import allocator_kwargs
from adarl.allocator.hint_stage import build_hint_stage
from adarl.allocator.objective import declare_objective
from adarl.allocator.variance_filter import build_variance_filter
from adarl.checkpoint import CheckpointManager, capture_rng_state, resolve_resume, restore_rng_state
from adarl.cluster import (
    LIBRARY_LOG_DIR,
    blocking_proxy,
    cluster_nodes,
    ensure_ray,
    library_log_note,
    plan_resources,
    set_library_log_dir,
    spawn_actor,
)
from adarl.config import AdarlConfig
from adarl.config.tasks import FILE_SOURCES
from adarl.driver.rollout_phase import PhaseParts
from adarl.driver.step_loop import Driver, StepOutcome
from adarl.errors import InputError
from adarl.evaluation import EvalKind, EvalResult, build_evaluator
from adarl.evaluation.records import append_evaluation
from adarl.export import MODEL_DIR, export_source, write_model
from adarl.hints.generator import HintRunner
from adarl.learner.build import build_learner_group
from adarl.learner.loss_terms import build_loss_terms, declare_learner_terms
from adarl.logging import build_metrics_logger
from adarl.models.loading import model_max_positions, policy_tokenizer, resolve_model_config
from adarl.models.tiny import read_build_info
from adarl.no_signal import below_prior_message, no_signal_message
from adarl.reward.r3 import build_pool_reward
from adarl.reward.registry import build_reward_pool, build_verifier
from adarl.rollout.codec import build_prompt_check, build_prompt_codec
from adarl.rollout.hint_service import build_hints
from adarl.rollout.pool import build_rollout_pool
from adarl.run_summary import RunSummary
from adarl.step_metrics import merge_metrics
from adarl.tasks.build import build_prompt_source
from adarl.weight_sync.build import build_weight_sync

log = logging.getLogger("adarl")


def expected_last_step(
    *,
    step: int,
    total_steps: int,
    used: tuple[float, float],
    budgets: tuple[int | None, int | None],
    per_step: tuple[float | None, float | None],
) -> int:
    """The step a run is expected to stop at, seen from after `step`: `total_steps`, or the first
    step at which a budget runs out when each step spends what it has spent on average. `used`,
    `budgets` and `per_step` hold (training rollouts, prompt + response tokens): what has been
    spent, `trainer.max_rollouts` / `max_sequence_tokens` (None: no budget), and the spend per
    step (None or 0: not known yet). The run stops after the step whose total reaches a budget,
    so from `step` on that is step + ⌈(budget − used) / per_step⌉ (180,000 rollouts at 256 a
    step from step 0: step 704)."""
    last = total_steps
    for spent, budget, rate in zip(used, budgets, per_step, strict=True):
        if budget is None or not rate or rate <= 0:
            continue
        last = min(last, step + max(1, math.ceil((budget - spent) / rate)))
    return max(last, step)


class TrainingSession:
    def __init__(
        self,
        config: AdarlConfig,
        *,
        run_dir: Path,
        on_step_end: Callable[[StepOutcome], None] | None = None,
    ) -> None:
        """`on_step_end` sees every step's outcome (groups, metrics) after it is trained."""
        self.config = config
        self.run_dir = Path(run_dir)
        self.on_step_end = on_step_end
        self._closers: list[Any] = []
        # Where the actors' library output goes (logger.library_logs=file); None: the console.
        self.library_log_dir: Path | None = None

    # -- building ------------------------------------------------------------------------------

    def __enter__(self) -> TrainingSession:
        try:
            self._build()
        except BaseException as error:
            self._name_actor_output(error)
            self.close()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is not None:
            self._name_actor_output(exc)
        self.close()

    def _name_actor_output(self, error: BaseException) -> None:
        """An actor error that stops the run carries a note (printed under its traceback) naming
        the actor's log file, where the library's account of what went wrong is."""
        if self.library_log_dir is None:
            return
        note = library_log_note(error, self.library_log_dir)
        if note is not None and note not in "".join(traceback.format_exception(error)):
            error.add_note(note)

    def _build(self) -> None:
        config = self.config
        cluster = config.cluster
        self.started = time.perf_counter()
        self._check_inputs()
        verifier, check_prompt = self.verifier, self.check_prompt
        faults = config.faults
        if not cluster.in_process:
            if config.logger.library_logs == "file":
                # Before any actor starts: vLLM's, torch's and DeepSpeed's warnings, progress
                # bars and C++ messages go to one file per actor; adarl's lines stay here.
                self.library_log_dir = (self.run_dir / LIBRARY_LOG_DIR).absolute()
                set_library_log_dir(self.library_log_dir)
                self._closers.append(functools.partial(set_library_log_dir, None))
                log.info(
                    "library output of the actors (vLLM, torch, DeepSpeed): %s/<Class>-<pid>.log",
                    self.library_log_dir,
                )
            ensure_ray(address=cluster.address, num_cpus=cluster.num_cpus)
            self.plan = plan_resources(
                rollout_engines=cluster.rollout_engines,
                cpus_per_engine=cluster.cpus_per_engine,
                gpus_per_engine=cluster.gpus_per_engine,
                learners=cluster.learners,
                cpus_per_learner=cluster.cpus_per_learner,
                gpus_per_learner=cluster.gpus_per_learner,
                cpus_for_allocator=cluster.cpus_for_allocator,
                nodes=cluster_nodes(),  # actors spread over the nodes, each pinned to its own
                hint_generator=config.hints.schedule != "off",
                cpus_for_hint_generator=cluster.cpus_for_hint_generator,
                hint_engines=int(config.hints.schedule != "off" and config.hints.source == "model"),
                cpus_for_hint_engine=cluster.cpus_for_hint_engine,
                gpus_for_hint_engine=cluster.gpus_for_hint_engine,
            )
            log.info("placement: %s", self.plan.describe())

        def scheduling(role: str) -> list[Any] | None:
            return None if cluster.in_process else self.plan.scheduling(role)

        # The policy: built and cached once for built-ins (the tiny model warm-started on this
        # task); any HF directory otherwise.
        model_path = resolve_model_config(config.model, task=config.task)
        self.model_path = model_path

        # No held-out set (a file task with test_fraction=0 and no test_path): no evaluation,
        # reported as "n/a", never as an accuracy of 0.
        self.evaluator = build_evaluator(
            config,
            codec=self.codec,
            verifier=verifier,
            check_prompt=check_prompt,
            train_examples=self.prompts.examples,
        )
        if self.evaluator is None:
            log.warning(
                "no held-out set (task.test_fraction=0 and no task.test_path): held-out accuracy "
                "is not measured in this run"
            )
        elif config.task.source in FILE_SOURCES and not config.task.test_path:
            log.info(
                "held-out evaluation on %d prompts held out of %s (task.test_fraction=%g of its "
                "rows, none trained on; task.test_path=FILE evaluates on a file of its own)",
                len(self.evaluator.examples),
                config.task.path,
                config.task.held_out_fraction,
            )
        self.rewards = build_reward_pool(config.reward, [config.task.verifier_name])
        self._closers.append(self.rewards.close)

        allocator_plan = config.allocator.plan()  # validated once, its counts resolved once
        kwargs = allocator_kwargs(allocator_plan)
        # SAGE: the allocator declares collapse and re-rolls on (x, h); None when hints are off.
        kwargs["hints"] = build_hint_stage(
            config.hints, positive_threshold=config.allocator.positive_threshold
        )
        # DRO's variance filter wraps whichever sampler was built (unchanged when it is off).
        kwargs["sampler"] = build_variance_filter(config.dro.filter, kwargs["sampler"])
        if config.rollout.cross_step_allocation:  # steps t..t+k open at once
            kwargs["max_open_steps"] = config.rollout.max_off_policy_steps + 1
        # The learner's loss terms, built once: they train and they say what they add.
        loss_terms = build_loss_terms(config.learner, rehearsal=config.allocator.rehearsal)
        self.objective = declare_objective(
            allocator_plan,
            hint_schedule=config.hints.schedule,
            reward=config.dro.reward,
            learner_terms=declare_learner_terms(config.learner, loss_terms),
        )
        log.info("%s", self.objective.console())
        if cluster.in_process or cluster.allocator_in_driver:
            self.allocator: BudgetAllocator = BudgetAllocator(**kwargs)
        else:
            handle = spawn_actor(
                BudgetAllocator,
                num_cpus=cluster.cpus_for_allocator,
                name=None,
                scheduling_strategy=self.plan.scheduling("allocator")[0],
                **kwargs,
            )
            self.allocator = blocking_proxy(
                handle, BudgetAllocator, timeout_s=faults.allocator_call_timeout_s
            )

        self.rollout = build_rollout_pool(
            config.rollout,
            model_path=model_path,
            num_engines=cluster.rollout_engines,
            in_process=cluster.in_process,
            num_cpus_per_engine=cluster.cpus_per_engine,
            num_gpus_per_engine=cluster.gpus_per_engine,
            faults=faults,
            scheduling=scheduling("rollout_engine"),
        )
        self._closers.append(self.rollout.shutdown)
        self.learners = build_learner_group(
            config.learner,
            temperature=config.rollout.temperature,  # log-probs of the distribution sampled
            model_path=model_path,
            num_learners=cluster.learners,
            in_process=cluster.in_process,
            cpus_per_learner=cluster.cpus_per_learner,
            gpus_per_learner=cluster.gpus_per_learner,
            faults=faults,
            scheduling=scheduling("learner"),
            terms=loss_terms,
        )
        self._closers.append(self.learners.shutdown)
        self.weight_sync = build_weight_sync(
            config.learner.weight_sync,
            engines=self.rollout.engine_endpoints(),  # a live view: restarted engines included
            timeout_s=faults.weight_sync_timeout_s,
        )
        # A restarted rollout engine gets the learners' current weights before it serves.
        weight_sync, learners = self.weight_sync, self.learners
        self.rollout.set_weight_restorer(lambda endpoint: weight_sync.resync(endpoint, learners))
        # The hint generator is an actor of its own (prompts, parsing, leak checks); the driver
        # runs the generations it asks for: `self` hints on the policy's rollout engines (current
        # weights), `model` hints on the hint model's engine actor, placed by the plan above.
        self.hint_generator: HintRunner | None = None
        if config.hints.schedule != "off":
            self.hint_generator = build_hints(
                config.hints,
                generate=self.rollout.generate,
                codec=self.codec,
                rollout=config.rollout,
                in_process=cluster.in_process,
                cpus_for_generator=cluster.cpus_for_hint_generator,
                cpus_for_engine=cluster.cpus_for_hint_engine,
                gpus_for_engine=cluster.gpus_for_hint_engine,
                generator_scheduling=None
                if cluster.in_process
                else self.plan.scheduling("hint_generator")[0],
                engine_scheduling=scheduling("hint_engine"),
                faults=faults,
            )
            self._closers.append(self.hint_generator.close)
        phase_parts = PhaseParts(
            allocator=self.allocator,
            rollout=self.rollout,
            rewards=self.rewards,
            prompts=self.prompts,
            codec=self.codec,
            hints=self.hint_generator,
            pool_reward=build_pool_reward(config.dro, tokenizer=self.codec.tokenizer),
            # A sampler's statistics (GVM's gradient norms), by the learners at current weights.
            statistics=functools.partial(
                self.learners.sample_statistics, pad_token_id=self.codec.pad_token_id
            ),
        )
        self.driver = Driver(
            parts=phase_parts,
            learners=self.learners,
            weight_sync=self.weight_sync,
            prompts_per_step=config.allocator.prompts_per_step,
            on_step_end=self.on_step_end,
            max_off_policy_steps=config.rollout.max_off_policy_steps,
            max_rollouts=config.trainer.max_rollouts,
            max_sequence_tokens=config.trainer.max_sequence_tokens,
            write_hints_ahead=config.hints.write_ahead,
            cross_step_allocation=config.rollout.cross_step_allocation,
        )
        self.checkpoints = CheckpointManager(self.run_dir, keep_last=config.checkpoint.keep_last)
        if not cluster.in_process:  # learners on other nodes write shards the driver verifies
            self.learners.check_shared_directory(self.checkpoints.root)
        self._signal_tally = (0, 0.0)  # groups trained and mixed ones, from step 1 on
        self.resume_path = resolve_resume(self.run_dir, config.checkpoint.resume)
        self.start_step = 0
        self.base_eval: EvalResult | None = None
        self.previous_wall_s = 0.0
        if self.resume_path is not None:
            self._restore(self.resume_path)
        # What the driver had spent when this process took over: the rates of this process's
        # steps predict where the run stops (the progress bar's total).
        self._rollouts_at_start = self.driver.rollouts_generated
        self._sequence_tokens_at_start = self.driver.sequence_tokens_generated
        self.logger = build_metrics_logger(
            config.logger,
            run_dir=self.run_dir,
            run_config={
                **OmegaConf.to_container(OmegaConf.structured(config)),  # type: ignore[dict-item]
                "objective": self.objective.to_json(),
            },
            resume_from_step=self.start_step if self.resume_path is not None else None,
            total_steps=self._expected_last_step(self.start_step),
        )
        self._closers.append(self.logger.close)
        self.build_s = time.perf_counter() - self.started

    def _check_inputs(self) -> None:
        """The run's inputs, read and checked before any actor or model starts: the verifier,
        the policy's tokenizer, the data. What the user gave that cannot work (a missing model,
        tokenizer or data path, a bad row, a task longer than the context) is an `InputError`
        naming the key and the fix (adarl/errors.py)."""
        config = self.config
        try:
            # Data first: a task that cannot fill a step fails before any actor or model starts.
            # The run's own verifier vets the task's answers at load time (an answer it cannot
            # read is a bad row, never a silent p = 0 prompt), and the codec each prompt as the
            # model will see it (its length in the context, the answer instruction). Built-ins'
            # tokenizers need no model build; the tiny model's comes from the task's training
            # split, and a task whose prompts or answers do not fit its lengths is refused here.
            verifier = build_verifier(config.task.verifier_name, config.reward)
            self.codec = build_prompt_codec(config.task, config.rollout, policy_tokenizer(config))
            positions = model_max_positions(config.model)
            max_model_len = config.rollout.max_model_len
            if max_model_len and positions is not None and max_model_len > positions:
                # vLLM refuses it too, but only in the engine's actor after the learners loaded.
                raise ValueError(
                    f"rollout.max_model_len={max_model_len} is longer than the model's "
                    f"{positions} positions (max_position_embeddings of "
                    f"{config.model.name_or_path}): set rollout.max_model_len to at most "
                    f"{positions} (or null for the model's), with rollout.max_new_tokens and "
                    "eval.max_new_tokens within it"
                )
            check_prompt = build_prompt_check(
                config.task, config.rollout, self.codec, model_max_positions=positions
            )
            self.prompts = build_prompt_source(
                config.task, verifier=verifier, check_prompt=check_prompt
            )
            num_prompts = len(self.prompts.examples)
            if num_prompts < config.allocator.prompts_per_step:
                raise ValueError(
                    f"the task has {num_prompts} training prompts but allocator.prompts_per_step="
                    f"{config.allocator.prompts_per_step}: a step would hold a prompt twice; lower "
                    f"allocator.prompts_per_step to at most {num_prompts} or add prompts"
                )
        except InputError:
            raise
        except (ValueError, OSError) as error:  # a row, a path, a length: the user's input
            raise InputError(_one_line(error)) from error
        self.verifier = verifier
        self.check_prompt = check_prompt

    # -- the loop ------------------------------------------------------------------------------

    def train(self) -> RunSummary:
        config = self.config
        total = config.trainer.total_steps
        if self.base_eval is None and self.start_step == 0:
            self.base_eval = self.evaluate(step=0, kind=EvalKind.BASE)
            base_metrics = self.base_eval.metrics() if self.base_eval is not None else {}
            self.logger.log(0, {**base_metrics, "timing/build_s": self.build_s})
        last_eval = self.base_eval
        last_step = self.start_step
        stop_reason = "resumed_past_end" if self.start_step >= total else "total_steps"
        # The message of a run that stops early (below the prior, or without signal), or None.
        stop_message = self._prior_check()
        if stop_message is not None:
            log.warning("%s", stop_message)
            stop_reason = "below_prior"
        first = total + 1 if stop_message is not None else self.start_step + 1
        for step in range(first, total + 1):
            rollouts_before = self.driver.rollouts_generated
            outcome = self.driver.step(step, sample_ahead_through=self._next_checkpoint(step))
            last_step = step
            rollouts = self.driver.rollouts_generated
            out_of_budget = self.driver.budget_reached()
            stop_message = self._signal_check(outcome)
            final = step == total or out_of_budget or stop_message is not None
            metrics = dict(outcome.metrics)
            if final and step < total:  # steps opened ahead will not train: dropped before the
                metrics.update(self.driver.end_stream())  # checkpoint
            metrics["perf/wall_s"] = self.wall_s()
            if self._eval_due(step, rollouts_before, rollouts, final=final):
                kind = EvalKind.FINAL if final else EvalKind.PERIODIC
                evaluated = self.evaluate(step=step, kind=kind)
                if evaluated is not None:
                    last_eval = evaluated
                    metrics = merge_metrics({"step": metrics, "evaluation": evaluated.metrics()})
            self.logger.expect_steps(step if final else self._expected_last_step(step))
            self.logger.log(step, metrics)
            self._warn_if_no_signal(outcome)
            every = config.checkpoint.every_steps
            if final or (every and step % every == 0):
                self.save(step)
            if stop_message is not None:
                log.warning("%s", stop_message)
                stop_reason = "no_learning_signal"
                break
            if out_of_budget:
                log.info(
                    "step %d: %d training rollouts, %d prompt + response tokens reached "
                    "trainer.max_rollouts=%s / trainer.max_sequence_tokens=%s: stopping",
                    step,
                    rollouts,
                    self.driver.sequence_tokens_generated,
                    config.trainer.max_rollouts,
                    config.trainer.max_sequence_tokens,
                )
                stop_reason = "budget"
                break
        if self.start_step >= total:
            log.warning(
                "resumed at step %d >= trainer.total_steps=%d: nothing to do",
                self.start_step,
                total,
            )
        model_dir = self.export_model(last_step)
        timing = {
            k.removeprefix("timing/").removesuffix("_s"): v
            for k, v in self.driver.timer.total_seconds.items()
        }
        return RunSummary(
            name=config.name,
            steps=last_step,
            base_accuracy=None if self.base_eval is None else self.base_eval.accuracy,
            final_accuracy=None if last_eval is None else last_eval.accuracy,
            base_greedy_accuracy=None if self.base_eval is None else self.base_eval.greedy_accuracy,
            final_greedy_accuracy=None if last_eval is None else last_eval.greedy_accuracy,
            rollouts_generated=self.driver.rollouts_generated,
            tokens_generated=self.driver.tokens_generated,
            wall_time_s=self.wall_s(),
            time_per_stage_s={
                "build": self.build_s,
                **{name: seconds for name, seconds in timing.items()},
            },
            resumed_from_step=self.start_step if self.resume_path is not None else None,
            objective=self.objective.to_json(),
            base_evaluation=None if self.base_eval is None else self.base_eval.table(),
            pass_at_1_rise=(
                None
                if self.base_eval is None or last_eval is None or last_eval is self.base_eval
                else last_eval.pass_at_1_rise_over(self.base_eval)
            ),
            final_evaluation=None if last_eval is None else last_eval.table(),
            lead_over_best_constant=(
                None if last_eval is None else last_eval.lead_over_best_constant()
            ),
            model_dir=str(model_dir),
            stop_reason=stop_reason,
            stop_message=stop_message,
        )

    def export_model(self, step: int) -> Path:
        """The policy as a Hugging Face model in RUN_DIR/model (adarl/export.py): after the final
        checkpoint, from the weights the learners gather for weight sync."""
        source = export_source(
            self.run_dir, self.checkpoints.latest() or self.resume_path, step=step, final=True
        )
        with self.driver.timer.stage("export", per_step=False):
            return write_model(
                self.learners,
                self.run_dir / MODEL_DIR,
                config=self.config,
                codec=self.codec,
                source=source,
            )

    def wall_s(self) -> float:
        """This run's wall time so far, across resumes."""
        return self.previous_wall_s + time.perf_counter() - self.started

    def _expected_last_step(self, step: int) -> int:
        """Where the run is expected to stop, seen from after `step` (`expected_last_step`):
        before step 1 from the allocator's planned rollouts per step (its budget, or prompts ×
        planned samples), then from what this process's steps have spent on average."""
        trainer, driver = self.config.trainer, self.driver
        done = step - self.start_step
        if done > 0:
            rollouts = (driver.rollouts_generated - self._rollouts_at_start) / done
            tokens: float | None = (
                driver.sequence_tokens_generated - self._sequence_tokens_at_start
            ) / done
        else:
            plan = self.config.allocator.plan()
            rollouts = plan.rollout_budget or (
                self.config.allocator.prompts_per_step * plan.planned_samples_per_prompt
            )
            tokens = None
        return expected_last_step(
            step=step,
            total_steps=trainer.total_steps,
            used=(driver.rollouts_generated, driver.sequence_tokens_generated),
            budgets=(trainer.max_rollouts, trainer.max_sequence_tokens),
            per_step=(rollouts, tokens),
        )

    def _next_checkpoint(self, step: int) -> int:
        """The first step ≥ `step` that saves a checkpoint (the last step at the latest):
        nothing is sampled ahead past it, so no checkpoint holds samples in flight."""
        total, every = self.config.trainer.total_steps, self.config.checkpoint.every_steps
        if not every:
            return total
        return min(total, -(-step // every) * every)

    def _eval_due(self, step: int, rollouts_before: int, rollouts: int, *, final: bool) -> bool:
        """At the last step, every `eval.every_steps` steps, and whenever the training rollouts
        cross a multiple of `eval.every_rollouts`."""
        every_steps, every_rollouts = self.config.eval.every_steps, self.config.eval.every_rollouts
        if final or (every_steps and step % every_steps == 0):
            return True
        return (
            bool(every_rollouts) and rollouts // every_rollouts > rollouts_before // every_rollouts
        )

    def evaluate(self, *, step: int, kind: EvalKind) -> EvalResult | None:
        """Held-out pass@k now, as the `kind` of evaluation (the base and the final one draw
        `eval.final_samples_per_prompt` samples per prompt); None when the task has no held-out
        set."""
        if self.evaluator is None:
            return None
        start = time.perf_counter()
        with self.driver.timer.stage("eval", per_step=False):
            result = self.evaluator.evaluate(self.rollout, self.rewards, step=step, kind=kind)
        result.cost_metrics["timing/eval_s"] = time.perf_counter() - start
        append_evaluation(self.run_dir, step=step, kind=kind, result=result)
        if result.completions:
            self.logger.log_completions(step, result.completions)
        return result

    def _prior_check(self) -> str | None:
        """Before the first step of a run that starts from step 0: the message that stops it if
        its policy starts below the answers' prior (trainer.stop_below_prior), else None."""
        if not self.config.trainer.stop_below_prior or self.start_step > 0:
            return None
        base = self.base_eval
        return below_prior_message(
            base=None if base is None else base.table(),
            lead=None if base is None else base.lead_over_best_constant(),
            warm_start=_warm_start_record(self.model_path),
            builtin_model=self.config.model.is_builtin,
        )

    def _signal_check(self, outcome: StepOutcome) -> str | None:
        """At step `trainer.signal_check_steps` of a run that started from step 0: the message
        that stops it if too few of the groups trained so far had mixed outcomes (the policy
        gets almost no gradient), else None (trainer.min_mixed_group_fraction)."""
        trainer = self.config.trainer
        groups = len(outcome.result.groups)
        mixed = outcome.metrics.get("signal/mixed_group_fraction", 0.0) * groups
        self._signal_tally = (self._signal_tally[0] + groups, self._signal_tally[1] + mixed)
        if outcome.step != trainer.signal_check_steps or self.start_step > 0:
            return None
        trained, mixed_total = self._signal_tally
        fraction = mixed_total / trained if trained else 0.0
        if fraction >= trainer.min_mixed_group_fraction:
            return None
        return no_signal_message(
            steps=outcome.step,
            groups=trained,
            mixed_fraction=fraction,
            minimum=trainer.min_mixed_group_fraction,
            base=None if self.base_eval is None else self.base_eval.table(),
            warm_start=_warm_start_record(self.model_path),
            builtin_model=self.config.model.is_builtin,
        )

    def _warn_if_no_signal(self, outcome: StepOutcome) -> None:
        mixed = outcome.metrics.get("signal/mixed_group_fraction")
        if mixed == 0.0 and outcome.result.groups:
            log.warning(
                "step %d: none of the %d trained groups has mixed outcomes: this step produced no "
                "learning signal (every prompt all-correct or all-wrong). Check the task's "
                "difficulty and the verifier (signal/reward_mean, sampling/reward_errors).",
                outcome.step,
                len(outcome.result.groups),
            )

    # -- checkpoint / resume -------------------------------------------------------------------

    def save(self, step: int) -> Path:
        driver = self.driver

        def write_learner(directory: Path) -> None:
            self.learners.save_checkpoint(directory)

        with driver.timer.stage("checkpoint", per_step=False):
            return self.checkpoints.save(
                step,
                {
                    "learner": write_learner,
                    "learner_state": self.learners.state_dict(),
                    "allocator": self.allocator.state_dict(),
                    "prompts": self.prompts.state_dict(),
                    "rng": capture_rng_state(),
                    "driver": {
                        "step": step,
                        "rollouts_generated": driver.rollouts_generated,
                        "tokens_generated": driver.tokens_generated,
                        "sequence_tokens_generated": driver.sequence_tokens_generated,
                        "timing_total_s": dict(driver.timer.total_seconds),
                        "wall_s": self.wall_s(),
                        "base_eval": (
                            None if self.base_eval is None else self.base_eval.state_dict()
                        ),
                    },
                },
            )

    def _restore(self, path: Path) -> None:
        checkpoint = self.checkpoints.load(path)
        state: Mapping[str, Any] = checkpoint.objects["driver"]
        self.learners.load_checkpoint(checkpoint.directories["learner"])
        self.learners.load_state_dict(checkpoint.objects["learner_state"])
        self.allocator.load_state_dict(checkpoint.objects["allocator"])
        self.prompts.load_state_dict(checkpoint.objects["prompts"])
        restore_rng_state(checkpoint.objects["rng"])
        driver = self.driver
        driver.rollouts_generated = int(state["rollouts_generated"])
        driver.tokens_generated = int(state["tokens_generated"])
        # Checkpoints written before the token budget existed hold no count: it restarts at 0.
        driver.sequence_tokens_generated = int(state.get("sequence_tokens_generated", 0))
        for name, seconds in state["timing_total_s"].items():
            driver.timer.total_seconds[name] = float(seconds)
        self.previous_wall_s = float(state["wall_s"])
        if state["base_eval"] is not None:
            self.base_eval = EvalResult.from_state_dict(state["base_eval"])
        self.start_step = int(state["step"])
        driver.sync_weights()  # engines start from the restored policy, not the initial one
        log.info("resumed from %s at step %d", path, self.start_step)

    # -- teardown ------------------------------------------------------------------------------

    def close(self) -> None:
        while self._closers:
            closer = self._closers.pop()
            try:
                closer()
            except Exception:  # teardown must reach every component; the first error is logged
                log.exception("error while shutting down %s", closer)


def _one_line(error: BaseException) -> str:
    """An input error's message on one line (a multi-line message's lines joined by "; ")."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return "; ".join(lines) or type(error).__name__


def _warm_start_record(model_dir: str) -> dict[str, Any] | None:
    """The warm start's record of a built-in tiny model (its build info's `warm_start` entry:
    held-aside accuracy, the baselines on the same prompts, why it stopped), or None for any
    other model or one built before the record existed."""
    info = read_build_info(model_dir)
    record = None if info is None else info.get("warm_start")
    return record if isinstance(record, dict) else None
