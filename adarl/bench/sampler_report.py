"""The report of `python -m adarl.bench sampler`: its console tables and the `## Sampler` section
of docs/benchmarks.md, from the comparisons adarl/bench/sampler.py measured (pure: no sampling
here).

Reported: rollout-phase wall time against the reference rounds and against uniform sampling of
about as many rollouts; samples drawn per prompt by pass-rate bin against the one-at-a-time rule's
exact E[T'] (`adarl.algo.gate.terminal_counts`); samples drawn but not trained (discarded); the
Pareto front of `sequential.max_overshoot_fraction`: samples drawn against wall time; and steps
sampled one at a time against steps open while another samples.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Sequence

from adarl.algo.gate import terminal_counts
from adarl.bench.sampler import CAP, Comparison, K, OverlapComparison
from adarl.rollout.simulated import LatencyModel

SECTION_TITLE = "## Sampler"
P_BINS = ((0.0, 0.0), (0.0, 0.1), (0.1, 0.35), (0.35, 0.65), (0.65, 0.9), (0.9, 1.0), (1.0, 1.0))

LABELS = {
    "streaming": "Seq-Balance(2, 2), streaming, ε = {eps:g}",
    "rounds": "Seq-Balance(2, 2), reference rounds (8 × 4)",
    "uniform_same_rollouts": "uniform n = {n} (≈ same rollouts as streaming)",
    "uniform_n4": "uniform n = 4 (GRPO, same kept groups)",
}


def _bin_label(low: float, high: float) -> str:
    return f"{low:g}" if low == high else f"({low:g}, {high:g})"


def p_bin(p: float) -> str:
    """The `P_BINS` label of a true pass rate: exact 0 and 1 alone, open intervals between."""
    for low, high in P_BINS:
        if low == high == p or low < p < high or (high < 1.0 and p == high and low != high):
            return _bin_label(low, high)
    raise AssertionError(f"pass rate {p} fell outside every bin")


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


def targets_line(run: Comparison) -> str:
    """The two wall-time ratios against their targets, for the console."""
    vs_uniform, vs_rounds = run.ratios()
    return (
        f"streaming / uniform (same rollouts) wall time = {vs_uniform:.2f} (target <= 1.3); "
        f"rounds / streaming = {vs_rounds:.2f} (target >= 1.5)"
    )


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
    return f"""{SECTION_TITLE}

Reproduce: `{command}` (CPU, a few minutes; simulated numbers are deterministic for a seed).

**What is measured.** One rollout phase (a training step's sampling) of {prompts} prompts,
averaged over {steps} steps with fresh prompts, through the driver's own loop
(`adarl.driver.rollout_phase.collect_groups`) with the real allocator, sampler, group builder
and reward pool.
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
