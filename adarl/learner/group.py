"""`LearnerGroup`: N data-parallel learners (Ray actors, or one in this process), one code path.

The group is the only caller of `Learner`. Per step it cuts the TrainBatch across ranks
(balanced by tokens), tells every rank how many micro-batches to run (the most any rank needs,
so ZeRO's per-pass collectives line up) and the whole-batch loss normalisers, and sums what the
ranks report. Calls go through `concurrent.futures.Future`s: an in-process learner runs on its own
thread (`adarl.cluster.InProcessWorker`), an actor's `ObjectRef.future()` is the same type.

Weight versions: version v means "the weights after v optimizer steps" (0 = the initial policy).
Weight sync pushes `weight_version()` together with the weights, engines tag every rollout with
it, and the step reports how stale its batch was (`train/staleness_*`).
"""

from __future__ import annotations

import functools
import inspect
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

import torch

from adarl.cluster import InProcessWorker, spawn_actor
from adarl.learner.batching import (
    BatchCounts,
    max_micro_batches,
    sequence_lengths,
    shard_batch,
    split_across_ranks,
    validate_train_batch,
)
from adarl.learner.learner import Learner, RankStepResult, WeightInfo
from adarl.types import TrainBatch, WeightVersion

T = TypeVar("T")

CHECKPOINT_LATEST_FILE = "latest"  # written by DeepSpeed next to the tagged directories


@dataclass(frozen=True)
class PromptGradNorms:
    """GVM's per-prompt gradient statistic (adarl.learner.grad_norms) for one batch."""

    sample_norms: torch.Tensor  # [B] ‖∇_E NLL‖ per selected row, NaN elsewhere
    mean: dict[int, float]  # prompt_index → mean over its selected rows
    count: dict[int, int]  # prompt_index → number of selected rows


@dataclass(frozen=True)
class TrainStepResult:
    metrics: dict[str, float]  # train/*, perf/*, timing/*
    grad_norm: float  # global gradient norm before clipping
    weight_version: WeightVersion  # the weights after this step
    prompt_grad_norms: PromptGradNorms | None  # when the step was asked for them


class _LearnerHandle(Protocol):
    """One rank, local or remote; every call returns a Future."""

    def submit(self, method: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]: ...

    def submit_keep_remote(self, method: Callable[..., T], /, *args: Any, **kwargs: Any) -> Any:
        """The call's result left where it is: a Ray ObjectRef (not fetched), or a Future."""
        ...

    def node_address(self) -> str: ...

    def shutdown(self) -> None: ...


