"""`python -m adarl.bench sampler`: what streaming sequential sampling costs in rollouts and time.

Every number comes from the driver's own rollout phase, `adarl.driver.collect_groups`, with the
real `BudgetAllocator`, samplers, group builder and `RewardPool`:

* **simulated** (the claim about GPU clusters): outcomes from the scripted `FakeEngine` (known pass
  rates, drawn from `PassRateMix`), time from `adarl.rollout.simulated.SimulatedRolloutPool`'s
  continuous-batching latency model (its docstring states the model);
* **real engine** (this machine): the vLLM engine (CPU build) or the HF engine on the built-in tiny
  model, the arithmetic task's training prompts, wall-clock time.

Reported: rollout-phase wall time against the reference rounds and against uniform sampling of
about as many rollouts; samples drawn per prompt by pass-rate bin against the one-at-a-time rule's
exact E[T'] (`adarl.algo.gate.terminal_counts`); samples drawn but not trained (discarded); the
Pareto front of `sequential.max_overshoot_fraction`: samples drawn against wall time; and, across
step boundaries (`rollout.cross_step_allocation`), consecutive steps through the driver's
`RolloutStream` one at a time against the next 1 or 2 steps open while a step samples.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from adarl.algo.gate import terminal_counts
from adarl.allocator import build_allocator
from adarl.allocator.allocator import BudgetAllocator
from adarl.allocator.build import allocator_kwargs
from adarl.allocator.metrics import is_mixed
from adarl.bench.bandit import NoPrompts
from adarl.config.allocator import AllocatorConfig, GroupConfig, SequentialConfig
from adarl.driver import RolloutPhase, RolloutPoolLike, RolloutStream, collect_groups
from adarl.models.tokenizer import build_char_tokenizer
from adarl.reward.exact import ExactMatchVerifier
from adarl.reward.pool import RewardPool
from adarl.rollout.codec import PromptCodec
from adarl.rollout.fake import FakeEngine, FakePrompt
from adarl.rollout.simulated import LatencyModel, SimulatedRolloutPool
from adarl.types import Completion, GenerationRequest, SamplingParams, TaskExample

CAP = 32  # per-prompt cap of the streaming sampler: the reference rounds' 8 × 4
K = 2  # Seq-Balance(2, 2), trained n = 4
P_BINS = ((0.0, 0.0), (0.0, 0.1), (0.1, 0.35), (0.35, 0.65), (0.65, 0.9), (0.9, 1.0), (1.0, 1.0))


@dataclass(frozen=True)
class PassRateMix:
    """Pass-rate distribution of the simulated prompts (shares sum to 1).

    Shaped like the reasoning data sets the seeds describe: many prompts a small model never or
    always solves, a band in between, a tail of rarely solved ones.
    """

    never: float = 0.15  # p = 0
    rare: float = 0.10  # p ~ U(0.01, 0.1)
    middle: float = 0.45  # p ~ U(0.1, 0.9)
    easy: float = 0.15  # p ~ U(0.9, 0.99)
    always: float = 0.15  # p = 1

    def draw(self, rng: random.Random) -> float:
        u = rng.random()
        for share, low, high in (
            (self.never, 0.0, 0.0),
            (self.rare, 0.01, 0.1),
            (self.middle, 0.1, 0.9),
            (self.easy, 0.9, 0.99),
            (self.always, 1.0, 1.0),
        ):
            if u < share:
                return rng.uniform(low, high)
            u -= share
        return 1.0


def _bin_label(low: float, high: float) -> str:
    return f"{low:g}" if low == high else f"({low:g}, {high:g})"


def p_bin(p: float) -> str:
    """The `P_BINS` label of a true pass rate: exact 0 and 1 alone, open intervals between."""
    for low, high in P_BINS:
        if low == high == p or low < p < high or (high < 1.0 and p == high and low != high):
            return _bin_label(low, high)
    raise AssertionError(f"pass rate {p} fell outside every bin")


@dataclass
class FakeWorld:
    """Prompts with scripted pass rates, served by the `FakeEngine`."""

    examples: list[TaskExample]
    pass_rates: dict[str, float]
    engine: FakeEngine
    codec: PromptCodec
    answers: dict[str, str]  # prompt text -> correct answer

    def is_correct(self, request: GenerationRequest, completion: Completion) -> bool:
        prompt = self.codec.tokenizer.decode(
            list(request.prompt_token_ids), skip_special_tokens=True
        )
        return completion.text == self.answers[prompt]


def fake_world(num_prompts: int, seed: int) -> FakeWorld:
    rng = random.Random(f"bench-sampler/{seed}")
    mix = PassRateMix()
    examples, script, rates = [], {}, {}
    for i in range(num_prompts):
        a, b = rng.randrange(100, 1000), rng.randrange(100, 1000)
        # Fresh ids per world: an allocator shared across steps must not take one world's
        # prompt for another's (its history would carry over).
        example = TaskExample(
            prompt_id=f"w{seed}q{i}", prompt=f"{a}+{b}=", answer=str(a + b), task="arithmetic"
        )
        examples.append(example)
        rates[example.prompt_id] = mix.draw(rng)
        script[example.prompt] = FakePrompt(
            pass_rate=rates[example.prompt_id], answer=example.answer
        )
    codec = PromptCodec(tokenizer=build_char_tokenizer(), sampling=SamplingParams(max_new_tokens=8))
    engine = FakeEngine(tokenizer=codec.tokenizer, script=script, seed=seed)
    answers = {prompt: entry.answer for prompt, entry in script.items()}
    return FakeWorld(examples, rates, engine, codec, answers)


class _DrawCounter:
    """A rollout pool wrapper that counts each prompt's draws (its sequential waits)."""

    def __init__(self, pool: RolloutPoolLike) -> None:
        self.pool = pool
        self.draws: dict[str, int] = defaultdict(int)

    def submit(self, requests: Sequence[GenerationRequest]) -> None:
        for request in requests:  # ids are "<step>:<prompt id>:<draw index>" (the allocator's)
            self.draws[request.request_id.split(":")[1]] += 1
        self.pool.submit(requests)

    def drain_completed(self):
        return self.pool.drain_completed()

    def generate(self, requests):
        return self.pool.generate(requests)

    def metrics(self) -> dict[str, float]:
        return self.pool.metrics()


