"""`python -m adarl.bench dro`: does R3 track the exact verifier on the built-in task, what does the
variance filter drop, and what does the scoring pass cost.

On the arithmetic test split, the warm-started tiny policy (one or more `--sft-steps` levels)
samples `--samples` responses per prompt at temperature 1 through a real `RolloutPool` (HF or vLLM
engine, in this process); the exact verifier scores them; then the R3 stage (adarl/reward/r3.py,
the code training runs) rescores every pool with one `RolloutPool.score` pass per template:

* correlation of R3 with the exact reward, pooled over every rollout and within prompts (the mean
  over prompts with mixed exact outcomes: what group-normalised advantages see), for each
  template, certainty and weight shape (the R3 stage's own `signal/r3_verifier_correlation*`);
* the variance filter's view of the base policy at the defaults (dro.filter: lowest 20% by
  max-deviation, top-10 certificate): the fraction each rule drops and the exact pass rates of the
  prompts it drops versus keeps;
* the scoring pass's wall time next to the generation it follows.

Prints markdown; `--json PATH` also writes the numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

ScoreFn = Callable[..., list[list[float]]]


@dataclass(frozen=True)
class Correlation:
    template: str
    certainty: str
    shape: str
    contrast: bool
    pooled: float | None
    within: float | None
    prompts_mixed: int


@dataclass(frozen=True)
class FilterView:
    prompts: int
    reach_top_k: float  # fraction of prompts some rollout brings within the top k
    dropped_by_deviation: float  # fraction in the lowest drop_fraction by max deviation
    dropped: float  # fraction dropped by either rule
    pass_rate_dropped: float  # mean exact pass rate of the dropped prompts
    pass_rate_kept: float
    mixed_dropped: float  # fraction of dropped prompts with mixed exact outcomes
    mixed_kept: float
    max_deviation_quantiles: tuple[float, float, float]  # q10, q50, q90


@dataclass(frozen=True)
class Level:
    sft_steps: int
    engine: str
    prompts: int
    samples: int
    exact_mean: float
    generate_s: float
    score_s: dict[str, float]  # template -> wall time of its scoring pass
    scored_pairs: int
    correlations: list[Correlation]
    filter: FilterView


class CachedScore:
    """The pool's scoring call, run once per distinct batch; times the real calls."""

    def __init__(self, score: ScoreFn) -> None:
        self.score = score
        self.cache: dict[tuple[Any, ...], list[list[float]]] = {}
        self.seconds: list[float] = []

    def __call__(self, prompts, responses, *, temperature: float = 1.0) -> list[list[float]]:
        key = (tuple(map(tuple, prompts)), tuple(map(tuple, responses)), temperature)
        if key not in self.cache:
            start = time.perf_counter()
            self.cache[key] = self.score(prompts, responses, temperature=temperature)
            self.seconds.append(time.perf_counter() - start)
        return self.cache[key]


def _engine(kind: str, model_path: str) -> Any:
    if kind == "vllm":
        from adarl.rollout.vllm_engine import VLLMEngine

        return VLLMEngine(model_path=model_path, seed=0, max_model_len=64)
    from adarl.rollout.hf_engine import HFEngine

    return HFEngine(model_path=model_path, max_model_len=64)


