"""`LearnerGroup`: N data-parallel learners (Ray actors, or one in this process), one code path.

The group is the only caller of `Learner`. Per step it cuts the TrainBatch into mini-batches of
whole groups (`learner.mini_batches_per_step`, one by default), each across ranks (balanced by
tokens), tells every rank how many micro-batches to run for each (the most any rank needs, so
ZeRO's per-pass collectives line up) and each mini-batch's loss normalisers, and sums what the
ranks report. A rank takes one optimizer step per mini-batch, `learner.epochs_per_step` times
over them, all in one call. Calls go through `concurrent.futures.Future`s: an in-process
learner runs on its own thread (`adarl.cluster.InProcessWorker`), an actor's
`ObjectRef.future()` is the same type.

Weight versions: version v means "the weights after v training steps" (0 = the initial policy;
a training step is one optimizer step per mini-batch per epoch).
Weight sync pushes `weight_version()` together with the weights, engines tag every rollout with
it, and the step reports how stale its batch was (`train/staleness_*`).

Faults: every call waits at most `call_timeout_s` (faults.learner_call_timeout_s) on all ranks;
a rank whose process died stops the run with an error that says so (a learner cannot be replaced
mid-run: its optimizer shard and process group die with it; `checkpoint.resume=auto` continues
from the last checkpoint, which a failed step never touches). A step whose loss or gradients are
not finite is skipped by every rank (adarl/learner/learner.py): the version does not advance,
`train/skipped_nonfinite_updates` counts such steps over the run, and `max_nonfinite_streak` of
them in a row stop the run.
"""

from __future__ import annotations

import functools
import inspect
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

import torch

from adarl.cluster import InProcessWorker, is_actor_death, results_within, spawn_actor
from adarl.learner.batching import (
    BatchCounts,
    max_micro_batches,
    plan_mini_batch_shards,
    sequence_lengths,
    split_across_ranks,
    term_owned_rows,
    validate_train_batch,
)
from adarl.learner.checkpoint import latest_tag
from adarl.learner.learner import Learner, RankStepResult
from adarl.learner.weights import WeightInfo
from adarl.types import StatisticsReply, StatisticsRequest, TrainBatch, WeightVersion

T = TypeVar("T")

log = logging.getLogger(__name__)

TIMEOUT_KEY = "faults.learner_call_timeout_s"


class NonFiniteUpdatesError(RuntimeError):
    """Too many consecutive training steps had a non-finite loss or gradient norm."""


@dataclass(frozen=True)
class PromptGradNorms:
    """GVM's per-prompt gradient statistic (adarl.learner.grad_norms) for one batch."""

    sample_norms: torch.Tensor  # [B] ‖∇_E NLL‖ per selected row, NaN elsewhere
    mean: dict[int, float]  # prompt_index → mean over its selected rows
    count: dict[int, int]  # prompt_index → number of selected rows


@dataclass(frozen=True)
class PendingTrainStep:
    """A training step sent to the ranks and not yet waited for (`start_train_step`)."""

    batch: TrainBatch
    counts: BatchCounts
    futures: list[Future[list[RankStepResult]]]  # per rank: one result per optimizer step
    start: float  # perf_counter when it was sent


@dataclass(frozen=True)
class TrainStepResult:
    metrics: dict[str, float]  # train/*, perf/*, timing/*
    grad_norm: float  # global gradient norm before clipping (the mean over optimizer steps)
    weight_version: WeightVersion  # the weights after this step


class _LearnerHandle(Protocol):
    """One rank, local or remote; every call returns a Future."""

    def submit(self, method: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]: ...

    def submit_keep_remote(self, method: Callable[..., T], /, *args: Any, **kwargs: Any) -> Any:
        """The call's result left where it is: a Ray ObjectRef (not fetched), or a Future."""
        ...

    def run(self, fn: Callable[..., T], /, *args: Any) -> Future[T]:
        """`fn(learner, *args)` where the rank lives (its process, its node's file system)."""
        ...

    def node_address(self, timeout_s: float | None = None) -> str: ...

    def shutdown(self) -> None: ...