@dataclass
class PhaseOutcome:
    wall_s: float
    utilisation: float
    rollouts: int
    groups: int
    mixed_groups: int
    discarded: int  # samples drawn but not trained
    drawn: dict[str, int] = field(default_factory=dict)  # per prompt
    draws: dict[str, int] = field(default_factory=dict)  # per prompt


def run_phase(
    config: AllocatorConfig,
    *,
    step: int,
    examples: Sequence[TaskExample],
    pool: RolloutPoolLike,
    codec: PromptCodec,
    clock,
    allocator=None,
) -> PhaseOutcome:
    """One rollout phase of `config`'s allocator through `collect_groups`."""
    allocator = allocator if allocator is not None else build_allocator(config)
    counter = _DrawCounter(pool)
    with RewardPool(verifiers={"arithmetic": ExactMatchVerifier()}, num_workers=2) as rewards:
        phase: RolloutPhase = collect_groups(
            step,
            examples,
            allocator=allocator,
            rollout=counter,
            rewards=rewards,
            prompts=NoPrompts(),
            codec=codec,
            clock=clock,
        )
    groups = phase.result.groups
    return PhaseOutcome(
        wall_s=phase.wall_s,
        utilisation=phase.metrics.get("perf/rollout_engine_utilisation", math.nan),
        rollouts=phase.rollouts,
        groups=len(groups),
        mixed_groups=sum(is_mixed(g) for g in groups),
        discarded=int(phase.result.metrics["sampling/discarded_samples"]),
        drawn={g.prompt_id: g.pool_size for g in groups},
        draws=dict(counter.draws),
    )


def sampler_configs(
    *, prompts: int, uniform_n: int, overshoot: float
) -> dict[str, AllocatorConfig]:
    """The compared allocators: n = 4 trained per prompt, Seq-Balance(2, 2), cap 32."""
    seq = {"k_pos": K, "k_neg": K}
    return {
        "streaming": AllocatorConfig(
            sampler="seq_balance",
            prompts_per_step=prompts,
            max_samples_per_prompt=CAP,
            sequential=SequentialConfig(max_overshoot_fraction=overshoot, **seq),
            group=GroupConfig(group_size=4, correction="selection"),
        ),
        "rounds": AllocatorConfig(
            sampler="seq_balance",
            prompts_per_step=prompts,
            sequential=SequentialConfig(mode="rounds", round_repeat=8, max_rounds=4, **seq),
            group=GroupConfig(group_size=4, downsample_order="earliest", pass_rate_estimate="pool"),
        ),
        "uniform_same_rollouts": AllocatorConfig(
            sampler="uniform",
            prompts_per_step=prompts,
            uniform_samples_per_prompt=uniform_n,
            group=GroupConfig(group_size=4, advantage="grpo"),
        ),
        "uniform_n4": AllocatorConfig(
            sampler="uniform",
            prompts_per_step=prompts,
            uniform_samples_per_prompt=4,
            group=GroupConfig(group_size=4, advantage="grpo"),
        ),
    }