def measure_level(
    *, sft_steps: int, engine: str, prompts: int, samples: int, seed: int, cache_dir: str | None
) -> Level:
    from adarl.config.dro import DroFilterConfig
    from adarl.config.model import TINY_ARITHMETIC, TinyModelConfig
    from adarl.models.loading import load_tokenizer, resolve_model_path
    from adarl.reward.arithmetic_reflection import ArithmeticRestatement
    from adarl.reward.exact import ExactMatchVerifier
    from adarl.reward.r3 import AnswerMarkerTemplate, R3PoolReward
    from adarl.rollout.codec import PromptCodec
    from adarl.rollout.pool import RolloutPool
    from adarl.tasks.arithmetic import arithmetic_test_split
    from adarl.types import FinishedPool, PromptRequest, SamplingParams, ScoredRollout

    path = resolve_model_path(
        TINY_ARITHMETIC, cache_dir=cache_dir, tiny=TinyModelConfig(sft_steps=sft_steps)
    )
    tokenizer = load_tokenizer(path)
    codec = PromptCodec(
        tokenizer=tokenizer,
        sampling=SamplingParams(max_new_tokens=8, stop_token_ids=(tokenizer.eos_token_id,)),
    )
    examples = arithmetic_test_split(prompts)
    verifier = ExactMatchVerifier()
    requests = [
        PromptRequest(
            request_id=f"dro-{i}", example=e, num_samples=samples, step=0, seed=seed * 7919 + i
        )
        for i, e in enumerate(examples)
    ]
    sent = [codec.generation_request(r) for r in requests]
    with RolloutPool.in_process([_engine(engine, path)]) as pool:
        start = time.perf_counter()
        results = pool.generate(sent)
        generate_s = time.perf_counter() - start
        pools = []
        for request, generation, result in zip(requests, sent, results, strict=True):
            scored = tuple(
                ScoredRollout(
                    rollout=r,
                    reward=verifier.verify(r.completion.text, request.example).reward,
                )
                for r in PromptCodec.rollouts(request, generation, result)
            )
            pools.append(
                FinishedPool(
                    prompt_id=request.example.prompt_id, example=request.example, rollouts=scored
                )
            )
        exact = np.array([[s.reward for s in p.rollouts] for p in pools])  # [P, N]
        score = CachedScore(pool.score)
        templates = {
            "arithmetic_restatement": ArithmeticRestatement(tokenizer=tokenizer),
            "answer_marker '='": AnswerMarkerTemplate(tokenizer=tokenizer, marker="="),
        }
        correlations = []
        score_s: dict[str, float] = {}
        for name, template in templates.items():
            grid = [("prob", "power", {"weight_power": 1.0}, False)]
            if name == "arithmetic_restatement":
                grid += [
                    ("prob", "power", {"weight_power": 1.0}, True),
                    ("prob", "power", {"weight_power": 2.0}, False),
                    ("prob", "softmax", {"weight_temperature": 0.1}, False),
                    ("prob", "uniform", {}, False),
                    ("logprob", "power", {"weight_power": 1.0}, False),
                    ("logprob", "uniform", {}, False),
                ]
            for certainty, shape, kwargs, contrast in grid:
                stage = R3PoolReward(
                    template=template,
                    certainty=certainty,
                    weight_shape=shape,
                    contrast=contrast,
                    **kwargs,
                )
                calls = len(score.seconds)
                stage.rescore(pools, score=score)
                if len(score.seconds) > calls and not contrast:
                    score_s[name] = score.seconds[-1]
                m = stage.metrics()
                label = shape + (f" {next(iter(kwargs.values())):g}" if kwargs else "")
                correlations.append(
                    Correlation(
                        template=name,
                        certainty=certainty,
                        shape=label,
                        contrast=contrast,
                        pooled=m.get("signal/r3_verifier_correlation"),
                        within=m.get("signal/r3_verifier_correlation_within"),
                        prompts_mixed=int(m["signal/r3_verifier_correlation_prompts"]),
                    )
                )
        view = _filter_view(
            pools, exact, templates["arithmetic_restatement"], score, DroFilterConfig()
        )
    return Level(
        sft_steps=sft_steps,
        engine=engine,
        prompts=prompts,
        samples=samples,
        exact_mean=float(exact.mean()),
        generate_s=generate_s,
        score_s=score_s,
        scored_pairs=prompts * samples,
        correlations=correlations,
        filter=view,
    )


