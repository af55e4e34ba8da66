"""The checks that load a model, each run in its own process by `adarl.preflight.runner`.

* `check_environment`: the node's facts and their verdict (adarl/preflight/node.py).
* `check_engine`: one engine of the config's rollout settings (`engine_class_and_kwargs`, what
  the rollout pool starts: for the GPU presets a compiled bf16 `VLLMEngine` with its KV cache by
  `gpu_memory_utilization`) on the real model, sampling a few of the task's prompts, made by the
  session's own codec and prompt source: start-up time, tokens/s, responses cut at the limit.
* `check_weight_push`: a learner and an engine built by the session's builders, joined by the
  config's weight sync (`build_weight_sync`: `BroadcastWeightSync` over NCCL for the presets).
  A probe (samples of the task's prompts) is scored by both before and after one learner step
  and a push; the engine's decoded log-probs and its scores of the probe must be the learner's
  scores of the new weights (within `LOGPROB_TOLERANCE`), and must have moved.
* `check_session`: the real `TrainingSession` of the config with a few prompts per step: its
  base evaluation, one step (sample, score, train, push to every engine) and its final
  evaluation, driven through the session's own objects; no checkpoint or model export is
  written (`train()` always saves after its last step: for a 1.5B ZeRO-3 run that is ~20 GB).

The CPU dry run (`python -m adarl.preflight --dry-run`) runs the same functions on a small model.
"""

from __future__ import annotations

import math
import os
import shutil
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from adarl.preflight.node import config_needs, environment_verdict, gather_node_facts, push_plan
from adarl.preflight.verdicts import Status, Verdict

if TYPE_CHECKING:
    import torch

    from adarl.config import AdarlConfig
    from adarl.rollout.codec import PromptCodec
    from adarl.types import GenerationRequest, GenerationResult, TaskExample, TrainBatch

# The engine check: this many of the task's training prompts, this many samples each, at the
# config's sampling settings (response length included).
ENGINE_PROMPTS = 8
ENGINE_SAMPLES = 4
# The weight-push probe: samples of the task's prompts, shorter than a training response.
PUSH_PROMPTS = 4
PUSH_SAMPLES = 2
PUSH_PROBE_NEW_TOKENS = 128
# One Adam step at this rate (no warm-up) moves the policy far past the engine-vs-learner noise:
# Adam's first update moves each weight by about the rate, and at the presets' 1e-6 (1e-7 in
# warm-up) most bf16 weights would not change at all (their spacing near 0.02 is 1.2e-4), so an
# engine that kept its old weights could not be told apart.
PUSH_LEARNING_RATE = 1e-4
# A learner and a vLLM engine sharing one GPU: the engine's share of its memory (the preset's 0.8
# would leave a 1.5B ZeRO-3 learner too little); set only when the KV cache is sized by fraction.
SHARED_GPU_ENGINE_MEMORY = 0.35
# |engine − learner| log-prob per response token, by the coarser precision of the two sides.
# fp32: the CPU builds agree to 3e-6 (tests/component/rollout/test_compiled_engine.py). bf16:
# provisional until a first run on GPUs with vLLM: the HF engine against the DeepSpeed learner on
# an H200 differed by at most 0.081 on 2,048-token sequences (docs/benchmarks.md "GPU"); an
# engine on stale weights differs by the step's whole move (`moved` must exceed the mean bound).
LOGPROB_TOLERANCE: dict[str, dict[str, float]] = {
    "fp32": {"max": 1e-3, "mean": 1e-4},
    "bf16": {"max": 1.0, "mean": 0.05},
}
# The session's step: its engines' log-probs of the samples against its learners' (train/
# mismatch_kl, k3 per token). bf16 engines and learners give ~1e-3; far above means the
# engines sample another policy than the learners train (a bad weight load, another model).
SESSION_MAX_MISMATCH_KL = 0.05
# A small model for the dry run: the built-in tiny architecture, random, with room for the
# presets' real-model guards (a context of 512 tokens, responses of 128).
SMALL_MODEL_POSITIONS = 512