LABELS = {
    "streaming": "Seq-Balance(2, 2), streaming, ε = {eps:g}",
    "rounds": "Seq-Balance(2, 2), reference rounds (8 × 4)",
    "uniform_same_rollouts": "uniform n = {n} (≈ same rollouts as streaming)",
    "uniform_n4": "uniform n = 4 (GRPO, same kept groups)",
}


@dataclass
class Comparison:
    """Every sampler on the same steps of prompts."""

    outcomes: dict[str, list[PhaseOutcome]]
    uniform_n: int
    overshoot: float
    engines: int
    slots: int
    pass_rates: dict[str, float] = field(default_factory=dict)  # simulated: prompt -> p

    def mean(self, name: str, attr: str) -> float:
        return statistics.mean(getattr(o, attr) for o in self.outcomes[name])

    def ratios(self) -> tuple[float, float]:
        """(streaming / uniform at the same rollouts, rounds / streaming) wall times."""
        streaming = self.mean("streaming", "wall_s")
        return (
            streaming / self.mean("uniform_same_rollouts", "wall_s"),
            self.mean("rounds", "wall_s") / streaming,
        )


def simulated_comparison(
    *, prompts: int, steps: int, seed: int, latency: LatencyModel, overshoot: float
) -> Comparison:
    """Every sampler on the same `steps` batches of fake prompts, in simulated time. Uniform "at
    the same rollouts" draws round(R / prompts) per prompt, R streaming's mean rollouts."""
    worlds = [fake_world(prompts, seed + s) for s in range(steps)]

    def run(config: AllocatorConfig) -> list[PhaseOutcome]:
        allocator = build_allocator(config)  # one allocator across steps, like a run
        out = []
        for step, world in enumerate(worlds):
            pool = SimulatedRolloutPool(
                engine=world.engine, latency=latency, is_correct=world.is_correct, seed=seed
            )
            out.append(
                run_phase(
                    config,
                    step=step,
                    examples=world.examples,
                    pool=pool,
                    codec=world.codec,
                    clock=pool.now,
                    allocator=allocator,
                )
            )
        return out

    configs = sampler_configs(prompts=prompts, uniform_n=4, overshoot=overshoot)
    outcomes = {"streaming": run(configs["streaming"])}
    uniform_n = max(1, round(statistics.mean(o.rollouts for o in outcomes["streaming"]) / prompts))
    configs = sampler_configs(prompts=prompts, uniform_n=uniform_n, overshoot=overshoot)
    for name in ("rounds", "uniform_same_rollouts", "uniform_n4"):
        outcomes[name] = run(configs[name])
    rates = {f"{s}/{pid}": p for s, w in enumerate(worlds) for pid, p in w.pass_rates.items()}
    return Comparison(
        outcomes, uniform_n, overshoot, latency.engines, latency.slots, pass_rates=rates
    )


@dataclass
class StepsOutcome:
    """Consecutive steps of one sampler on one pool: their total time, phase by phase."""

    total_s: float
    rollouts: int
    mixed_groups: int
    utilisation: float  # busy slot-seconds / (slots × total time)
    phases: list[RolloutPhase] = field(default_factory=list)
    most_open: int = 1  # steps open at once, at most

    def per_step_s(self, steps: int) -> float:
        return self.total_s / steps


@dataclass
class OverlapComparison:
    """Streaming and uniform (same rollouts), one step at a time (ahead 0) and with the next 1
    or 2 steps open while a step samples."""

    outcomes: dict[tuple[str, int], StepsOutcome]  # (sampler, steps open ahead) -> outcome
    steps: int
    prompts: int
    uniform_n: int
    overshoot: float
    depths: tuple[int, ...]

    def per_step(self, name: str, ahead: int) -> float:
        return self.outcomes[(name, ahead)].per_step_s(self.steps)


def run_steps(
    config: AllocatorConfig,
    batches: Sequence[Sequence[TaskExample]],
    *,
    world: FakeWorld,
    latency: LatencyModel,
    seed: int,
    overlapped: bool,
    ahead: int = 1,
) -> StepsOutcome:
    """`batches` as consecutive steps through one `RolloutStream` on one simulated pool, the
    driver's cross-step schedule with learners that take no time (`Driver.step_opener` at k =
    1): while step t is waited for, step t+1 is open (`overlapped`); otherwise each step opens
    when the one before finished (`collect_groups`, step after step)."""
    pool = SimulatedRolloutPool(
        engine=world.engine, latency=latency, is_correct=world.is_correct, seed=seed
    )
    allocator = BudgetAllocator(
        **{**allocator_kwargs(config.plan()), "max_open_steps": ahead + 1 if overlapped else 1}
    )
    opened: set[int] = set()
    phases: list[RolloutPhase] = []
    most_open = 1
    with RewardPool(verifiers={"arithmetic": ExactMatchVerifier()}, num_workers=2) as rewards:
        stream = RolloutStream(
            allocator=allocator,
            rollout=pool,
            rewards=rewards,
            prompts=NoPrompts(),
            codec=world.codec,
            clock=pool.now,
        )

        def opener(step: int):
            def open_next():
                coming = max(opened) + 1
                if not overlapped or coming > step + ahead or coming >= len(batches):
                    return None
                nonlocal most_open
                opened.add(coming)
                most_open = max(most_open, len(stream.open_steps()) + 1)
                return coming, batches[coming]

            return open_next

        for step, batch in enumerate(batches):
            if step not in opened:
                opened.add(step)
                stream.open_step(step, batch)
            phases.append(stream.run_until_complete(step, opener(step)))
    total = pool.now()
    busy = pool.busy_slot_s()
    return StepsOutcome(
        total_s=total,
        rollouts=sum(p.rollouts for p in phases),
        mixed_groups=sum(is_mixed(g) for p in phases for g in p.result.groups),
        utilisation=busy / (latency.engines * latency.slots * total) if total else 0.0,
        phases=phases,
        most_open=most_open,
    )