class _LocalLearner:
    def __init__(self, learner: Learner) -> None:
        self._worker = InProcessWorker(learner)

    def submit(self, method: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        return self._worker.submit(functools.partial(method, self._worker.obj), *args, **kwargs)

    def submit_keep_remote(self, method: Callable[..., T], /, *args: Any, **kwargs: Any) -> Any:
        return self.submit(method, *args, **kwargs)

    def run(self, fn: Callable[..., T], /, *args: Any) -> Future[T]:
        return self._worker.submit(fn, self._worker.obj, *args)

    def node_address(self, timeout_s: float | None = None) -> str:
        return "127.0.0.1"

    def shutdown(self) -> None:
        self.submit(Learner.close).result()
        self._worker.shutdown()


class _RemoteLearner:
    def __init__(self, actor: Any) -> None:
        self._actor = actor

    def submit(self, method: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        return self.submit_keep_remote(method, *args, **kwargs).future()

    def submit_keep_remote(self, method: Callable[..., T], /, *args: Any, **kwargs: Any) -> Any:
        return getattr(self._actor, method.__name__).remote(*args, **kwargs)

    def run(self, fn: Callable[..., T], /, *args: Any) -> Future[T]:
        return self._actor.__ray_call__.remote(fn, *args).future()

    def node_address(self, timeout_s: float | None = None) -> str:
        future = self._actor.__ray_call__.remote(_actor_node_ip).future()
        return str(
            results_within([future], timeout_s, waiting_for="a learner's node", key=TIMEOUT_KEY)[0]
        )

    def shutdown(self) -> None:
        import ray

        try:
            ray.get(self._actor.close.remote(), timeout=60)
        except Exception as error:  # a dead or stuck learner: nothing left to close but the actor
            if not is_actor_death(error):
                log.warning("learner did not close cleanly (%s); killing its actor", error)
        ray.kill(self._actor)


def _actor_node_ip(_learner: Learner) -> str:
    import ray

    return str(ray.util.get_node_ip_address())


def _files_seen(_learner: Learner, directory: str) -> dict[str, int]:
    """What a rank sees under `directory` on its own node: relative path -> size."""
    from adarl.checkpoint import directory_inventory

    return directory_inventory(directory)


def unverified_shards(
    here: Mapping[str, int], seen_by_rank: Sequence[Mapping[str, int]]
) -> list[str]:
    """Files some rank sees (relative path -> size on its node) that the driver does not see
    with the same size (`here`), each described with the rank that sees it."""
    problems = []
    for rank, files in enumerate(seen_by_rank):
        for relative, size in files.items():
            if relative not in here:
                problems.append(f"learner rank {rank}'s file {relative} is missing")
            elif here[relative] != size:
                problems.append(
                    f"learner rank {rank}'s file {relative} has {here[relative]} bytes, not {size}"
                )
    return problems


def _probe_shared(_learner: Learner, directory: str, token: str, rank: int) -> bool:
    """Whether this rank reads the driver's probe file; if so it leaves its own for the driver
    (never creating a directory, or a stray file, on a node that does not share it)."""
    probe = Path(directory) / f".adarl-shared-probe-{token}"
    seen = probe.is_file() and probe.read_text() == token
    if seen:
        (Path(directory) / f".adarl-shared-probe-{token}-rank{rank}").write_text(token)
    return seen


class LearnerGroup:
    """N data-parallel `Learner`s; `learner_kwargs` are `Learner`'s keyword arguments."""

    def __init__(
        self,
        *,
        num_learners: int = 1,
        in_process: bool = False,
        cpus_per_learner: float = 1.0,
        gpus_per_learner: float = 0.0,
        scheduling: Sequence[Any] | None = None,
        call_timeout_s: float | None = None,
        max_nonfinite_streak: int | None = None,
        mini_batches_per_step: int = 1,
        epochs_per_step: int = 1,
        reference_reset_every_steps: int | None = None,
        **learner_kwargs: Any,
    ) -> None:
        """`scheduling`: per rank, the Ray scheduling strategy that places it (the resource
        plan's). `call_timeout_s`: the longest any call may take on all ranks (None = no
        limit). `max_nonfinite_streak`: consecutive skipped non-finite steps that stop the run
        (None = never). `mini_batches_per_step`, `epochs_per_step`: a training step is
        `epochs_per_step` passes over its batch cut into that many mini-batches of whole groups,
        one optimizer step each (`adarl.learner.batching.split_mini_batches`).
        `reference_reset_every_steps`: every this many training steps the KL reference becomes
        the current policy (`Learner.reset_reference`); None = never."""
        if num_learners < 1:
            raise ValueError(f"num_learners must be >= 1, got {num_learners}")
        if mini_batches_per_step < 1 or epochs_per_step < 1:
            raise ValueError(
                f"mini_batches_per_step ({mini_batches_per_step}) and epochs_per_step "
                f"({epochs_per_step}) must be >= 1"
            )
        if in_process and num_learners != 1:
            raise ValueError(
                f"in_process runs one learner (one process group per process); got "
                f"num_learners={num_learners}: use Ray actors (in_process=False) for more"
            )
        accepted = set(inspect.signature(Learner).parameters) - {"rank", "world_size"}
        unknown = sorted(set(learner_kwargs) - accepted)
        if unknown:
            raise TypeError(f"unknown Learner arguments {unknown}; accepted: {sorted(accepted)}")
        if scheduling is not None and len(scheduling) != num_learners:
            raise ValueError(
                f"scheduling has {len(scheduling)} strategies for {num_learners} learners"
            )
        if max_nonfinite_streak is not None and max_nonfinite_streak < 1:
            raise ValueError(f"max_nonfinite_streak must be >= 1, got {max_nonfinite_streak}")
        self.num_learners = num_learners
        self.mini_batches_per_step = mini_batches_per_step
        self.epochs_per_step = epochs_per_step
        if reference_reset_every_steps is not None and reference_reset_every_steps < 1:
            raise ValueError(
                f"reference_reset_every_steps must be >= 1 or None, got "
                f"{reference_reset_every_steps}"
            )
        self.reference_reset_every_steps = reference_reset_every_steps
        self.call_timeout_s = call_timeout_s
        self.max_nonfinite_streak = max_nonfinite_streak
        self._skipped_nonfinite = 0  # steps skipped over the run (restored on resume)
        self._nonfinite_streak = 0
        default_budget = _learner_default("max_tokens_per_micro_batch")
        self.max_tokens_per_micro_batch = int(
            learner_kwargs.get("max_tokens_per_micro_batch", default_budget)
        )
        self._version = 0
        self._step = 0
        self._last_metrics: dict[str, float] = {}
        self._pending: PendingTrainStep | None = None
        self._handles: list[_LearnerHandle] = []
        start = time.perf_counter()
        for rank in range(num_learners):
            kwargs = {**learner_kwargs, "rank": rank, "world_size": num_learners}
            if in_process:
                self._handles.append(_LocalLearner(Learner(**kwargs)))
            else:
                actor = spawn_actor(
                    Learner,
                    num_cpus=cpus_per_learner,
                    num_gpus=gpus_per_learner,
                    scheduling_strategy=None if scheduling is None else scheduling[rank],
                    **kwargs,
                )
                self._handles.append(_RemoteLearner(actor))
        try:
            address, port = self.rendezvous_address()
            self._wait(
                [
                    h.submit(Learner.setup, master_addr=address, master_port=port)
                    for h in self._handles
                ],
                "learner setup (process group, model, DeepSpeed engine)",
            )
            self._weight_infos: list[WeightInfo] = self._wait(
                [self._handles[0].submit(Learner.weight_infos)], "learner weight infos"
            )[0]
        except BaseException:
            self.shutdown()
            raise
        self.setup_s = time.perf_counter() - start

    # --------------------------------------------------------------------------- training

    def train_step(self, batch: TrainBatch) -> TrainStepResult:
        """One training step on `batch` across all ranks: one optimizer step per mini-batch per
        epoch (one in all by default)."""
        return self.finish_train_step(self.start_train_step(batch))

    def start_train_step(self, batch: TrainBatch) -> PendingTrainStep:
        """Send `batch` to every rank and return at once: the learners train in their own
        processes (threads in-process) while the caller goes on, e.g. sampling the next step
        (`rollout.max_off_policy_steps`). `finish_train_step` waits for it; one at a time."""
        if self._pending is not None:
            raise RuntimeError("a training step is already in flight; finish it first")
        validate_train_batch(batch)
        start = time.perf_counter()
        counts = BatchCounts.of(batch)
        plans = plan_mini_batch_shards(
            batch,
            num_mini_batches=self.mini_batches_per_step,
            world_size=self.num_learners,
            max_tokens=self.max_tokens_per_micro_batch,
        )
        futures = [
            h.submit(Learner.train_step, plan, epochs=self.epochs_per_step)
            for h, plan in zip(self._handles, plans, strict=True)
        ]
        self._pending = PendingTrainStep(batch=batch, counts=counts, futures=futures, start=start)
        return self._pending

    def train_step_done(self, pending: PendingTrainStep) -> bool:
        """Whether every rank has finished the step `start_train_step` sent (no waiting)."""
        return all(future.done() for future in pending.futures)

    def finish_train_step(self, pending: PendingTrainStep) -> TrainStepResult:
        """Wait for the step `start_train_step` sent, then count and report it."""
        if pending is not self._pending:
            raise RuntimeError("this training step is not the one in flight")
        self._pending = None
        batch, counts, start = pending.batch, pending.counts, pending.start
        per_rank = self._wait(pending.futures, "a learner training step")
        steps = [list(ranks) for ranks in zip(*per_rank, strict=True)]  # [optimizer step][rank]
        version_trained_on = self._version
        # Every rank skips a non-finite update together; the weights are unchanged only when
        # every optimizer step of the training step was skipped.
        skipped_steps = sum(any(rank.skipped_nonfinite for rank in ranks) for ranks in steps)
        skipped = skipped_steps == len(steps)
        if 0 < skipped_steps < len(steps):
            log.warning(
                "learner step %d: %d of its %d optimizer steps had a non-finite loss or gradient "
                "norm and were skipped; the others were applied",
                self._step + 1,
                skipped_steps,
                len(steps),
            )
        self._step += 1
        if skipped:  # no weight changed: the version stays
            self._skipped_nonfinite += 1
            self._nonfinite_streak += 1
        else:
            self._version += 1
            self._nonfinite_streak = 0
        metrics = self._step_metrics(batch, counts, steps, version_trained_on)
        metrics["train/skipped_nonfinite_updates"] = float(self._skipped_nonfinite)
        if skipped:
            log.warning(
                "learner step %d skipped: the loss (%s) or the gradient norm (%s) is not finite; "
                "weights unchanged (%d such step(s) in a row, %d in the run)",
                self._step,
                metrics.get("train/loss"),
                metrics["train/grad_norm"],
                self._nonfinite_streak,
                self._skipped_nonfinite,
            )
            limit = self.max_nonfinite_streak
            if limit is not None and self._nonfinite_streak >= limit:
                raise NonFiniteUpdatesError(
                    f"{self._nonfinite_streak} consecutive training steps had a non-finite loss "
                    f"or gradient norm (faults.max_nonfinite_streak={limit}); the run stops with "
                    "its last checkpoint intact. Look for NaN/inf in the rewards, advantages or "
                    "behaviour log-probs, or lower learner.learning_rate"
                )
        every = self.reference_reset_every_steps
        if every is not None:
            reset = self._step % every == 0
            if reset:
                self._wait(
                    [h.submit(Learner.reset_reference) for h in self._handles],
                    "resetting the KL reference to the policy",
                )
            metrics["train/reference_reset"] = float(reset)
        metrics["timing/learner_step_s"] = time.perf_counter() - start
        self._last_metrics = metrics
        return TrainStepResult(
            metrics=metrics,
            grad_norm=metrics["train/grad_norm"],
            weight_version=self.weight_version(),
        )

    def _step_metrics(
        self,
        batch: TrainBatch,
        counts: BatchCounts,
        steps: Sequence[Sequence[RankStepResult]],
        version_trained_on: int,
    ) -> dict[str, float]:
        """A training step's metrics from its optimizer steps' results (`steps[k][rank]`). Loss
        terms, gradient norm and learning rate are means over the optimizer steps (each a whole
        mini-batch's value: the ranks' shares summed), except train/mismatch_kl, read at the
        first, where the learners still hold the weights the engines sampled with (later ones
        add the step's own drift). One optimizer step: exactly its values."""
        per_step: list[dict[str, float]] = []
        for ranks in steps:
            shares: dict[str, float] = {}
            for rank in ranks:
                for key, value in rank.loss_metrics.items():
                    shares[key] = shares.get(key, 0.0) + value
            per_step.append(shares)
        # Every key any optimizer step reports (a mini-batch without a term's own rows reports
        # no value of that term), in the order they first appear.
        keys = dict.fromkeys(key for shares in per_step for key in shares)
        metrics = {key: _mean([s[key] for s in per_step if key in s]) for key in keys}
        if "train/mismatch_kl" in per_step[0]:
            metrics["train/mismatch_kl"] = per_step[0]["train/mismatch_kl"]
        owned = term_owned_rows(batch)
        padded = sum(r.padded_tokens for ranks in steps for r in ranks)
        real = int(batch.attention_mask.sum()) * self.epochs_per_step  # each pass reads all
        metrics.update(
            {
                "train/grad_norm": _mean([ranks[0].grad_norm for ranks in steps]),
                "train/learning_rate": _mean([ranks[0].learning_rate for ranks in steps]),
                "train/optimizer_steps": float(len(steps)),
                "train/sequences": float(batch.num_sequences - int(owned.sum())),
                "train/response_tokens": float(counts.num_tokens),
                "train/weight_version": float(self._version),
                "perf/micro_batches_per_rank": float(
                    sum(ranks[0].num_micro_batches for ranks in steps)
                ),
                "perf/padding_fraction": 1.0 - real / padded if padded else 0.0,
                "timing/learner_forward_backward_s": sum(
                    max(r.forward_backward_s for r in ranks) for ranks in steps
                ),
                "timing/learner_optimizer_s": sum(
                    max(r.optimizer_step_s for r in ranks) for ranks in steps
                ),
            }
        )
        for name, rows in batch.term_rows.items():
            metrics[f"train/{name}_rows"] = float(rows.sum())
        sampled = batch.weight_versions
        if batch.term_rows and sampled is not None:
            # A term's own rows (DPH-RL's rehearsal rows: stored samples of earlier steps) are
            # trained on no ratio: how stale they are says nothing about the step's samples.
            sampled = sampled[~owned]
        if sampled is not None and len(sampled):
            lag = (version_trained_on - sampled).float()
            metrics["train/staleness_mean"] = float(lag.mean())
            metrics["train/staleness_max"] = float(lag.max())
        return metrics

    def prompt_gradient_norms(
        self, batch: TrainBatch, *, sample_mask: torch.Tensor
    ) -> PromptGradNorms:
        """G_i = mean over prompt i's rows in `sample_mask` of ‖∇_E NLL(row)‖ (GVM's statistic).

        Only the selected rows are run. Weights are not changed.
        """
        sample_mask = torch.as_tensor(sample_mask, dtype=torch.bool)
        if tuple(sample_mask.shape) != (batch.num_sequences,):
            raise ValueError(
                f"sample_mask has shape {tuple(sample_mask.shape)}, expected "
                f"({batch.num_sequences},): one flag per sequence of the batch"
            )
        norms = torch.full((batch.num_sequences,), float("nan"))
        rows = sample_mask.nonzero().squeeze(1)
        if len(rows):
            selected = batch.select(rows)
            validate_train_batch(selected)
            splits = split_across_ranks(sequence_lengths(selected), self.num_learners)
            shards = [selected.select(torch.tensor(s, dtype=torch.long)) for s in splits]
            num_micro = max_micro_batches(shards, self.max_tokens_per_micro_batch)
            per_rank = self._wait(
                [
                    h.submit(Learner.sample_gradient_norms, shard, num_micro_batches=num_micro)
                    for h, shard in zip(self._handles, shards, strict=True)
                ],
                "a gradient-norm pass",
            )
            for split, values in zip(splits, per_rank, strict=True):
                if split:
                    norms[rows[torch.tensor(split)]] = values
        mean: dict[int, float] = {}
        count: dict[int, int] = {}
        for prompt in batch.prompt_index[sample_mask].unique().tolist():
            values = norms[(batch.prompt_index == prompt) & sample_mask]
            mean[int(prompt)] = float(values.mean())
            count[int(prompt)] = len(values)
        return PromptGradNorms(sample_norms=norms, mean=mean, count=count)

    def sample_statistics(
        self, request: StatisticsRequest, *, pad_token_id: int
    ) -> StatisticsReply:
        """A sampler's statistics request (adarl.types.StatisticsRequest), at the current
        weights: for "gradient_norm", each rollout's ‖∇_E NLL‖ (`prompt_gradient_norms`)."""
        if request.kind != "gradient_norm":
            raise ValueError(
                f"unknown statistics kind {request.kind!r}; the learners compute 'gradient_norm'"
            )
        if not request.rollouts:
            return StatisticsReply(kind=request.kind, values=(), weight_version=self._version)
        batch = TrainBatch.from_rollouts(
            request.rollouts,
            advantages=[0.0] * len(request.rollouts),
            prompt_index=list(range(len(request.rollouts))),
            pad_token_id=pad_token_id,
        )
        norms = self.prompt_gradient_norms(
            batch, sample_mask=torch.ones(batch.num_sequences, dtype=torch.bool)
        )
        return StatisticsReply(
            kind=request.kind,
            values=tuple(float(v) for v in norms.sample_norms),
            weight_version=self._version,
        )

    def score(self, batch: TrainBatch) -> torch.Tensor:
        """The learners' log π_θ at every position of `batch` ([B, T]; rank 0's copy)."""
        return self._wait([h.submit(Learner.score, batch) for h in self._handles], "scoring")[0]

    # --------------------------------------------------------------------------- weights

    def weight_version(self) -> WeightVersion:
        return WeightVersion(version=self._version, step=self._step)

    def weight_infos(self) -> list[WeightInfo]:
        """Name, full shape and dtype of every weight, in a fixed order."""
        return list(self._weight_infos)

    def gather_weights(self, names: Sequence[str], *, keep_remote: bool = False) -> Any:
        """Full copies of `names` from rank 0 (every rank takes part: ZeRO-3 gathers).

        Returns the dict, or with `keep_remote` whatever holds it without fetching it here (a
        Ray ObjectRef for actors, a Future in-process), for weight sync to hand to the engines.
        """
        names = list(names)
        first = self._handles[0].submit_keep_remote(Learner.gather_weights, names)
        self._wait(
            [h.submit(Learner.gather_weights, names) for h in self._handles[1:]],
            "gathering weights",
        )
        if keep_remote:
            return first
        future = first if isinstance(first, Future) else first.future()
        return self._wait([future], "gathering weights")[0]

    def get_weights(self) -> dict[str, torch.Tensor]:
        """Every weight, HF-named, full, on CPU (gathered once; ZeRO-3 included)."""
        return self.gather_weights([info.name for info in self._weight_infos])

    def rendezvous_address(self) -> tuple[str, int]:
        """An address and free port on learner rank 0's host (for the weight-broadcast group)."""
        handle = self._handles[0]
        port = self._wait([handle.submit(Learner.rendezvous_port)], "learner rank 0's port")[0]
        return handle.node_address(self.call_timeout_s), port

    def rank0_submit(self, method: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        """Run a `Learner` method on rank 0 only (used by weight sync's broadcast sender)."""
        return self._handles[0].submit(method, *args, **kwargs)

    def all_ranks_submit(
        self, method: Callable[..., T], /, *args: Any, **kwargs: Any
    ) -> list[Future[T]]:
        """Run a `Learner` method on every rank (collectives such as ZeRO-3 gathers)."""
        return [h.submit(method, *args, **kwargs) for h in self._handles]

    # --------------------------------------------------------------------------- checkpoints

    def save_checkpoint(self, directory: str | Path) -> str:
        """DeepSpeed state of every rank under `directory/step_<N>`; returns the tag once every
        file each rank wrote is verified visible here, at its size (on several nodes
        `directory` must be on a file system they all share: see `check_shared_directory`)."""
        tag = f"step_{self._step}"
        state = self.state_dict()
        self._wait(
            [
                h.submit(Learner.save_checkpoint, str(directory), tag=tag, client_state=state)
                for h in self._handles
            ],
            "saving the learners' checkpoint",
        )
        self._verify_shards(Path(directory))
        return tag

    def _verify_shards(self, directory: Path) -> None:
        """Every file any rank sees under `directory` is here with the same size."""
        from adarl.checkpoint import directory_inventory

        seen = self._wait(
            [h.run(_files_seen, str(directory)) for h in self._handles],
            "listing the learners' checkpoint files",
        )
        problems = unverified_shards(directory_inventory(directory), seen)
        if problems:
            raise RuntimeError(
                f"{problems[0]} in {directory} as the driver sees it ({len(problems)} file(s) in "
                "all): the checkpoint directory is not on a file system every node shares. Put "
                "the run directory (hydra.run.dir) on a shared file system (NFS, Lustre, ...) "
                "mounted at the same path on every node; the previous checkpoint is intact"
            )

    def check_shared_directory(self, directory: str | Path) -> None:
        """Refuse (ValueError) a checkpoint directory that some rank's node does not share with
        this process: each side writes a probe file the other must read."""
        import uuid

        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        token = uuid.uuid4().hex
        probe = directory / f".adarl-shared-probe-{token}"
        probe.write_text(token)
        try:
            seen = self._wait(
                [
                    h.run(_probe_shared, str(directory), token, rank)
                    for rank, h in enumerate(self._handles)
                ],
                "checking that the checkpoint directory is shared",
            )
            for rank, read_ours in enumerate(seen):
                theirs = directory / f"{probe.name}-rank{rank}"
                if not read_ours or not theirs.is_file():
                    node = self._handles[rank].node_address(self.call_timeout_s)
                    raise ValueError(
                        f"the checkpoint directory {directory} is not shared between the driver "
                        f"and learner rank {rank} (node {node}): a file one side wrote is not "
                        "there for the other. Learners write their shards where the driver "
                        "must verify them: put the run directory (hydra.run.dir) on a file "
                        "system every node mounts at the same path"
                    )
        finally:
            for leftover in directory.glob(f"{probe.name}*"):
                leftover.unlink(missing_ok=True)

    def load_checkpoint(self, directory: str | Path, *, tag: str | None = None) -> None:
        """Restore model, optimizer, scheduler and the weight version (latest tag by default)."""
        tag = tag or latest_tag(directory)
        states = self._wait(
            [h.submit(Learner.load_checkpoint, str(directory), tag=tag) for h in self._handles],
            "loading the learners' checkpoint",
        )
        self.load_state_dict(states[0])

    def state_dict(self) -> dict[str, int]:
        return {
            "version": self._version,
            "step": self._step,
            "skipped_nonfinite_updates": self._skipped_nonfinite,
            "nonfinite_streak": self._nonfinite_streak,
        }

    def load_state_dict(self, state: dict[str, int]) -> None:
        self._version = int(state["version"])
        self._step = int(state["step"])
        # Absent from checkpoints written before non-finite steps were counted.
        self._skipped_nonfinite = int(state.get("skipped_nonfinite_updates", 0))
        self._nonfinite_streak = int(state.get("nonfinite_streak", 0))

    def export_hf(self, directory: str | Path) -> None:
        """HF model directory (config, safetensors, tokenizer) loadable by transformers/vLLM."""
        self._wait(
            [h.submit(Learner.export_hf, str(directory)) for h in self._handles], "HF export"
        )

    # --------------------------------------------------------------------------- misc

    def metrics(self) -> dict[str, float]:
        """The last step's metrics."""
        return dict(self._last_metrics)

    def shutdown(self) -> None:
        """Close every learner (process groups, actors). The group is unusable afterwards."""
        handles, self._handles = self._handles, []
        for handle in handles:
            handle.shutdown()

    def _wait(self, futures: Sequence[Future[T]], waiting_for: str) -> list[T]:
        """Every rank's result within `call_timeout_s`; a rank whose process died raises an
        error that says so and how the run continues."""
        try:
            return results_within(
                futures, self.call_timeout_s, waiting_for=waiting_for, key=TIMEOUT_KEY
            )
        except Exception as error:
            if not is_actor_death(error):
                raise
            rank = next(
                (i for i, f in enumerate(futures) if f.done() and f.exception() is error), None
            )
            raise RuntimeError(
                f"learner rank {rank if rank is not None else '?'} died during {waiting_for} "
                f"({type(error).__name__}: {error}). A learner cannot be replaced mid-run (its "
                "optimizer shard and process group are gone): the run stops; the last checkpoint "
                "is intact and checkpoint.resume=auto continues from it"
            ) from error


def _mean(values: Sequence[float]) -> float:
    """The mean; one value is returned as it is (a single optimizer step's metrics unchanged)."""
    return values[0] if len(values) == 1 else sum(values) / len(values)


def _learner_default(name: str) -> Any:
    return inspect.signature(Learner).parameters[name].default