# Known failures -> what to do (the first pattern found in the error's text wins).
FIXES: tuple[tuple[str, str], ...] = (
    (
        "out of memory",
        "lower rollout.gpu_memory_utilization or rollout.max_num_seqs (engines), "
        "learner.max_tokens_per_micro_batch (learners), or use GPUs with more memory",
    ),
    (
        "aot_compile",
        "torch.compile is disabled in the engine's process (TORCHDYNAMO_DISABLE=1): unset it; "
        "adarl's VLLMEngine sets it from rollout.enforce_eager",
    ),
    (
        "nccl",
        "each member of the broadcast group needs its own GPU, and the engines must reach "
        "learner rank 0's address; rerun with NCCL_DEBUG=INFO for NCCL's own account",
    ),
    (
        "no module named",
        "install the missing package (docs/cluster.md, section 1: vLLM first, then .[gpu])",
    ),
    ("timed out", "a component did not answer in time: its log says where it stopped"),
)


def fix_for(error: str) -> str:
    text = error.lower()
    for pattern, fix in FIXES:
        if pattern in text:
            return fix
    return "read the check's log (below) for the traceback"


def ensure_small_model(directory: Path) -> str:
    """The dry run's model at `directory`, built once with adarl's own code (the tiny Qwen2 and
    the character tokenizer, random weights): it is not a built-in, so the real-model guards
    apply to it as to the user's model."""
    if not (directory / "config.json").is_file():
        from adarl.config.model import TinyModelConfig
        from adarl.models.tiny import build_tiny_qwen2
        from adarl.models.tokenizer import build_char_tokenizer

        tokenizer = build_char_tokenizer()
        model = build_tiny_qwen2(
            TinyModelConfig(max_position_embeddings=SMALL_MODEL_POSITIONS), tokenizer
        )
        partial = directory.with_name(f".{directory.name}.{os.getpid()}")
        model.save_pretrained(partial)
        tokenizer.save_pretrained(partial)
        partial.rename(directory)
    return str(directory)


# -- shared pieces ---------------------------------------------------------------------------


def task_prompts(config: AdarlConfig, count: int) -> tuple[PromptCodec, list[TaskExample]]:
    """The run's prompt codec and its first `count` training prompts, built as the session
    builds them (the task's verifier vets the answers, the codec each prompt's length)."""
    from adarl.models.loading import model_max_positions, policy_tokenizer
    from adarl.reward.registry import build_verifier
    from adarl.rollout.codec import build_prompt_check, build_prompt_codec
    from adarl.tasks.build import build_prompt_source

    verifier = build_verifier(config.task.verifier_name, config.reward)
    codec = build_prompt_codec(config.task, config.rollout, policy_tokenizer(config))
    check_prompt = build_prompt_check(
        config.task, config.rollout, codec, model_max_positions=model_max_positions(config.model)
    )
    prompts = build_prompt_source(config.task, verifier=verifier, check_prompt=check_prompt)
    return codec, prompts.next_batch(min(count, len(prompts.examples)))


def probe_requests(
    codec: PromptCodec,
    examples: Sequence[TaskExample],
    *,
    samples: int,
    tag: str,
    max_new_tokens: int | None = None,
) -> list[GenerationRequest]:
    """`samples` samples of each example at the run's sampling settings (response length capped
    at `max_new_tokens`), with fixed seeds: the same draws on the same weights."""
    from adarl.types import PromptRequest

    sampling = codec.sampling
    if max_new_tokens is not None:
        sampling = replace(sampling, max_new_tokens=min(sampling.max_new_tokens, max_new_tokens))
    return [
        codec.generation_request(
            PromptRequest(
                request_id=f"preflight-{tag}-{i}",
                example=example,
                num_samples=samples,
                step=0,
                seed=1000 + i,
            ),
            sampling=sampling,
        )
        for i, example in enumerate(examples)
    ]