def overlap_comparison(
    *,
    prompts: int,
    steps: int,
    seed: int,
    latency: LatencyModel,
    overshoot: float,
    depths: Sequence[int] = (1, 2),
) -> OverlapComparison:
    """Streaming Seq-Balance and uniform at about its rollouts, `steps` consecutive steps of
    `prompts` fresh prompts, one step at a time and with `depths` later steps open while a step
    samples (the driver at k = depth with learners that take no time)."""
    world = fake_world(prompts * steps, seed)
    batches = [world.examples[i * prompts : (i + 1) * prompts] for i in range(steps)]
    outcomes: dict[tuple[str, int], StepsOutcome] = {}

    def run(name: str, config: AllocatorConfig) -> None:
        for ahead in (0, *depths):
            outcomes[(name, ahead)] = run_steps(
                config,
                batches,
                world=world,
                latency=latency,
                seed=seed,
                overlapped=ahead > 0,
                ahead=max(ahead, 1),
            )

    configs = sampler_configs(prompts=prompts, uniform_n=4, overshoot=overshoot)
    run("streaming", configs["streaming"])
    uniform_n = max(1, round(outcomes[("streaming", 0)].rollouts / (prompts * steps)))
    configs = sampler_configs(prompts=prompts, uniform_n=uniform_n, overshoot=overshoot)
    run("uniform_same_rollouts", configs["uniform_same_rollouts"])
    return OverlapComparison(outcomes, steps, prompts, uniform_n, overshoot, tuple(depths))


def overlap_table(run: OverlapComparison) -> str:
    rows = [
        "| sampler | steps open while one samples | rollout wall s / step | × uniform one at a "
        "time | engine utilisation | rollouts / step | mixed kept groups / step |",
        "|---|---|---|---|---|---|---|",
    ]
    uniform_sync = run.per_step("uniform_same_rollouts", 0)
    labels = {
        "streaming": f"Seq-Balance(2, 2), streaming, ε = {run.overshoot:g}",
        "uniform_same_rollouts": f"uniform n = {run.uniform_n}",
    }
    for name, label in labels.items():
        for ahead in (0, *run.depths):
            o = run.outcomes[(name, ahead)]
            open_label = {0: "none (one step at a time)", 1: "t+1"}.get(ahead, f"t+1..t+{ahead}")
            rows.append(
                f"| {label} | {open_label} | {o.per_step_s(run.steps):.2f} | "
                f"{o.per_step_s(run.steps) / uniform_sync:.2f} | {o.utilisation:.2f} | "
                f"{o.rollouts / run.steps:.0f} | {o.mixed_groups / run.steps:.1f} |"
            )
    return "\n".join(rows)


def overlap_reading(run: OverlapComparison) -> str:
    uniform_sync = run.per_step("uniform_same_rollouts", 0)
    parts = []
    for ahead in run.depths:
        stream_x = run.per_step("streaming", ahead)
        verdict = "met" if stream_x / uniform_sync <= 1.3 else "missed"
        parts.append(
            f"with {ahead} later step{'s' if ahead > 1 else ''} open, streaming's rollout phase "
            f"takes **{stream_x / uniform_sync:.2f}×** uniform's one-step-at-a-time time (target "
            f"≤ 1.3×: {verdict}) and {stream_x / run.per_step('uniform_same_rollouts', ahead):.2f}"
            f"× uniform's own cross-step time"
        )
    alone = run.per_step("streaming", 0) / uniform_sync
    return (
        f"One step at a time streaming takes {alone:.2f}× uniform's time; " + "; ".join(parts) + "."
    )