class _LocalLearner:
    def __init__(self, learner: Learner) -> None:
        self._worker = InProcessWorker(learner)

    def submit(self, method: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        return self._worker.submit(functools.partial(method, self._worker.obj), *args, **kwargs)

    def submit_keep_remote(self, method: Callable[..., T], /, *args: Any, **kwargs: Any) -> Any:
        return self.submit(method, *args, **kwargs)

    def node_address(self) -> str:
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

    def node_address(self) -> str:
        import ray

        return str(ray.get(self._actor.__ray_call__.remote(_actor_node_ip)))

    def shutdown(self) -> None:
        import ray

        ray.get(self._actor.close.remote())
        ray.kill(self._actor)


def _actor_node_ip(_learner: Learner) -> str:
    import ray

    return str(ray.util.get_node_ip_address())


def _results(futures: Sequence[Future[T]]) -> list[T]:
    """Wait for all; the first failure propagates (after every call has finished)."""
    for future in futures:
        future.exception()
    return [future.result() for future in futures]


class LearnerGroup:
    """N data-parallel `Learner`s; `learner_kwargs` are `Learner`'s keyword arguments."""

    def __init__(
        self,
        *,
        num_learners: int = 1,
        in_process: bool = False,
        cpus_per_learner: float = 1.0,
        gpus_per_learner: float = 0.0,
        **learner_kwargs: Any,
    ) -> None:
        if num_learners < 1:
            raise ValueError(f"num_learners must be >= 1, got {num_learners}")
        if in_process and num_learners != 1:
            raise ValueError(
                f"in_process runs one learner (one process group per process); got "
                f"num_learners={num_learners}: use Ray actors (in_process=False) for more"
            )
        accepted = set(inspect.signature(Learner).parameters) - {"rank", "world_size"}
        unknown = sorted(set(learner_kwargs) - accepted)
        if unknown:
            raise TypeError(f"unknown Learner arguments {unknown}; accepted: {sorted(accepted)}")
        self.num_learners = num_learners
        default_budget = _learner_default("max_tokens_per_micro_batch")
        self.max_tokens_per_micro_batch = int(
            learner_kwargs.get("max_tokens_per_micro_batch", default_budget)
        )
        self._version = 0
        self._step = 0
        self._last_metrics: dict[str, float] = {}
        self._handles: list[_LearnerHandle] = []
        start = time.perf_counter()
        for rank in range(num_learners):
            kwargs = {**learner_kwargs, "rank": rank, "world_size": num_learners}
            if in_process:
                self._handles.append(_LocalLearner(Learner(**kwargs)))
            else:
                actor = spawn_actor(
                    Learner, num_cpus=cpus_per_learner, num_gpus=gpus_per_learner, **kwargs
                )
                self._handles.append(_RemoteLearner(actor))
        try:
            address, port = self.rendezvous_address()
            _results(
                [
                    h.submit(Learner.setup, master_addr=address, master_port=port)
                    for h in self._handles
                ]
            )
        except BaseException:
            self.shutdown()
            raise
        self.setup_s = time.perf_counter() - start
        self._weight_infos: list[WeightInfo] = (
            self._handles[0].submit(Learner.weight_infos).result()
        )

    # --------------------------------------------------------------------------- training

    def train_step(
        self, batch: TrainBatch, *, grad_norm_mask: torch.Tensor | None = None
    ) -> TrainStepResult:
        """One optimizer step on `batch` across all ranks.

        `grad_norm_mask` ([B] bool, e.g. the correct samples): also return GVM's per-prompt
        gradient norms of those rows, measured with the weights before this step.
        """
        validate_train_batch(batch)
        start = time.perf_counter()
        prompt_norms = None
        grad_norm_s = 0.0
        if grad_norm_mask is not None:
            prompt_norms = self.prompt_gradient_norms(batch, sample_mask=grad_norm_mask)
            grad_norm_s = time.perf_counter() - start
        counts = BatchCounts.of(batch)
        shards = shard_batch(batch, self.num_learners)
        num_micro = max_micro_batches(shards, self.max_tokens_per_micro_batch)
        ranks = _results(
            [
                h.submit(
                    Learner.train_step,
                    shard,
                    num_micro_batches=num_micro,
                    global_num_tokens=counts.loss_tokens,
                    global_num_sequences=counts.loss_sequences,
                )
                for h, shard in zip(self._handles, shards, strict=True)
            ]
        )
        version_trained_on = self._version
        self._version += 1
        self._step += 1
        metrics = self._step_metrics(batch, counts, ranks, version_trained_on)
        metrics["timing/learner_step_s"] = time.perf_counter() - start
        if prompt_norms is not None:
            metrics["timing/grad_norm_pass_s"] = grad_norm_s
            selected = prompt_norms.sample_norms[~prompt_norms.sample_norms.isnan()]
            if len(selected):
                metrics["train/sample_grad_norm_mean"] = float(selected.mean())
        self._last_metrics = metrics
        return TrainStepResult(
            metrics=metrics,
            grad_norm=ranks[0].grad_norm,
            weight_version=self.weight_version(),
            prompt_grad_norms=prompt_norms,
        )

    def _step_metrics(
        self,
        batch: TrainBatch,
        counts: BatchCounts,
        ranks: Sequence[RankStepResult],
        version_trained_on: int,
    ) -> dict[str, float]:
        metrics: dict[str, float] = {}
        for rank in ranks:
            for key, value in rank.loss_metrics.items():
                metrics[key] = metrics.get(key, 0.0) + value
        padded = sum(r.padded_tokens for r in ranks)
        real = int(batch.attention_mask.sum())
        metrics.update(
            {
                "train/grad_norm": ranks[0].grad_norm,
                "train/learning_rate": ranks[0].learning_rate,
                "train/sequences": float(batch.num_sequences),
                "train/response_tokens": float(counts.num_tokens),
                "train/weight_version": float(self._version),
                "perf/micro_batches_per_rank": float(ranks[0].num_micro_batches),
                "perf/padding_fraction": 1.0 - real / padded if padded else 0.0,
                "timing/learner_forward_backward_s": max(r.forward_backward_s for r in ranks),
                "timing/learner_optimizer_s": max(r.optimizer_step_s for r in ranks),
            }
        )
        if batch.weight_versions is not None and len(batch.weight_versions):
            lag = (version_trained_on - batch.weight_versions).float()
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
            per_rank = _results(
                [
                    h.submit(Learner.sample_gradient_norms, shard, num_micro_batches=num_micro)
                    for h, shard in zip(self._handles, shards, strict=True)
                ]
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

    def score(self, batch: TrainBatch) -> torch.Tensor:
        """The learners' log π_θ at every position of `batch` ([B, T]; rank 0's copy)."""
        return _results([h.submit(Learner.score, batch) for h in self._handles])[0]

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
        _results([h.submit(Learner.gather_weights, names) for h in self._handles[1:]])
        if keep_remote:
            return first
        if isinstance(first, Future):
            return first.result()
        import ray

        return ray.get(first)

    def get_weights(self) -> dict[str, torch.Tensor]:
        """Every weight, HF-named, full, on CPU (gathered once; ZeRO-3 included)."""
        return self.gather_weights([info.name for info in self._weight_infos])

    def rendezvous_address(self) -> tuple[str, int]:
        """An address and free port on learner rank 0's host (for the weight-broadcast group)."""
        handle = self._handles[0]
        return handle.node_address(), handle.submit(Learner.rendezvous_port).result()

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
        """DeepSpeed state of every rank under `directory/step_<N>`; returns the tag."""
        tag = f"step_{self._step}"
        state = self.state_dict()
        _results(
            [
                h.submit(Learner.save_checkpoint, str(directory), tag=tag, client_state=state)
                for h in self._handles
            ]
        )
        return tag

    def load_checkpoint(self, directory: str | Path, *, tag: str | None = None) -> None:
        """Restore model, optimizer, scheduler and the weight version (latest tag by default)."""
        if tag is None:
            latest = Path(directory) / CHECKPOINT_LATEST_FILE
            if not latest.is_file():
                raise FileNotFoundError(f"no {CHECKPOINT_LATEST_FILE!r} file in {directory}")
            tag = latest.read_text().strip()
        states = _results(
            [h.submit(Learner.load_checkpoint, str(directory), tag=tag) for h in self._handles]
        )
        self.load_state_dict(states[0])

    def state_dict(self) -> dict[str, int]:
        return {"version": self._version, "step": self._step}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self._version = int(state["version"])
        self._step = int(state["step"])

    def export_hf(self, directory: str | Path) -> None:
        """HF model directory (config, safetensors, tokenizer) loadable by transformers/vLLM."""
        _results([h.submit(Learner.export_hf, str(directory)) for h in self._handles])

    # --------------------------------------------------------------------------- misc

    def metrics(self) -> dict[str, float]:
        """The last step's metrics."""
        return dict(self._last_metrics)

    def shutdown(self) -> None:
        """Close every learner (process groups, actors). The group is unusable afterwards."""
        handles, self._handles = self._handles, []
        for handle in handles:
            handle.shutdown()


def _learner_default(name: str) -> Any:
    return inspect.signature(Learner).parameters[name].default
