"""The real-model presets carry the Reinforce-Ada recipe's sizes, and a real model is refused the
tiny model's defaults (adarl/config/real_model.py), naming every key to set."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from adarl.config import AdarlConfig
from adarl.launch import CONFIG_DIR, load_config

PRESETS = ("qwen2_5_math_1_5b_grpo", "qwen2_5_math_1_5b_seq_balance")

# The README's cluster command before the presets existed: a real model on GPUs with every other
# value inherited from the tiny model.
README_OLD_COMMAND = [
    "+experiment=ada_seq_balance",
    "model=hf",
    "model.name_or_path=/models/Qwen2.5-Math-1.5B",
    "task=jsonl",
    "task.path=/data/train.jsonl",
    "cluster.rollout_engines=4",
    "cluster.gpus_per_engine=1",
    "cluster.learners=4",
    "cluster.gpus_per_learner=1",
]


def _compose(*overrides: str) -> AdarlConfig:
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        cfg = compose(config_name="config", overrides=list(overrides))
    return load_config(cfg)


@pytest.mark.parametrize("preset", PRESETS)
def test_preset_has_the_documented_recipe(preset: str) -> None:
    """MATH.md / the released scripts: n = 4, 512 prompts per step, lr 1e-6, clip 0.2/0.28,
    token mean, 2,048 response tokens (1,024 prompt), bf16, KV cache by memory fraction, NCCL
    broadcast, math jsonl task with the chat template and the \\boxed{} instructions."""
    config = _compose(f"+experiment={preset}")
    assert config.name == preset
    assert config.model.name_or_path == "Qwen/Qwen2.5-Math-1.5B" and not config.model.is_builtin
    rollout, learner = config.rollout, config.learner
    assert (rollout.max_new_tokens, rollout.max_model_len) == (2048, 3072)
    assert config.eval.max_new_tokens == 2048
    assert (rollout.dtype, learner.precision) == ("bfloat16", "bf16")
    assert rollout.kv_cache_memory_bytes is None and rollout.gpu_memory_utilization == 0.8
    assert rollout.enforce_eager is False and rollout.temperature == 1.0
    assert learner.learning_rate == 1e-6 and learner.lr_warmup_steps == 10
    assert (learner.loss.clip_low, learner.loss.clip_high) == (0.2, 0.28)
    assert learner.loss.aggregation == "token_mean" and learner.loss.kl_coef == 0.0
    # verl's old log-probs: the learner's own, not the bf16 engines' (up to 0.081 apart)
    assert learner.loss.ratio_reference == "learner" and learner.loss.tis_cap is None
    assert learner.activation_checkpointing and learner.zero_stage == 3
    assert (learner.weight_sync.method, learner.weight_sync.broadcast_backend) == (
        "broadcast",
        "nccl",
    )
    assert config.allocator.prompts_per_step == 512
    task = config.task
    assert (task.source, task.verifier, task.chat_template) == ("jsonl", "math", True)
    assert "\\boxed{}" in (task.system_prompt or "") and "\\boxed{}" in task.instruction_suffix
    assert config.trainer.total_steps == 400
    # Evaluations a user would run, not the whole test set at 64 samples before step 1 (320k
    # responses of 2,048 tokens on MATH): 500 prompts, greedy, and 8 samples at the ends.
    evaluation = config.eval
    assert (evaluation.num_prompts, evaluation.every_steps) == (500, 50)
    assert (evaluation.samples_per_prompt, evaluation.greedy) == (1, True)
    assert evaluation.final_samples_per_prompt == 8
    assert config.cluster.gpus_per_engine == 1 and config.cluster.gpus_per_learner == 1
    assert config.faults.engine_failure == "fail"  # broadcast groups cannot take a restart


def test_presets_differ_only_in_the_sampler() -> None:
    grpo = _compose("+experiment=qwen2_5_math_1_5b_grpo")
    seq = _compose("+experiment=qwen2_5_math_1_5b_seq_balance")
    assert (grpo.allocator.sampler, grpo.allocator.uniform_samples_per_prompt) == ("uniform", 4)
    assert grpo.allocator.group.advantage == "grpo"
    assert seq.allocator.sampler == "seq_balance" and seq.allocator.group.group_size == 4
    assert (seq.allocator.sequential.k_pos, seq.allocator.sequential.k_neg) == (2, 2)
    assert seq.allocator.max_samples_per_prompt == 32  # the recipe's 4 rounds of 8
    assert seq.allocator.group.correction == "selection"
    assert (grpo.rollout, grpo.learner, grpo.task) == (seq.rollout, seq.learner, seq.task)


def test_presets_compose_and_validate_without_heavy_imports() -> None:
    code = (
        "import sys\n"
        "from hydra import compose, initialize_config_dir\n"
        "from adarl.launch import CONFIG_DIR, load_config\n"
        "with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):\n"
        f"    for preset in {list(PRESETS)!r}:\n"
        "        load_config(compose(config_name='config', overrides=['+experiment=' + preset]))\n"
        "print(sorted(m for m in ('torch', 'ray', 'vllm', 'deepspeed', 'transformers') "
        "if m in sys.modules))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


@pytest.mark.slow
@pytest.mark.parametrize("preset", PRESETS)
def test_cfg_job_shows_the_preset(preset: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "adarl.launch", f"+experiment={preset}", "--cfg", "job"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert f"name: {preset}" in proc.stdout
    assert "max_new_tokens: 2048" in proc.stdout and "learning_rate: 1.0e-06" in proc.stdout


def test_readme_old_cluster_command_is_refused_naming_every_key() -> None:
    with pytest.raises(ValueError) as info:
        _compose(*README_OLD_COMMAND)
    message = str(info.value)
    for key in (
        "rollout.max_new_tokens=16",
        "rollout.max_model_len=256",
        "eval.max_new_tokens=8",
        "rollout.dtype=float32",
        "rollout.kv_cache_memory_bytes=268435456",
        "learner.learning_rate=0.0003",
    ):
        assert key in message, message
    assert "rollout.dtype=bfloat16" in message and "qwen2_5_math_1_5b" in message


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        (["rollout.max_new_tokens=16"], "rollout.max_new_tokens=16"),
        (
            ["rollout.max_model_len=256", "rollout.max_new_tokens=128", "eval.max_new_tokens=128"],
            "rollout.max_model_len=256",
        ),
        (["eval.max_new_tokens=8"], "eval.max_new_tokens=8"),
        (["rollout.dtype=float32"], "rollout.dtype=float32"),
        (["rollout.kv_cache_memory_bytes=268435456"], "rollout.kv_cache_memory_bytes"),
        (["learner.learning_rate=3e-4"], "learner.learning_rate=0.0003"),
    ],
)
def test_each_tiny_default_alone_is_refused(overrides: list[str], key: str) -> None:
    with pytest.raises(ValueError, match="tiny model's defaults") as info:
        _compose("+experiment=qwen2_5_math_1_5b_grpo", *overrides)
    message = str(info.value)
    assert key in message
    assert message.count("\n  - ") == 1  # that key alone


def test_cpu_real_model_may_stay_fp32_and_builtins_keep_their_lengths() -> None:
    """float32 is the right engine dtype on CPU; the checks concern models that are not
    built-in (the built-ins' own lengths are validated against their positions)."""
    cpu = _compose(
        "+experiment=qwen2_5_math_1_5b_grpo",
        "rollout.dtype=float32",
        "learner.precision=fp32",
        "cluster.gpus_per_engine=0",
        "cluster.gpus_per_learner=0",
    )
    assert cpu.rollout.dtype == "float32"
    assert _compose("+experiment=grpo").rollout.max_new_tokens == 16  # the tiny model's
    mid = _compose("+experiment=grpo", "model.name_or_path=adarl/mid-math")
    assert mid.model.builtin_max_positions == 4096
    with pytest.raises(ValueError, match="exceeds the built-in model's max_position_embeddings"):
        _compose(
            "+experiment=grpo", "model.name_or_path=adarl/mid-math", "rollout.max_model_len=8192"
        )


def test_tensor_parallelism_needs_vllm_and_as_many_gpus_per_engine() -> None:
    config = _compose(
        "+experiment=qwen2_5_math_1_5b_grpo",
        "rollout.tensor_parallel_size=2",
        "cluster.gpus_per_engine=2",
    )
    assert config.rollout.tensor_parallel_size == 2
    with pytest.raises(ValueError, match=re.escape("set cluster.gpus_per_engine=2")):
        _compose("+experiment=qwen2_5_math_1_5b_grpo", "rollout.tensor_parallel_size=2")
    with pytest.raises(ValueError, match=re.escape("set rollout.engine=vllm")):
        _compose(
            "+experiment=qwen2_5_math_1_5b_grpo",
            "rollout=hf",
            "rollout.tensor_parallel_size=2",
            "cluster.gpus_per_engine=2",
        )


def test_system_prompt_needs_the_chat_template() -> None:
    with pytest.raises(
        ValueError, match=re.escape("task.system_prompt needs task.chat_template=true")
    ):
        _compose("+experiment=qwen2_5_math_1_5b_grpo", "task.chat_template=false")


def test_eval_length_must_leave_room_for_a_prompt() -> None:
    with pytest.raises(ValueError, match=re.escape("lower eval.max_new_tokens or raise")):
        _compose("+experiment=qwen2_5_math_1_5b_grpo", "eval.max_new_tokens=3072")


def test_a_local_model_path_that_does_not_exist_is_named_first(tmp_path: Path) -> None:
    missing = tmp_path / "no_such_model"
    with pytest.raises(ValueError, match="tiny model's defaults") as info:
        _compose(f"model.name_or_path={missing}")
    first = str(info.value).split("\n  - ")[1]
    assert first.startswith(f"model.name_or_path={missing} does not exist on this machine")
    # A hub name is not a path: nothing said about it (the launcher's load names it if absent).
    with pytest.raises(ValueError) as info:
        _compose("model.name_or_path=Qwen/Qwen2.5-Math-1.5B")
    assert "does not exist" not in str(info.value)