def real_comparisons(
    *, prompts: int, steps: int, seed: int, engine: str, overshoots: Sequence[float]
) -> list[tuple[float, Comparison]]:
    """The same samplers on a real engine and the built-in tiny model, wall-clock, for each
    overshoot fraction ε in turn, on one engine (a vLLM engine left to the garbage collector
    can tear down the distributed state of the next one in the same process)."""
    import time

    from adarl.models.loading import resolve_model_path
    from adarl.rollout.pool import RolloutPool
    from adarl.tasks.arithmetic import generate_examples

    model_path = resolve_model_path("adarl/tiny-arithmetic")
    if engine == "vllm":
        from adarl.rollout.vllm_engine import VLLMEngine

        real = VLLMEngine(model_path=model_path, seed=seed, max_num_seqs=256)
    else:
        from adarl.rollout.hf_engine import HFEngine

        real = HFEngine(model_path=model_path, max_batch_sequences=256)
    tokenizer = build_char_tokenizer()
    codec = PromptCodec(
        tokenizer=tokenizer,
        sampling=SamplingParams(
            temperature=1.0, max_new_tokens=8, stop_token_ids=(tokenizer.eos_token_id,)
        ),
    )
    batches = generate_examples("train", prompts * steps, seed=seed)
    batches = [batches[i * prompts : (i + 1) * prompts] for i in range(steps)]
    results: list[tuple[float, Comparison]] = []
    with RolloutPool.in_process([real], max_samples_per_call=256) as pool:
        warm = [codec.generation_request(_warm_request(e, i)) for i, e in enumerate(batches[0])]
        pool.generate(warm)  # first calls allocate caches: not timed

        def run(config: AllocatorConfig) -> list[PhaseOutcome]:
            allocator = build_allocator(config)
            return [
                run_phase(
                    config,
                    step=step,
                    examples=batch,
                    pool=pool,
                    codec=codec,
                    clock=time.perf_counter,
                    allocator=allocator,
                )
                for step, batch in enumerate(batches)
            ]

        for overshoot in overshoots:
            outcomes: dict[str, list[PhaseOutcome]] = {}
            configs = sampler_configs(prompts=prompts, uniform_n=4, overshoot=overshoot)
            outcomes["streaming"] = run(configs["streaming"])
            mean_rollouts = statistics.mean(o.rollouts for o in outcomes["streaming"])
            uniform_n = max(1, round(mean_rollouts / prompts))
            configs = sampler_configs(prompts=prompts, uniform_n=uniform_n, overshoot=overshoot)
            for name in ("rounds", "uniform_same_rollouts", "uniform_n4"):
                outcomes[name] = run(configs[name])
            results.append((overshoot, Comparison(outcomes, uniform_n, overshoot, 1, 256)))
    return results


def _warm_request(example: TaskExample, index: int):
    from adarl.types import PromptRequest

    return PromptRequest(
        request_id=f"warm-up:{index}", example=example, num_samples=8, step=-1, seed=index
    )


# -- tables -----------------------------------------------------------------------------------


