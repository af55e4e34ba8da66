"""The tiny model's task warm start on reasoning-gym generators, one check per line: how held-aside
accuracy moves against the best constant answer and the guesser, with steps, CPU and wall time.

    .venv/bin/python tools/warm_start_survey.py gcd count_bits 'aiw:{"task_types": ["sibling"]}' \\
        --hidden 128 --layers 2 --learning-rate 1e-3 --steps 2000 --cpu-minutes 6

Each task's data, vocabulary and probe are the ones a run builds
(`adarl.models.loading.task_warm_start`, the reasoning_gym preset's lengths); the warm start is
`warm_start_until_above_prior` with its stop rule off (it runs to the budget, so the trajectory is
whole) for the steps that `--cpu-minutes` buy by the cost model (`predicted_step_seconds`; the
wall clock of a shared machine is capped apart, `--minutes`), and the first check where the rule
would have stopped is reported from the records. At the end the policy is probed on the held-out
prompts too (same sampler, exact match), to compare the held-aside estimate with what the run's
base evaluation will see. Nothing is cached. One JSON line
per check (`"kind": "check"`) and per task (`"kind": "task"`) goes to --out.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import math
import time
from pathlib import Path

import numpy as np
import torch

from adarl.config import AdarlConfig
from adarl.models import loading, tiny
from adarl.models.task_warm_start import (
    CHECK_EVERY_STEPS,
    PROBE_SAMPLES,
    Lead,
    clearly_above,
    probe_baselines,
    probe_hits,
    task_step_budget,
    warm_start_until_above_prior,
)


def survey(name: str, generator: dict, args: argparse.Namespace) -> list[dict]:
    config = AdarlConfig()
    config.task.source = "reasoning_gym"
    config.task.reasoning_gym.name = name
    config.task.reasoning_gym.config = generator
    # As conf/task/reasoning_gym.yaml sets them.
    config.model.tiny.max_position_embeddings = config.rollout.max_model_len = 384
    config.rollout.max_new_tokens = config.eval.max_new_tokens = 16
    tiny_config = dataclasses.replace(
        config.model.tiny,
        hidden_size=args.hidden,
        intermediate_size=args.intermediate or 3 * args.hidden,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads,
        sft_batch_size=args.batch,
        sft_learning_rate=args.learning_rate,
    )
    config.model.tiny = tiny_config
    loading.policy_tokenizer(config)  # refuses a task that does not fit, as a run does
    data, tokenizer = loading.task_warm_start(tiny_config, config.task)
    _, test = loading.task_splits(config.task)
    model = tiny.build_tiny_qwen2(tiny_config, tokenizer)
    baselines = probe_baselines(data)
    steps = task_step_budget(
        model, data, max_steps=args.steps, max_minutes=args.cpu_minutes, batch_size=args.batch
    )
    stats = warm_start_until_above_prior(
        model,
        tokenizer,
        data,
        min_lead=math.inf,  # never stops: the whole trajectory
        min_lead_in_se=0.0,
        max_steps=steps,
        max_minutes=args.minutes,
        check_every_steps=CHECK_EVERY_STEPS,
        batch_size=args.batch,
        learning_rate=args.learning_rate,
        weight_decay=tiny_config.sft_weight_decay,
        seed=tiny_config.sft_seed,
    )
    common = {
        "task": name,
        "generator": generator,
        "hidden": args.hidden,
        "layers": args.layers,
        "batch": args.batch,
        "lr": args.learning_rate,
    }
    rows = []
    stop_at = None
    for check in stats.checks:
        over_constant = Lead(check.lead_over_constant, check.lead_over_constant_se)
        over_guess = Lead(check.lead_over_guesser, check.lead_over_guesser_se)
        rule = {"min_lead": args.lead, "min_lead_in_se": args.lead_se}
        clear = clearly_above(over_constant, **rule) and clearly_above(over_guess, **rule)
        if clear and stop_at is None:
            stop_at = check.step
        rows.append({"kind": "check", **common, **dataclasses.asdict(check), "clear": clear})
    prompts = [(e.prompt + config.task.instruction_suffix, e.answer) for e in test]
    held_out = probe_hits(model, tokenizer, prompts, seed=12345)
    test_constant = float(np.mean([e.answer == baselines.best_constant_answer for e in test]))
    rows.append(
        {
            "kind": "task",
            **common,
            "parameters": sum(p.numel() for p in model.parameters()),
            "pairs": len(data.pairs),
            "prompt_chars": round(float(np.mean([len(p) for p, _ in data.pairs])), 1),
            "batch_tokens": data.batch_tokens(args.batch),
            "steps": stats.steps,
            "step_budget": stats.step_budget,
            "stopped_by": stats.stopped_by,
            "cpu_seconds": round(stats.cpu_seconds, 1),
            "wall_seconds": round(stats.seconds, 1),
            "cpu_ms_per_step": round(1000 * stats.cpu_seconds / max(1, stats.steps), 1),
            "best_constant_answer": baselines.best_constant_answer,
            "probe_constant": baselines.best_constant_accuracy,
            "probe_guess": baselines.guesser_accuracy,
            "probe_final": stats.held_aside_accuracy,
            "probe_best": max(c.accuracy for c in stats.checks),
            "rule_stops_at": stop_at,
            "held_out_final": float(np.mean(held_out)) / PROBE_SAMPLES,
            "held_out_constant": test_constant,
            "final_loss": round(stats.final_loss, 4),
        }
    )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tasks", nargs="+", help='NAME or NAME:{"key": value, ...}')
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--intermediate", type=int, default=0, help="default: 3 x hidden")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--kv-heads", type=int, default=2)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument(
        "--cpu-minutes", type=float, default=4.0, help="the step budget, as the cost model sees it"
    )
    parser.add_argument("--minutes", type=float, default=60.0, help="wall-clock cap per task")
    parser.add_argument("--lead", type=float, default=0.05, help="the rule's absolute lead")
    parser.add_argument("--lead-se", type=float, default=3.0, help="the rule's lead in SE")
    parser.add_argument("--out", type=Path, default=None, help="append JSON lines here")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", force=True)
    torch.set_num_threads(1)
    for spec in args.tasks:
        name, _, raw = spec.partition(":")
        start = time.perf_counter()
        rows = survey(name, json.loads(raw or "{}"), args)
        for row in rows:
            line = json.dumps(row)
            if row["kind"] == "check":
                print(
                    f"{name:22s} step {row['step']:5d} {row['seconds']:7.1f}s "
                    f"cpu {row['cpu_seconds']:6.1f}s "
                    f"acc {100 * row['accuracy']:5.1f}% "
                    f"lead/const {100 * row['lead_over_constant']:+5.1f} "
                    f"({row['lead_over_constant_se'] * 100:.1f}) "
                    f"lead/guess {100 * row['lead_over_guesser']:+5.1f} "
                    f"({row['lead_over_guesser_se'] * 100:.1f}){' CLEAR' if row['clear'] else ''}",
                    flush=True,
                )
            else:
                print(line, flush=True)
            if args.out is not None:
                with args.out.open("a") as handle:
                    handle.write(line + "\n")
        print(f"# {name}: {time.perf_counter() - start:.0f} s", flush=True)


if __name__ == "__main__":
    main()
