"""Static checks that refuse the built-in tiny model's defaults on a real model.

The schema defaults suit the 0.4M-parameter built-in on CPU (16-token responses, a 256-token
context, an 8-token evaluation, fp32 engines with a 256 MiB KV cache, lr 3e-4 in
`learner/deepspeed.yaml`). A run that points `model.name_or_path` at a real model and forgets one
of them does not fail: it trains on truncated responses that score almost nothing, for as long as
the cluster is booked. So with a model that is not built-in these are **refused** before anything
starts, all at once, each with the key to set and a value that works (the presets
`experiment=qwen2_5_math_1_5b_*` set them all):

* `rollout.max_new_tokens` and `eval.max_new_tokens` below `MIN_RESPONSE_TOKENS` (128): no
  reasoning model answers a problem that briefly; the Reinforce-Ada recipe uses 2048.
* `rollout.max_model_len` below `MIN_CONTEXT_TOKENS` (512): the context must hold the prompt
  (chat template included) and the response.
* engines on GPUs (`cluster.gpus_per_engine` > 0, or `rollout.device=cuda` for the HF engine)
  in `rollout.dtype=float32`: twice the memory and a fraction of bf16's speed, never what a GPU
  run wants (on CPU, float32 is the right choice and stays allowed).
* GPU vLLM engines with a `rollout.kv_cache_memory_bytes` below 1 GiB (the CPU default is
  256 MiB): a few sequences' worth of cache; set it to null to size the cache by
  `rollout.gpu_memory_utilization`.
* `learner.learning_rate` at or above `MAX_LEARNING_RATE` (1e-4): the tiny model's rate; full
  fine-tuning of a pretrained model in RL uses 1e-6 to 1e-5.

Why refuse and not warn: each of these values is below anything a real model can use, so a run
with one of them is a wasted run, and a warning scrolls by in a job log nobody reads until the
curves are flat. The thresholds sit far below real settings and far above the tiny defaults.
Prompts longer than the context and a math task that never asks for `\\boxed{}` are caught when
the data are read (`adarl.rollout.codec.PromptCheck`), since they depend on the data and the
tokenizer. Settings that work but waste (`rollout.enforce_eager=true` or object-store weight sync
on GPUs) are logged as warnings.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from adarl.config import AdarlConfig

log = logging.getLogger("adarl")

MIN_RESPONSE_TOKENS = 128
MIN_CONTEXT_TOKENS = 512
MIN_GPU_KV_CACHE_BYTES = 1 << 30
MAX_LEARNING_RATE = 1e-4


def real_model_problems(config: AdarlConfig) -> list[str]:
    """What in `config` is a tiny-model default on a real model: one line per key, with a fix."""
    if config.model.is_builtin:
        return []
    rollout, cluster = config.rollout, config.cluster
    problems: list[str] = []
    if rollout.max_new_tokens < MIN_RESPONSE_TOKENS:
        problems.append(
            f"rollout.max_new_tokens={rollout.max_new_tokens} cuts responses off: set it to the "
            "response length you train at (e.g. rollout.max_new_tokens=2048)"
        )
    if rollout.max_model_len is not None and rollout.max_model_len < MIN_CONTEXT_TOKENS:
        problems.append(
            f"rollout.max_model_len={rollout.max_model_len} cannot hold a prompt and a response: "
            "set it to prompt + response tokens (e.g. rollout.max_model_len=3072), or null for "
            "the model's maximum"
        )
    if config.eval.max_new_tokens < MIN_RESPONSE_TOKENS:
        problems.append(
            f"eval.max_new_tokens={config.eval.max_new_tokens} cuts evaluation responses off: "
            "set it like rollout.max_new_tokens (e.g. eval.max_new_tokens=2048)"
        )
    gpu_engines = cluster.gpus_per_engine > 0 or (
        rollout.engine == "hf" and rollout.device.startswith("cuda")
    )
    if gpu_engines and rollout.engine != "fake" and rollout.dtype == "float32":
        problems.append(
            "rollout.dtype=float32 on GPU engines doubles their memory and slows decoding: set "
            "rollout.dtype=bfloat16 (and learner.precision=bf16)"
        )
    if (
        gpu_engines
        and rollout.engine == "vllm"
        and rollout.kv_cache_memory_bytes is not None
        and rollout.kv_cache_memory_bytes < MIN_GPU_KV_CACHE_BYTES
    ):
        problems.append(
            f"rollout.kv_cache_memory_bytes={rollout.kv_cache_memory_bytes} is a CPU-sized KV "
            "cache: set rollout.kv_cache_memory_bytes=null to size it by "
            "rollout.gpu_memory_utilization (e.g. 0.8)"
        )
    if config.learner.learning_rate >= MAX_LEARNING_RATE:
        problems.append(
            f"learner.learning_rate={config.learner.learning_rate:g} is the tiny model's rate "
            "and would wreck a pretrained model: set e.g. learner.learning_rate=1e-6"
        )
    return problems


def check_real_model(config: AdarlConfig) -> None:
    """Refuse `real_model_problems`; warn about settings that work on GPUs but waste them."""
    problems = real_model_problems(config)
    if problems:
        name = config.model.name_or_path
        # A local path that is not there is the first thing to fix (a hub name has no prefix).
        if name.startswith(("/", "./", "../", "~")) and not Path(name).expanduser().exists():
            problems.insert(
                0,
                f"model.name_or_path={name} does not exist on this machine: set it to a Hugging "
                "Face model directory (config.json, the weights and the tokenizer files)",
            )
        raise ValueError(
            f"model.name_or_path={name!r} is not a built-in model, but the "
            "config keeps the tiny model's defaults:\n  - "
            + "\n  - ".join(problems)
            + "\n(the experiment=qwen2_5_math_1_5b_* presets set all of these; "
            "docs/cluster.md)"
        )
    if config.model.is_builtin or config.cluster.gpus_per_engine <= 0:
        return
    if config.rollout.engine == "vllm" and config.rollout.enforce_eager:
        log.warning(
            "rollout.enforce_eager=true on GPU engines disables CUDA graphs (decoding several "
            "times slower): set rollout.enforce_eager=false"
        )
    if config.learner.weight_sync.method == "object_store":
        log.warning(
            "learner.weight_sync.method=object_store on GPUs copies every weight through host "
            "memory and Ray's object store each step: set learner.weight_sync.method=broadcast"
        )