def results_table(run: Comparison) -> str:
    rows = [
        "| sampler | rollout wall s / step | engine utilisation | rollouts / step | "
        "discarded / step | mixed kept groups | rollouts per kept mixed group |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, steps in run.outcomes.items():
        mixed = sum(o.mixed_groups for o in steps)
        label = LABELS[name].format(n=run.uniform_n, eps=run.overshoot)
        rows.append(
            f"| {label} | {run.mean(name, 'wall_s'):.2f} | {run.mean(name, 'utilisation'):.2f} | "
            f"{run.mean(name, 'rollouts'):.0f} | {run.mean(name, 'discarded'):.0f} | "
            f"{run.mean(name, 'mixed_groups'):.1f} | "
            f"{sum(o.rollouts for o in steps) / mixed if mixed else math.inf:.1f} |"
        )
    return "\n".join(rows)


def per_bin(run: Comparison) -> list[tuple[str, int, float, float, float, float]]:
    """Streaming, by true pass-rate bin: (bin, prompts, drawn, one-at-a-time E[T'], waits,
    discarded share) per prompt."""
    rows: dict[str, list[tuple[int, float, int]]] = defaultdict(list)
    for step, outcome in enumerate(run.outcomes["streaming"]):
        for pid, drawn in outcome.drawn.items():
            p = run.pass_rates[f"{step}/{pid}"]
            expected = terminal_counts(p, k_pos=K, k_neg=K, max_samples=CAP).expected_samples()
            rows[p_bin(p)].append((drawn, expected, outcome.draws[pid]))
    out = []
    for label in [_bin_label(low, high) for low, high in P_BINS]:
        cells = rows.get(label, [])
        if not cells:
            continue
        drawn = statistics.mean(c[0] for c in cells)
        out.append(
            (
                label,
                len(cells),
                drawn,
                statistics.mean(c[1] for c in cells),
                statistics.mean(c[2] for c in cells),
                1.0 - min(4, drawn) / drawn,
            )
        )
    return out


def per_bin_table(run: Comparison) -> str:
    rows = [
        "| true p | prompts | samples drawn / prompt | one-at-a-time E[T'] | drawn / E[T'] | "
        "waits / prompt | share not trained |",
        "|---|---|---|---|---|---|---|",
    ]
    for label, count, drawn, expected, waits, discarded in per_bin(run):
        rows.append(
            f"| {label} | {count} | {drawn:.2f} | {expected:.2f} | {drawn / expected:.3f} | "
            f"{waits:.2f} | {discarded:.2f} |"
        )
    return "\n".join(rows)


def worst_ratio(run: Comparison) -> float:
    """The largest samples drawn / one-at-a-time E[T'] over the pass-rate bins (simulated)."""
    return max((drawn / expected for _, _, drawn, expected, _, _ in per_bin(run)), default=math.nan)


def pareto_table(front: Sequence[tuple[float, Comparison]]) -> str:
    simulated = bool(front) and bool(front[0][1].pass_rates)
    rows = [
        "| max_overshoot_fraction ε | rollouts / step | rollout wall s / step | waits / prompt "
        "(max) | mixed kept groups |"
        + (
            " rounds / streaming | streaming / uniform | worst drawn / E[T'] |" if simulated else ""
        ),
        "|---|---|---|---|---|" + ("---|---|---|" if simulated else ""),
    ]
    for eps, run in front:
        outcomes = run.outcomes["streaming"]
        waits = [w for o in outcomes for w in o.draws.values()]
        row = (
            f"| {eps:g} | {run.mean('streaming', 'rollouts'):.0f} | "
            f"{run.mean('streaming', 'wall_s'):.2f} | {statistics.mean(waits):.2f} "
            f"({max(waits)}) | {run.mean('streaming', 'mixed_groups'):.1f} |"
        )
        if simulated:
            vs_uniform, vs_rounds = run.ratios()
            row += f" {vs_rounds:.2f} | {vs_uniform:.2f} | {worst_ratio(run):.3f} |"
        rows.append(row)
    return "\n".join(rows)


def front_reading(front: Sequence[tuple[float, Comparison]]) -> str:
    """What the simulated front says about the three targets together."""
    fast = [eps for eps, run in front if run.ratios()[1] >= 1.5 and run.ratios()[0] <= 1.3]
    cheap = [eps for eps, run in front if worst_ratio(run) <= 1.15]
    both = sorted(set(fast) & set(cheap))
    if both:
        return f"ε = {both[0]:g} meets all three targets (≤ 1.15× samples, both wall-time ratios)."
    return (
        "No ε on this front meets all three targets: "
        + (
            f"ε ≤ {max(cheap):g} keeps every bin within 1.15× the one-at-a-time samples, "
            if cheap
            else ""
        )
        + (
            f"while both wall-time targets need ε ≥ {min(fast):g}. "
            if fast
            else "while no ε meets both wall-time targets. "
        )
        + "The cause is the tail of each step: a prompt near p = 0.05 or 0.95 needs 15-30 "
        "samples to show two of each label, and every sample it draws beyond the rule's stopping "
        "point is waste, so a cheap rule reaches it in several waits while the engines, their "
        "other prompts done, sit idle (utilisation above); uniform sampling pays the same "
        "rollouts in one wait, the rounds in at most four. Speculating into idle slots would cut "
        "those waits, but only by drawing samples the rule would not have drawn, which is what the "
        "1.15× target forbids. The default keeps the rollout target (rollouts are what the "
        "learning comparison charges); a cluster whose engines idle at the tail can raise ε."
    )


def sweep_table(runs: Sequence[Comparison]) -> str:
    rows = [
        "| engines × slots | streaming s | rounds s | uniform (same rollouts) s | "
        "streaming / uniform | rounds / streaming |",
        "|---|---|---|---|---|---|",
    ]
    for run in runs:
        vs_uniform, vs_rounds = run.ratios()
        rows.append(
            f"| {run.engines} × {run.slots} | {run.mean('streaming', 'wall_s'):.1f} | "
            f"{run.mean('rounds', 'wall_s'):.1f} | "
            f"{run.mean('uniform_same_rollouts', 'wall_s'):.1f} | {vs_uniform:.2f} | "
            f"{vs_rounds:.2f} |"
        )
    return "\n".join(rows)


def docs_section(
    main_run: Comparison,
    sweep: Sequence[Comparison],
    front: Sequence[tuple[float, Comparison]],
    real_front: Sequence[tuple[float, Comparison]],
    *,
    command: str,
    latency: LatencyModel,
    overlap: OverlapComparison | None = None,
) -> str:
    vs_uniform, vs_rounds = main_run.ratios()
    worst = max((drawn / expected for _, _, drawn, expected, _, _ in per_bin(main_run)), default=0)
    misses = []
    for run in sweep:
        u, r = run.ratios()
        if u > 1.3:
            misses.append(f"{run.engines} × {run.slots}: {u:.2f}× uniform (target ≤ 1.3)")
        if r < 1.5:
            misses.append(f"{run.engines} × {run.slots}: rounds only {r:.2f}× slower (≥ 1.5)")
    real_block = ""
    if real_front:
        real_block = f"""
**Real engine** (wall-clock on this 2-core CPU machine: the tiny model, arithmetic prompts,
responses of at most 8 tokens; the same `collect_groups`, `RolloutPool` and `RewardPool` a
training step runs):

{pareto_table(real_front)}

{results_table(real_front[len(real_front) // 2][1])}

Responses here are 1-8 tokens, so waits are short and per-call overhead dominates; the simulated
front above is the claim for long reasoning responses on GPUs.
"""
    overlap_block = ""
    if overlap is not None:
        overlap_block = f"""
**Across step boundaries** (`rollout.cross_step_allocation`; issue 20). The same samplers
over {overlap.steps} consecutive steps of {overlap.prompts} fresh prompts on one simulated pool,
through the driver's `RolloutStream` and an allocator holding several open steps
(`adarl.bench.sampler.run_steps`): one step at a time, or with the next 1 or 2 steps open while
a step samples (the driver's schedule at k = 1, 2 with learners that take no time). Time per step
is the whole run's time over its steps, filling and draining included; uniform draws n =
{overlap.uniform_n}, about streaming's rollouts.

{overlap_table(overlap)}

{overlap_reading(overlap)} Overlap does not change what a step draws when the sampler reads no
history (uniform, or Seq-Balance without history: identical groups, tested); with history a
step opened early reads the records of the steps finished before it opened.
"""
    steps = len(main_run.outcomes["streaming"])
    prompts = main_run.outcomes["uniform_n4"][0].groups
    return f"""## Sampler

Reproduce: `{command}` (CPU, a few minutes; simulated numbers are deterministic for a seed).

**What is measured.** One rollout phase (a training step's sampling) of {prompts} prompts,
averaged over {steps} steps with fresh prompts, through the driver's own loop
(`adarl.driver.collect_groups`) with the real allocator, sampler, group builder and reward pool.
Simulated: outcomes from the scripted `FakeEngine` (15% p = 0, 10% p ~ U(0.01, 0.1), 45% p ~ U(0.1,
0.9), 15% p ~ U(0.9, 0.99), 15% p = 1), time from `adarl.rollout.simulated`'s latency model
({latency.engines} engines × {latency.slots} slots; response lengths LogNormal(median
{latency.median_response_tokens:g}, σ {latency.response_tokens_sigma:g}),
× {latency.incorrect_length_factor:g} when wrong, at most {latency.max_response_tokens} tokens;
a decode iteration takes {latency.decode_step_base_s * 1e3:g} ms
+ {latency.decode_step_per_seq_s * 1e3:g} ms per running sequence).
Compared: streaming Seq-Balance(2, 2), cap {CAP}, selection-corrected, draw sizes by
`max_overshoot_fraction` ε (`adarl.algo.drawing`); the reference implementation's synchronous
rounds (8 samples per active prompt per round, at most 4); uniform sampling with about as many
rollouts as streaming; uniform n = 4 (GRPO). All keep one group of n = 4 per prompt.

**Results** ({main_run.engines} engines × {main_run.slots} slots, ε = {main_run.overshoot:g}):

{results_table(main_run)}

Streaming's rollout phase takes **{vs_uniform:.2f}×** the time of uniform sampling of about the
same rollouts (target ≤ 1.3×) and is **{vs_rounds:.2f}×** faster than the reference rounds at the
same kept groups (target ≥ 1.5×).

**Where the rollouts go** (streaming, by true pass rate; E[T'] is the exact expected stopping time
of the one-at-a-time rule, cap {CAP}; "not trained" is the share of drawn samples beyond the kept
4):

{per_bin_table(main_run)}

Largest drawn / E[T'] over the bins: **{worst:.3f}** (target ≤ 1.15). The rollouts a prompt
draws but does not train on are the price of finding its signal: a p = 0.05 prompt needs about 15
draws to show two positives and two negatives.

**Pareto front** (simulated, same prompts; ε = 0 never overshoots, ε = inf draws the cap at once):

{pareto_table(front)}

{front_reading(front) if front else ""}

**Hardware** (same prompts, ε = {main_run.overshoot:g}; fewer slots = throughput-bound, more =
latency-bound):

{sweep_table(sweep)}

{"Targets missed: " + "; ".join(misses) + "." if misses else "Every row meets both targets."}
{overlap_block}{real_block}"""


def write_docs_section(path: Path, section: str) -> None:
    """Replace (or append) the `## Sampler` section of `path`, keeping every other section."""
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    lines = text.splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if line.strip() == "## Sampler"), None)
    if start is None:
        path.write_text(text.rstrip("\n") + "\n\n" + section)
        return
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    tail = "".join(lines[end:])
    path.write_text("".join(lines[:start]) + section + ("\n" + tail if tail else ""))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m adarl.bench sampler", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--prompts", type=int, default=256, help="prompts per step")
    parser.add_argument("--steps", type=int, default=4, help="steps (batches) to average over")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--engines", type=int, default=LatencyModel.engines)
    parser.add_argument("--slots", type=int, default=LatencyModel.slots, help="per engine")
    parser.add_argument(
        "--overshoot",
        type=float,
        default=SequentialConfig.max_overshoot_fraction,
        help="max_overshoot_fraction of the main comparison",
    )
    parser.add_argument(
        "--front",
        type=float,
        nargs="*",
        default=[0.0, 0.02, 0.05, 0.1, 0.2, math.inf],
        help="max_overshoot_fraction values of the Pareto front (none to skip)",
    )
    parser.add_argument(
        "--sweep-engines",
        type=int,
        nargs="*",
        default=[2, 8, 16],
        help="also run with these engine counts (the hardware sweep); none to skip",
    )
    parser.add_argument(
        "--real-engine",
        choices=("none", "vllm", "hf"),
        default="none",
        help="also measure on a real engine with the built-in tiny model",
    )
    parser.add_argument("--real-prompts", type=int, default=64, help="prompts per real step")
    parser.add_argument("--real-steps", type=int, default=2, help="real steps per sampler")
    parser.add_argument(
        "--overlap-steps",
        type=int,
        default=12,
        help="consecutive steps of the cross-step comparison (0 to skip)",
    )
    parser.add_argument(
        "--write-docs", type=Path, default=None, help="replace the Sampler section of this file"
    )
    args = parser.parse_args(argv)

    def simulate(engines: int, eps: float) -> Comparison:
        return simulated_comparison(
            prompts=args.prompts,
            steps=args.steps,
            seed=args.seed,
            latency=LatencyModel(engines=engines, slots=args.slots),
            overshoot=eps,
        )

    main_run = simulate(args.engines, args.overshoot)
    print(results_table(main_run))
    print(per_bin_table(main_run))
    vs_uniform, vs_rounds = main_run.ratios()
    print(
        f"streaming / uniform (same rollouts) wall time = {vs_uniform:.2f} (target <= 1.3); "
        f"rounds / streaming = {vs_rounds:.2f} (target >= 1.5)"
    )
    front = [
        (e, main_run if e == args.overshoot else simulate(args.engines, e)) for e in args.front
    ]
    if front:
        print(pareto_table(front))
    sweep = [
        main_run if e == args.engines else simulate(e, args.overshoot) for e in args.sweep_engines
    ]
    if sweep:
        print(sweep_table(sweep))
    overlap = None
    if args.overlap_steps:
        overlap = overlap_comparison(
            prompts=args.prompts,
            steps=args.overlap_steps,
            seed=args.seed,
            latency=LatencyModel(engines=args.engines, slots=args.slots),
            overshoot=args.overshoot,
        )
        print(overlap_table(overlap))
        print(overlap_reading(overlap))
    real_front: list[tuple[float, Comparison]] = []
    if args.real_engine != "none":
        real_front = real_comparisons(
            prompts=args.real_prompts,
            steps=args.real_steps,
            seed=args.seed,
            engine=args.real_engine,
            overshoots=args.front or [args.overshoot],
        )
        print(pareto_table(real_front))
    if args.write_docs is not None:
        command = (
            f"python -m adarl.bench sampler --prompts {args.prompts} --steps {args.steps} "
            f"--seed {args.seed} --engines {args.engines} --slots {args.slots} --front "
            + " ".join(f"{e:g}" for e in args.front)
            + " --sweep-engines "
            + " ".join(str(e) for e in args.sweep_engines)
            + f" --overlap-steps {args.overlap_steps}"
        )
        if args.real_engine != "none":
            command += (
                f" --real-engine {args.real_engine} --real-prompts {args.real_prompts} "
                f"--real-steps {args.real_steps}"
            )
        write_docs_section(
            args.write_docs,
            docs_section(
                main_run,
                sweep,
                front,
                real_front,
                command=command,
                latency=LatencyModel(engines=args.engines, slots=args.slots),
                overlap=overlap,
            ),
        )
        print(f"wrote the Sampler section of {args.write_docs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