def _filter_view(pools, exact: np.ndarray, template, score: ScoreFn, config) -> FilterView:
    """What one application of the default filter drops on these pools (the filter's own rule)."""
    from adarl.algo.dro import lowest_fraction
    from adarl.reward.r3 import R3PoolReward

    stage = R3PoolReward(template=template, top_k=config.top_k)
    rescored = stage.rescore(pools, score=score)
    ids = [p.prompt_id for p in pools]
    deviation = [rescored[i].statistics["max_deviation"] for i in ids]
    reached = np.array([rescored[i].statistics["reaches_top_k"] > 0 for i in ids])
    low = set(lowest_fraction(deviation, ids, fraction=config.drop_fraction))
    by_deviation = np.array([i in low for i in ids])
    dropped = by_deviation | ~reached
    pass_rate = exact.mean(axis=1)
    mixed = (pass_rate > 0) & (pass_rate < 1)

    def mean(values: np.ndarray, mask: np.ndarray) -> float:
        return float(values[mask].mean()) if mask.any() else float("nan")

    q10, q50, q90 = np.quantile(deviation, (0.1, 0.5, 0.9))
    return FilterView(
        prompts=len(ids),
        reach_top_k=float(reached.mean()),
        dropped_by_deviation=float(by_deviation.mean()),
        dropped=float(dropped.mean()),
        pass_rate_dropped=mean(pass_rate, dropped),
        pass_rate_kept=mean(pass_rate, ~dropped),
        mixed_dropped=mean(mixed.astype(float), dropped),
        mixed_kept=mean(mixed.astype(float), ~dropped),
        max_deviation_quantiles=(float(q10), float(q50), float(q90)),
    )


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f}"


def render(levels: Sequence[Level]) -> str:
    lines = []
    for level in levels:
        lines += [
            f"### Base policy `sft_steps={level.sft_steps}` ({level.engine} engine; exact mean "
            f"p = {level.exact_mean:.2f}; {level.prompts} test prompts × {level.samples} samples)",
            "",
            "| template | certainty | weights | contrast | r pooled | r within prompts (prompts) |",
            "|---|---|---|---|---|---|",
        ]
        for c in level.correlations:
            lines.append(
                f"| {c.template} | {c.certainty} | {c.shape} | {'yes' if c.contrast else 'no'} | "
                f"{_fmt(c.pooled)} | {_fmt(c.within)} ({c.prompts_mixed}) |"
            )
        f = level.filter
        q10, q50, q90 = f.max_deviation_quantiles
        lines += [
            "",
            f"Variance filter at the defaults, one application on these pools: max-deviation "
            f"quantiles q10/q50/q90 = {q10:.3f}/{q50:.3f}/{q90:.3f}; {100 * f.reach_top_k:.0f}% of "
            f"prompts have a rollout within the top 10; dropped {100 * f.dropped:.0f}% "
            f"({100 * f.dropped_by_deviation:.0f}% by deviation). Exact pass rate of dropped "
            f"prompts {f.pass_rate_dropped:.2f} vs kept {f.pass_rate_kept:.2f}; mixed-outcome "
            f"prompts among dropped {100 * f.mixed_dropped:.0f}% vs kept "
            f"{100 * f.mixed_kept:.0f}%.",
            "",
            "Scoring pass: "
            + ", ".join(f"{name} {seconds:.2f} s" for name, seconds in level.score_s.items())
            + f" for {level.scored_pairs} pairs, after {level.generate_s:.2f} s of generating "
            "them.",
            "",
        ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m adarl.bench dro", description=__doc__)
    parser.add_argument("--engine", choices=("hf", "vllm"), default="hf")
    parser.add_argument("--prompts", type=int, default=256)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--sft-steps", type=int, nargs="+", default=[300, 800])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cache-dir", default=None, help="built-in model cache (default ~/.cache)")
    parser.add_argument("--json", default=None, help="also write the numbers here")
    args = parser.parse_args(argv)
    if args.prompts < 1 or args.samples < 2:
        parser.error("--prompts must be >= 1 and --samples >= 2 (a deviation needs two rollouts)")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(1)
    levels = [
        measure_level(
            sft_steps=steps,
            engine=args.engine,
            prompts=args.prompts,
            samples=args.samples,
            seed=args.seed,
            cache_dir=args.cache_dir,
        )
        for steps in args.sft_steps
    ]
    print(render(levels))
    if args.json:
        with open(args.json, "w") as handle:
            json.dump([asdict(level) for level in levels], handle, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
