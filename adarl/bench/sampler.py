"""The runs of `python -m adarl.bench sampler` (adarl/bench/sampler_cli.py): what streaming
sequential sampling costs in rollouts and time.

Every number comes from the driver's own rollout phase, `adarl.driver.rollout_phase.collect_groups`,
with the real `BudgetAllocator`, samplers, group builder and `RewardPool`:

* **simulated** (the claim about GPU clusters): outcomes from the scripted `FakeEngine` (known pass
  rates, drawn from adarl/bench/sampler_world.py's `PassRateMix`), time from
  `adarl.rollout.simulated.SimulatedRolloutPool`'s continuous-batching latency model (its
  docstring states the model);
* **real engine** (this machine): the vLLM engine (CPU build) or the HF engine on the built-in tiny
  model, the arithmetic task's training prompts, wall-clock time.

Compared: streaming Seq-Balance(2, 2) at several `sequential.max_overshoot_fraction` values, the
reference implementation's synchronous rounds, and uniform sampling; within a step
(`simulated_comparison`, `real_comparisons`) and, across step boundaries
(`rollout.cross_step_allocation`), consecutive steps through the driver's `RolloutStream` one at
a time against the next 1 or 2 steps open while a step samples (`overlap_comparison`). The
tables and the docs section are adarl/bench/sampler_report.py's.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from adarl.allocator import build_allocator
from adarl.allocator.allocator import BudgetAllocator
from adarl.allocator.build import allocator_kwargs
from adarl.allocator.metrics import is_mixed
from adarl.bench.bandit import NoPrompts
from adarl.bench.sampler_world import FakeWorld, fake_world
from adarl.config.allocator import AllocatorConfig, GroupConfig, SequentialConfig
from adarl.driver.rollout_phase import (
    PhaseParts,
    RolloutPhase,
    RolloutPoolLike,
    RolloutStream,
    collect_groups,
)
from adarl.models.tokenizer import build_char_tokenizer
from adarl.reward.exact import ExactMatchVerifier
from adarl.reward.pool import RewardPool
from adarl.rollout.codec import PromptCodec
from adarl.rollout.simulated import LatencyModel, SimulatedRolloutPool
from adarl.types import GenerationRequest, SamplingParams, TaskExample

CAP = 32  # per-prompt cap of the streaming sampler: the reference rounds' 8 × 4
K = 2  # Seq-Balance(2, 2), trained n = 4


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
        parts = PhaseParts(
            allocator=allocator,
            rollout=counter,
            rewards=rewards,
            prompts=NoPrompts(),
            codec=codec,
            clock=clock,
        )
        phase = collect_groups(step, examples, parts)
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
            PhaseParts(
                allocator=allocator,
                rollout=pool,
                rewards=rewards,
                prompts=NoPrompts(),
                codec=world.codec,
                clock=pool.now,
            )
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
