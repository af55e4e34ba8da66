"""python -m adarl.bench.tasks NAME[:CONFIG_JSON] ...: the embedded tiny policy on reasoning-gym
generators, one row per task, for choosing tasks whose base pass rates spread between 0 and 1.

Each task is built as `make run ARGS="task=reasoning_gym task.reasoning_gym.name=NAME"` builds it
(the preset's lengths, the embedded default's `model.tiny.sft_steps=300`, the task warm start of
adarl/models/task_warm_start.py, cached in $ADARL_CACHE_DIR like a run's), then its held-out
prompts are sampled `--samples` times each at temperature 1 with transformers' `generate` and
scored by the task's verifier. Columns: answer length, vocabulary size, warm-start steps and
minutes, base pass@1 at T = 1, the share of held-out prompts with no correct sample (p = 0), and
the best constant answer's held-out accuracy (adarl/tasks/baselines.py). One JSON line per task.
"""

from __future__ import annotations

import argparse
import json
import time

import torch


def measure(name: str, generator_config: dict, *, samples: int, seed: int) -> dict:
    from transformers import AutoModelForCausalLM

    from adarl.config import AdarlConfig
    from adarl.models.loading import policy_tokenizer, resolve_model_config, task_splits
    from adarl.models.tiny import read_build_info
    from adarl.reward.registry import build_verifier
    from adarl.tasks.baselines import best_constant_answer

    config = AdarlConfig()
    config.task.source = "reasoning_gym"
    config.task.reasoning_gym.name = name
    config.task.reasoning_gym.config = generator_config
    # As conf/model/tiny_arithmetic.yaml and conf/task/reasoning_gym.yaml set them.
    config.model.tiny.sft_steps = 300
    config.model.tiny.max_position_embeddings = config.rollout.max_model_len = 384
    config.rollout.max_new_tokens = config.eval.max_new_tokens = 16
    tokenizer = policy_tokenizer(config)
    path = resolve_model_config(config.model, task=config.task)
    info = (read_build_info(path) or {})["warm_start"]
    train, test = task_splits(config.task)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    verifier = build_verifier("reasoning_gym")
    torch.manual_seed(seed)
    rates = []
    for example in test:
        ids = tokenizer(example.prompt)["input_ids"]
        with torch.no_grad():
            out = model.generate(
                input_ids=torch.tensor([ids] * samples),
                attention_mask=torch.ones(samples, len(ids), dtype=torch.long),
                do_sample=True,
                temperature=1.0,
                top_k=0,
                top_p=1.0,
                max_new_tokens=config.eval.max_new_tokens,
                eos_token_id=tokenizer.eos_token_id,
                pad_token_id=tokenizer.pad_token_id,
            )
        texts = [
            tokenizer.decode(row[len(ids) :], skip_special_tokens=True) for row in out.tolist()
        ]
        rates.append(sum(verifier.verify(t, example).reward for t in texts) / samples)
    constant = best_constant_answer(train, test, verifier)
    return {
        "task": name,
        "config": generator_config,
        "train_prompts": len(train),
        "test_prompts": len(test),
        "answer_chars_max": max(len(e.answer) for e in (*train, *test)),
        "prompt_chars_mean": round(sum(len(e.prompt) for e in train) / len(train)),
        "vocab": len(tokenizer),
        "warm_start_steps": info["steps"],
        "warm_start_minutes": round(info["seconds"] / 60, 2),
        "warm_start_stopped_by": info["stopped_by"],
        "probe_pass_rate": info["held_aside_accuracy"],
        "base_pass1": sum(rates) / len(rates),
        "base_p0_share": sum(r == 0 for r in rates) / len(rates),
        "best_constant": constant.answer,
        "best_constant_accuracy": constant.accuracy,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tasks", nargs="+", help='NAME or NAME:{"key": value, ...}')
    parser.add_argument("--samples", type=int, default=8, help="samples per held-out prompt")
    parser.add_argument("--seed", type=int, default=123)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    for spec in args.tasks:
        name, _, raw = spec.partition(":")
        start = time.perf_counter()
        row = measure(name, json.loads(raw or "{}"), samples=args.samples, seed=args.seed)
        row["wall_s"] = round(time.perf_counter() - start, 1)
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