def samples_batch(
    requests: Sequence[GenerationRequest], results: Sequence[GenerationResult], *, pad: int
) -> TrainBatch:
    """The samples as a learner batch: the engine's log-probs as behaviour, advantage 1 on every
    token (a step on it raises the probability of exactly these samples)."""
    from adarl.types import Rollout, ScoredRollout, TrainBatch

    rollouts = [
        ScoredRollout(
            rollout=Rollout(
                request_id=request.request_id,
                prompt_id=request.request_id,
                prompt_token_ids=request.prompt_token_ids,
                completion=completion,
                weight_version=result.weight_version,
            ),
            reward=1.0,
        )
        for request, result in zip(requests, results, strict=True)
        for completion in result.completions
    ]
    prompt_index = [index for index, result in enumerate(results) for _ in result.completions]
    return TrainBatch.from_rollouts(
        rollouts, advantages=[1.0] * len(rollouts), prompt_index=prompt_index, pad_token_id=pad
    )


def _difference(a: torch.Tensor, b: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
    gap = (a - b)[mask].abs()
    return {"max": float(f"{float(gap.max()):.3g}"), "mean": float(f"{float(gap.mean()):.3g}")}


def _precision(config: AdarlConfig) -> str:
    coarse = config.learner.precision != "fp32" or config.rollout.dtype != "float32"
    return "bf16" if coarse else "fp32"


# -- the checks ----------------------------------------------------------------------------------


def check_environment(config: AdarlConfig) -> Verdict:
    facts = gather_node_facts()
    verdict = environment_verdict(facts, config)
    verdict.values["facts"] = facts.to_json()
    return verdict


def check_engine(config: AdarlConfig) -> Verdict:
    from adarl.models.loading import resolve_model_config
    from adarl.rollout.builders import engine_class_and_kwargs
    from adarl.types import FinishReason

    model_path = resolve_model_config(config.model, task=config.task)
    codec, examples = task_prompts(config, ENGINE_PROMPTS)
    engine_class, kwargs = engine_class_and_kwargs(config.rollout, model_path=model_path)
    start = time.perf_counter()
    engine = engine_class(**kwargs)
    startup_s = time.perf_counter() - start
    requests = probe_requests(codec, examples, samples=ENGINE_SAMPLES, tag="engine")
    start = time.perf_counter()
    results = engine.generate(requests)
    generate_s = time.perf_counter() - start
    completions = [c for result in results for c in result.completions]
    tokens = sum(len(c.token_ids) for c in completions)
    cut = sum(c.finish_reason is FinishReason.LENGTH for c in completions)
    finite = all(math.isfinite(x) for c in completions for x in c.logprobs)
    settings = {k: v for k, v in kwargs.items() if k != "model_path"}
    values: dict[str, Any] = {
        "engine": engine_class.__name__,
        "model": model_path,
        "settings": settings,
        "startup_s": round(startup_s, 1),
        "prompts": len(requests),
        "samples": len(completions),
        "tokens": tokens,
        "generate_s": round(generate_s, 2),
        "tokens_per_s": round(tokens / generate_s, 1) if generate_s > 0 else None,
        "cut_at_max_new_tokens": cut,
        "max_new_tokens": codec.sampling.max_new_tokens,
        "example": completions[0].text[:300] if completions else None,
    }
    if len(completions) != len(requests) * ENGINE_SAMPLES or not tokens or not finite:
        return Verdict(
            check="engine",
            status=Status.FAIL,
            reason=(
                f"{engine_class.__name__} returned {len(completions)} of "
                f"{len(requests) * ENGINE_SAMPLES} samples, {tokens} tokens"
                + ("" if finite else ", with non-finite log-probs")
            ),
            fix="read the check's log; try rollout.enforce_eager=true to rule out compilation",
            values=values,
        )
    if settings.get("kv_cache_memory_bytes") is not None:  # it wins over the memory fraction
        settings.pop("gpu_memory_utilization", None)
    shown = ", ".join(
        f"{k}={settings[k]}"
        for k in (
            "dtype",
            "max_model_len",
            "gpu_memory_utilization",
            "kv_cache_memory_bytes",
            "enforce_eager",
            "max_num_seqs",
            "device",
        )
        if k in settings
    )
    return Verdict(
        check="engine",
        status=Status.PASS,
        reason=(
            f"{engine_class.__name__} ({shown}) started in {startup_s:.1f} s; "
            f"{len(completions)} samples of {len(requests)} task prompts: {tokens} tokens in "
            f"{generate_s:.1f} s ({values['tokens_per_s']} tokens/s), {cut} cut at "
            f"{codec.sampling.max_new_tokens} tokens"
        ),
        values=values,
    )


def check_weight_push(config: AdarlConfig, *, learning_rate: float = PUSH_LEARNING_RATE) -> Verdict:
    import torch

    from adarl.learner.build import build_learner_group
    from adarl.models.loading import resolve_model_config
    from adarl.rollout.pool import build_rollout_pool
    from adarl.weight_sync.build import build_weight_sync

    needs = config_needs(config)
    plan = push_plan(needs, torch.cuda.device_count() if torch.cuda.is_available() else 0)
    rollout = config.rollout
    if plan.share_gpu and rollout.engine == "vllm" and rollout.kv_cache_memory_bytes is None:
        rollout = replace(
            rollout,
            gpu_memory_utilization=min(rollout.gpu_memory_utilization, SHARED_GPU_ENGINE_MEMORY),
        )
    model_path = resolve_model_config(config.model, task=config.task)
    codec, examples = task_prompts(config, PUSH_PROMPTS)
    if needs.ray:
        from adarl.cluster import ensure_ray

        ensure_ray(address=config.cluster.address, num_cpus=config.cluster.num_cpus)
    pool = build_rollout_pool(
        rollout,
        model_path=model_path,
        num_engines=1,
        in_process=not needs.ray,
        num_cpus_per_engine=config.cluster.cpus_per_engine,
        num_gpus_per_engine=plan.engine_gpus,
        faults=config.faults,
    )
    try:
        pool.weight_versions()  # the engine has started (and taken its memory) first
        learners = build_learner_group(
            replace(config.learner, learning_rate=learning_rate, lr_warmup_steps=0),
            model_path=model_path,
            temperature=rollout.temperature,
            num_learners=1,
            in_process=not needs.ray,
            cpus_per_learner=config.cluster.cpus_per_learner,
            gpus_per_learner=plan.learner_gpus,
            faults=config.faults,
        )
        try:
            sync = build_weight_sync(
                replace(config.learner.weight_sync, broadcast_backend=plan.backend),
                engines=pool.engine_endpoints(),
                timeout_s=config.faults.weight_sync_timeout_s,
            )
            values = _push_and_compare(pool, learners, sync, codec, examples, rollout.temperature)
        finally:
            learners.shutdown()
    finally:
        pool.shutdown()
    values.update(plan=plan.note, learning_rate=learning_rate, precision=_precision(config))
    return _push_verdict(values, plan.note, tolerance=LOGPROB_TOLERANCE[_precision(config)])


def _push_and_compare(
    pool: Any,
    learners: Any,
    sync: Any,
    codec: PromptCodec,
    examples: Sequence[TaskExample],
    temperature: float,
) -> dict[str, Any]:
    """Probe before, one step, push, probe after; every difference the verdict reads."""
    import torch

    def sample(tag: str) -> tuple[list[GenerationRequest], TrainBatch]:
        requests = probe_requests(
            codec, examples, samples=PUSH_SAMPLES, tag=tag, max_new_tokens=PUSH_PROBE_NEW_TOKENS
        )
        return requests, samples_batch(requests, pool.generate(requests), pad=codec.pad_token_id)

    requests, probe = sample("before")
    mask = probe.response_mask
    prompts = [r.prompt_token_ids for r in requests for _ in range(PUSH_SAMPLES)]
    responses = [row[mask[i]].tolist() for i, row in enumerate(probe.input_ids)]

    def engine_scores() -> torch.Tensor:
        scores = torch.zeros_like(probe.behaviour_logprobs)
        rows = pool.score(prompts, responses, temperature=temperature)
        for row, values in enumerate(rows):
            start = len(prompts[row])
            scores[row, start : start + len(values)] = torch.tensor(values)
        return scores

    engine_before = engine_scores()
    learner_before = learners.score(probe)
    start = time.perf_counter()
    step = learners.train_step(probe)
    step_s = time.perf_counter() - start
    learner_after = learners.score(probe)
    report = sync.push(learners)
    versions = pool.weight_versions()
    engine_after = engine_scores()
    _, decoded = sample("after")
    return {
        "probe": {"sequences": probe.num_sequences, "response_tokens": int(mask.sum())},
        "decoded_before_vs_learner": _difference(probe.behaviour_logprobs, learner_before, mask),
        "engine_before_vs_learner": _difference(engine_before, learner_before, mask),
        "learner_moved": _difference(learner_after, learner_before, mask),
        "engine_moved": _difference(engine_after, engine_before, mask),
        "engine_after_vs_learner": _difference(engine_after, learner_after, mask),
        "decoded_after_vs_learner": _difference(
            decoded.behaviour_logprobs, learners.score(decoded), decoded.response_mask
        ),
        "learner_step_s": round(step_s, 2),
        "grad_norm": step.grad_norm,
        "learner_version": step.weight_version.version,
        "engine_versions": versions,
        "push": {
            "seconds": round(report.total_s, 3),
            "bytes": report.num_bytes,
            "buckets": report.num_buckets,
            "version": report.version,
        },
    }


def _push_verdict(values: dict[str, Any], where: str, *, tolerance: dict[str, float]) -> Verdict:
    def within(key: str) -> bool:
        return all(values[key][k] <= tolerance[k] for k in ("max", "mean"))

    def shown(key: str) -> str:
        return f"max {values[key]['max']:.3g} / mean {values[key]['mean']:.3g}"

    bound = (
        f"tolerance ({values['precision']}) max {tolerance['max']:g} / mean {tolerance['mean']:g}"
    )
    problem: tuple[str, str] | None = None
    if values["learner_version"] != 1 or not math.isfinite(values["grad_norm"]):
        problem = (
            f"the learner step did not apply (weight version {values['learner_version']}, "
            f"gradient norm {values['grad_norm']})",
            "a non-finite loss or gradient: read the log; check learner.precision",
        )
    elif any(v != values["push"]["version"] for v in values["engine_versions"]):
        problem = (
            f"the engine reports weight versions {values['engine_versions']} after pushing "
            f"version {values['push']['version']}",
            "read the log: the engine did not load the pushed weights",
        )
    elif not within("engine_before_vs_learner") or not within("decoded_before_vs_learner"):
        problem = (
            "before any push the engine's log-probs differ from the learner's: "
            f"{shown('engine_before_vs_learner')} ({bound})",
            "the engine and the learner load the model differently: compare rollout.dtype with "
            "learner.precision, and the model directory both read",
        )
    elif values["learner_moved"]["mean"] <= tolerance["mean"]:
        problem = (
            f"one learner step at lr {values['learning_rate']:g} moved the probe's log-probs by "
            f"only {shown('learner_moved')}: new weights cannot be told from old",
            "rerun with a larger --push-learning-rate (e.g. 1e-3)",
        )
    elif values["engine_moved"]["mean"] <= tolerance["mean"]:
        problem = (
            "after the push the engine scores the probe as before "
            f"({shown('engine_moved')} apart) while the learner moved {shown('learner_moved')}: "
            "it kept its old weights",
            "the engine does not load the pushed weights: report it with this JSON and the log",
        )
    elif not within("engine_after_vs_learner") or not within("decoded_after_vs_learner"):
        problem = (
            "after the push the engine's log-probs are not the learner's: decoded "
            f"{shown('decoded_after_vs_learner')}, scored {shown('engine_after_vs_learner')} "
            f"({bound})",
            "the engine decodes with other weights than the learner's (a stale compiled graph "
            "or cache?): report it with this JSON and the log; rollout.enforce_eager=true tells "
            "whether compilation is the cause",
        )
    if problem is not None:
        return Verdict(
            check="weight_push",
            status=Status.FAIL,
            reason=f"{problem[0]} [{where}]",
            fix=problem[1],
            values=values,
        )
    push = values["push"]
    return Verdict(
        check="weight_push",
        status=Status.PASS,
        reason=(
            f"{where}: {push['bytes'] / 2**20:.0f} MiB in {push['buckets']} bucket(s), "
            f"{push['seconds']:.2f} s; after one step (log-probs moved "
            f"{shown('learner_moved')}) the engine's decoded log-probs are the learner's "
            f"within {shown('decoded_after_vs_learner')}, its scores within "
            f"{shown('engine_after_vs_learner')} ({bound})"
        ),
        values=values,
    )


def check_session(config: AdarlConfig, *, run_dir: Path) -> Verdict:
    from adarl.evaluation import EvalKind
    from adarl.session import TrainingSession

    if run_dir.exists():  # an earlier pre-flight's, in the same --out: never resumed from
        shutil.rmtree(run_dir)
    with TrainingSession(config, run_dir=run_dir) as session:
        base = session.evaluate(step=0, kind=EvalKind.BASE)
        outcome = session.driver.step(1, sample_ahead_through=1)
        final = session.evaluate(step=1, kind=EvalKind.FINAL)
        versions = session.rollout.weight_versions()
        build_s = session.build_s
    metrics = outcome.metrics
    keys = (
        "timing/step_s",
        "signal/mixed_group_fraction",
        "signal/reward_mean",
        "train/mismatch_kl",
        "train/loss",
        "train/grad_norm",
        "train/weight_version",
        "sampling/rollouts",
        "sampling/tokens",
        "timing/weight_sync_s",
    )
    values: dict[str, Any] = {
        "build_s": round(build_s, 1),
        "metrics": {k: metrics[k] for k in keys if k in metrics},
        "engine_versions": versions,
        "base_accuracy": None if base is None else base.accuracy,
        "final_accuracy": None if final is None else final.accuracy,
        "eval_s": [
            None if e is None else round(e.cost_metrics.get("timing/eval_s", 0.0), 1)
            for e in (base, final)
        ],
        "run_dir": str(run_dir),
    }
    kl = metrics.get("train/mismatch_kl", math.nan)
    loss = metrics.get("train/loss", math.nan)
    problem: tuple[str, str] | None = None
    if metrics.get("train/weight_version") != 1 or not math.isfinite(loss):
        problem = (
            f"the step did not update the learners (loss {loss}, weight version "
            f"{metrics.get('train/weight_version')})",
            "a non-finite loss or gradient: read the log and the run's logs/ directory",
        )
    elif any(v != 1 for v in versions):
        problem = (
            f"after the step the engines hold weight versions {versions}, not 1",
            "the weight sync did not reach every engine: read the run's logs/ directory",
        )
    elif not kl <= SESSION_MAX_MISMATCH_KL:
        problem = (
            f"train/mismatch_kl={kl:.3g}: the engines sample another policy than the learners "
            f"train (at most {SESSION_MAX_MISMATCH_KL:g} expected)",
            "compare rollout.dtype with learner.precision and the model both load; run the "
            "weight_push check",
        )
    if problem is not None:
        return Verdict(
            check="session",
            status=Status.FAIL,
            reason=problem[0],
            fix=problem[1],
            values=values,
        )
    mixed = metrics.get("signal/mixed_group_fraction")
    accuracy = ", ".join(
        f"{name} accuracy {value:.3f}"
        for name, value in (("base", values["base_accuracy"]), ("final", values["final_accuracy"]))
        if value is not None
    )
    warning = (
        " (no group with mixed outcomes: no learning signal from these prompts; check the "
        "verifier and the prompts' format)"
        if mixed == 0.0
        else ""
    )
    return Verdict(
        check="session",
        status=Status.PASS,
        reason=(
            f"built in {build_s:.0f} s; step 1: {metrics.get('timing/step_s', math.nan):.1f} s, "
            f"{metrics.get('sampling/rollouts', 0):.0f} rollouts, mixed-group fraction "
            f"{mixed}, mismatch KL {kl:.2g}, loss {loss:.4g}, every engine on version 1"
            + (f"; {accuracy}" if accuracy else "")
            + warning
        ),
        values=values,
    )
