"""SAGE inside the allocator, for real: the driver's rollout phase (`collect_groups`) with the real
allocator, hint stage, template hint generator, reward pool, and a scripted engine whose pass rate
rises with the hint level (the hinted prompt text `prompt + hint` has its own scripted rate)."""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Sequence

import numpy as np
import pytest
from _allocator_world import deterministic_metrics

from adarl.allocator import BudgetAllocator
from adarl.allocator.estimators import PooledAdvantage, UniformAdvantage
from adarl.allocator.group_builder import GroupBuilder
from adarl.allocator.hint_stage import HintStage
from adarl.allocator.metrics import is_mixed
from adarl.allocator.samplers.sequential import SequentialSampler
from adarl.allocator.samplers.uniform import UniformSampler
from adarl.driver.rollout_phase import PhaseParts, collect_groups
from adarl.evaluation import Evaluator
from adarl.hints.collapse import CollapseRule
from adarl.hints.generator import HintGenerator
from adarl.hints.schedule import SageLightSchedule, SageSchedule
from adarl.hints.types import HintRequest
from adarl.models.tokenizer import build_char_tokenizer
from adarl.reward.exact import ExactMatchVerifier
from adarl.reward.pool import RewardPool
from adarl.rollout.codec import PromptCodec
from adarl.rollout.fake import FakeEngine, FakePrompt
from adarl.rollout.simulated import LatencyModel, SimulatedRolloutPool
from adarl.tasks.arithmetic import make_example
from adarl.types import Completion, GenerationRequest, SamplingParams, TaskExample

LATENCY = LatencyModel(engines=4, slots=64, median_response_tokens=50, max_response_tokens=200)
N = 4  # GRPO group size

# Pass rate by hint level 0..3 for each kind of prompt.
COLLAPSED = (0.0, 0.15, 0.45, 0.8)
HARD = (0.2, 0.5, 0.7, 0.9)
EASY = (0.9, 0.95, 0.97, 0.99)


class _RecordingGenerator(HintGenerator):
    def __init__(self) -> None:
        super().__init__(source="template")
        self.requests: list[HintRequest] = []

    def hints(self, requests: Sequence[HintRequest]):
        self.requests.extend(requests)
        return super().hints(requests)


class _RecordingPool(SimulatedRolloutPool):
    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.sent: list[GenerationRequest] = []

    def submit(self, requests: Sequence[GenerationRequest]) -> None:
        self.sent.extend(requests)
        super().submit(requests)

    def generate(self, requests: Sequence[GenerationRequest]):
        self.sent.extend(requests)
        return super().generate(requests)


class HintWorld:
    """Arithmetic prompts with scripted pass rates at every hint level."""

    def __init__(self, rates: Sequence[tuple[float, ...]], *, seed: int = 0) -> None:
        self.tokenizer = build_char_tokenizer()
        self.codec = PromptCodec(
            tokenizer=self.tokenizer, sampling=SamplingParams(max_new_tokens=8)
        )
        self.examples: list[TaskExample] = []
        for i in range(len(rates)):
            a, b, c = 11 + i, 3 + i % 7, 2 + i % 5
            self.examples.append(make_example([a, b, c], ["+", "-"], difficulty=0.5))
        self.rates = {e.prompt_id: r for e, r in zip(self.examples, rates, strict=True)}
        # The hinted prompt is `prompt + hint`: script its text at the level's rate.
        template = HintGenerator(source="template")
        self.script: dict[str, FakePrompt] = {}
        for example, levels in zip(self.examples, rates, strict=True):
            self.script[example.prompt] = FakePrompt(levels[0], example.answer)
            hints = template.hints(
                [HintRequest(example.prompt_id, example, lv) for lv in (1, 2, 3)]
            )
            for hint in hints:
                assert hint.text is not None
                self.script[example.prompt + hint.text] = FakePrompt(
                    levels[hint.level], example.answer
                )
        self.engine = FakeEngine(tokenizer=self.tokenizer, script=self.script, seed=seed)

    def is_correct(self, request: GenerationRequest, completion: Completion) -> bool:
        prompt = self.tokenizer.decode(list(request.prompt_token_ids), skip_special_tokens=True)
        return completion.text == self.script[prompt].answer

    def run_step(self, allocator: BudgetAllocator, step: int, generator: HintGenerator | None):
        pool = _RecordingPool(
            engine=self.engine, latency=LATENCY, is_correct=self.is_correct, seed=step
        )
        with RewardPool(verifiers={"arithmetic": ExactMatchVerifier()}, num_workers=1) as rewards:
            phase = collect_groups(
                step,
                self.examples,
                PhaseParts(
                    allocator=allocator,
                    rollout=pool,
                    rewards=rewards,
                    prompts=_NoRefill(),
                    codec=self.codec,
                    hints=generator,
                    clock=pool.now,
                ),
            )
        return phase, pool.sent


class _NoRefill:
    def next_batch(self, num_examples: int) -> list[TaskExample]:
        return []

    def metrics(self) -> dict[str, float]:
        return {}


def _uniform(hints: HintStage | None, *, seed: int = 0) -> BudgetAllocator:
    return BudgetAllocator(
        sampler=UniformSampler(samples_per_prompt=N),
        group_builder=GroupBuilder(group_size=None, estimator=UniformAdvantage.named("grpo")),
        seed=seed,
        hints=hints,
    )


def _sage(**kwargs) -> HintStage:
    return HintStage(schedule=SageSchedule(), collapse=CollapseRule(after_samples=N), **kwargs)


def _predicted_mixed(levels: tuple[float, ...], *, hinted: bool) -> float:
    """P(the trained group of n is mixed): at each level the pool is mixed, all-correct, or all
    wrong; all wrong (collapsed) moves to the next level while levels are left (sage)."""
    total, reach = 0.0, 1.0
    for level, p in enumerate(levels if hinted else levels[:1]):
        mixed = 1 - p**N - (1 - p) ** N
        total += reach * mixed
        reach *= (1 - p) ** N if level < 3 else 0.0
    return total


def _hinted_text(world: HintWorld, request: GenerationRequest) -> str:
    return world.tokenizer.decode(list(request.prompt_token_ids), skip_special_tokens=True)


def test_only_collapsed_prompts_get_hints_and_re_rollouts():
    world = HintWorld([COLLAPSED] * 8 + [HARD] * 8 + [EASY] * 8)
    generator = _RecordingGenerator()
    allocator = _uniform(_sage())
    phase, sent = world.run_step(allocator, 1, generator)
    base = {e.prompt for e in world.examples}

    for group in phase.result.groups:
        assert group.prompt_id in world.rates  # groups keep the task prompt's id
    # A hint was asked for exactly the prompts whose unhinted pool had no positive.
    asked = Counter((r.prompt_id, r.level) for r in generator.requests)
    level1 = {pid for pid, level in asked if level == 1}
    collapsed_ids = {pid for pid, rates in world.rates.items() if rates is COLLAPSED}
    assert collapsed_ids <= level1  # p = 0: every one collapses
    assert set(asked.values()) == {1}  # one request per prompt and level

    # Re-rollouts: every hinted request belongs to a prompt that asked for that level.
    hinted = [r for r in sent if _hinted_text(world, r) not in base]
    assert hinted, "no prompt was re-rolled"
    texts = {e.prompt: e.prompt_id for e in world.examples}
    for request in hinted:
        text = _hinted_text(world, request)
        prompt = text[: text.index("[")]
        level = int(request.request_id.split("@h")[1].split(":")[0])
        assert (texts[prompt], level) in asked
    # Unhinted requests: exactly one per prompt (uniform draws once), never repeated.
    unhinted = Counter(_hinted_text(world, r) for r in sent if _hinted_text(world, r) in base)
    assert unhinted == Counter({e.prompt: 1 for e in world.examples})
    # Each prompt trains one group, the last condition's: its rollouts carry that hint level.
    assert sorted(g.prompt_id for g in phase.result.groups) == sorted(world.rates)
    levels = {g.prompt_id: {s.rollout.hint_level for s in g.rollouts} for g in phase.result.groups}
    for pid, level_set in levels.items():
        assert len(level_set) == 1
        (level,) = level_set
        assert level == max((lv for p, lv in asked if p == pid), default=0)
    m = phase.result.metrics
    assert m["sampling/hint_activations/level1"] == len(level1)
    assert phase.metrics["sampling/hints_given"] == sum(asked.values())  # the generator's
    assert m["sampling/rollouts"] == len(sent) * N


def test_mixed_group_fraction_rises_as_the_level_model_predicts():
    """Over many prompts and steps, the trained groups' mixed fraction matches the model
    Σ_ℓ P(reach ℓ)·P(mixed at ℓ) within 3 standard errors, and is above no hints' by far."""
    kinds = [COLLAPSED, HARD, EASY]
    world = HintWorld([kinds[i % 3] for i in range(60)])
    allocator = _uniform(_sage())
    plain = _uniform(None)
    generator = HintGenerator(source="template")
    mixed: dict[bool, list[float]] = {True: [], False: []}
    steps = 25
    for step in range(1, steps + 1):
        for hinted, alloc in ((True, allocator), (False, plain)):
            phase, _ = world.run_step(alloc, step, generator if hinted else None)
            mixed[hinted] += [float(is_mixed(g)) for g in phase.result.groups]
    for hinted in (True, False):
        predicted = float(
            np.mean(
                [_predicted_mixed(world.rates[e.prompt_id], hinted=hinted) for e in world.examples]
            )
        )
        observed = np.asarray(mixed[hinted])
        se = math.sqrt(predicted * (1 - predicted) / len(observed))
        assert abs(observed.mean() - predicted) < 3 * se, (hinted, observed.mean(), predicted, se)
    assert np.mean(mixed[True]) > np.mean(mixed[False]) + 0.15


def test_hint_budget_caps_the_extra_rollouts():
    world = HintWorld([COLLAPSED] * 24 + [EASY] * 8)
    allocator = _uniform(_sage(max_extra_rollouts_fraction=0.25))
    phase, _ = world.run_step(allocator, 1, HintGenerator(source="template"))
    unhinted = 32 * N
    m = phase.result.metrics
    # Each granted condition is counted at the most it may draw: the ceiling holds exactly, and
    # with this much demand it fills to within one condition.
    assert 0.25 * unhinted - N < m["sampling/hinted_rollouts"] <= 0.25 * unhinted
    assert m["sampling/hints_refused_by_budget"] > 0
    assert m["sampling/rollouts"] == unhinted + m["sampling/hinted_rollouts"]


def test_streaming_seq_balance_hint_keeps_its_own_pool_and_pass_rate():
    """With Seq-Balance the hinted condition is a fresh prompt of the sampler: its own pool (none
    of the unhinted samples), its own stopping rule, and the group's correction from its pool."""
    world = HintWorld([COLLAPSED] * 16 + [HARD] * 16)
    # The step budget every prompt's cap fills (the sequential default): hinted conditions bring
    # their own (`Sampler.fund`), so no unhinted prompt is cut short by them.
    sampler = SequentialSampler(
        k_pos=2, k_neg=2, max_samples_per_prompt=16, max_samples_per_step=32 * 16
    )
    allocator = BudgetAllocator(
        sampler=sampler,
        group_builder=GroupBuilder(group_size=4, estimator=PooledAdvantage(correction="selection")),
        hints=HintStage(schedule=SageSchedule(), collapse=CollapseRule(after_samples=8)),
    )
    phase, _ = world.run_step(allocator, 1, HintGenerator(source="template"))
    groups = {g.prompt_id: g for g in phase.result.groups}
    for example in world.examples[:16]:  # p = 0 unhinted: every one was re-rolled
        group = groups.get(example.prompt_id)
        if group is None:  # even ℓ = 3 (p = 0.8) may end without a negative at the cap
            continue
        (level,) = {s.rollout.hint_level for s in group.rollouts}
        assert level >= 1
        assert group.pool_positives > 0  # the hinted pool, not the collapsed one
    m = phase.result.metrics
    assert m["sampling/unresolved_by_budget"] == 0
    assert m["sampling/budget_cap"] == 32 * 16 + 16 * m["sampling/hint_activations/level1"] + 16 * (
        m["sampling/hint_activations/level2"] + m["sampling/hint_activations/level3"]
    )
    assert m["signal/zero_pass_share_unhinted"] >= 16 / 32
    assert m["signal/zero_pass_share_after_hints"] < m["signal/zero_pass_share_unhinted"]
    assert m["signal/prompts_rescued_by_hints"] > 8
    # Per-prompt statistics estimate the unhinted prompt only (its samples, none positive).
    for example in world.examples[:16]:
        stats = allocator.prompt_stats(example.prompt_id)
        assert stats is not None and stats.samples >= 8 and stats.positives == 0
    assert all(allocator.prompt_stats(f"{e.prompt_id}@h1") is None for e in world.examples)


def test_sage_light_levels_persist_and_resume():
    world = HintWorld([COLLAPSED] * 6)
    stage = HintStage(schedule=SageLightSchedule(), collapse=CollapseRule(after_samples=N))
    allocator = _uniform(stage)
    world.run_step(allocator, 1, HintGenerator(source="template"))
    state = allocator.state_dict()
    restored = _uniform(
        HintStage(schedule=SageLightSchedule(), collapse=CollapseRule(after_samples=N))
    )
    restored.load_state_dict(state)
    first, _ = world.run_step(allocator, 2, HintGenerator(source="template"))
    second, _ = world.run_step(restored, 2, HintGenerator(source="template"))
    assert [g.rollouts for g in first.result.groups] == [g.rollouts for g in second.result.groups]
    assert deterministic_metrics(first.result.metrics) == deterministic_metrics(
        second.result.metrics
    )


def test_hints_need_a_generator_and_a_per_prompt_sampler():
    world = HintWorld([COLLAPSED] * 4)
    with pytest.raises(RuntimeError, match="no hint generator"):
        world.run_step(_uniform(_sage()), 1, None)


def test_evaluation_never_sees_a_hint():
    """After a step that hinted, held-out evaluation of the same prompts sends each one as is."""
    world = HintWorld([COLLAPSED] * 6 + [HARD] * 6)
    _, sent = world.run_step(_uniform(_sage()), 1, HintGenerator(source="template"))
    assert any(_hinted_text(world, r) not in {e.prompt for e in world.examples} for r in sent)
    evaluator = Evaluator(
        examples=world.examples,
        codec=world.codec,
        samples_per_prompt=4,
        temperature=1.0,
        max_new_tokens=8,
        greedy=True,
        completions_to_log=0,
        seed=0,
    )
    pool = _RecordingPool(engine=world.engine, latency=LATENCY, is_correct=world.is_correct, seed=9)
    with RewardPool(verifiers={"arithmetic": ExactMatchVerifier()}, num_workers=1) as rewards:
        result = evaluator.evaluate(pool, rewards, step=1)
    assert len(pool.sent) == 2 * len(world.examples)  # sampled and greedy
    for request in pool.sent:
        prompt = _hinted_text(world, request)
        assert prompt in {e.prompt for e in world.examples}, prompt
    # The collapsed prompts score 0 unhinted, whatever their hinted pass rates.
    assert result.accuracy <= 0.5


def test_streaming_hint_ceiling_counts_each_condition_at_its_cap_until_it_ends():
    """Seq-Balance conditions end at varying sizes: the ceiling reserves each one's cap, returns
    what it did not draw when it ends, and so holds exactly while still granting more hints than
    a cap-per-hint count would."""
    world = HintWorld([COLLAPSED] * 24 + [HARD] * 8)
    sampler = SequentialSampler(k_pos=2, k_neg=2, max_samples_per_prompt=16)
    allocator = BudgetAllocator(
        sampler=sampler,
        group_builder=GroupBuilder(group_size=4, estimator=PooledAdvantage(correction="selection")),
        hints=HintStage(
            schedule=SageSchedule(),
            collapse=CollapseRule(after_samples=8),
            max_extra_rollouts_fraction=0.25,
        ),
    )
    phase, _ = world.run_step(allocator, 1, HintGenerator(source="template"))
    m = phase.result.metrics
    hinted = m["sampling/hinted_rollouts"]
    unhinted = m["sampling/rollouts"] - hinted
    assert 0 < hinted <= 0.25 * unhinted
    granted = sum(m[f"sampling/hint_activations/level{level}"] for level in (1, 2, 3))
    assert granted > 0.25 * unhinted / 16  # refunds let more conditions in than caps allow
    assert m["sampling/hints_refused_by_budget"] > 0


def test_the_prompts_whose_record_predicts_a_collapse_are_named_for_writing_ahead():
    """`predicted_collapses` reads each coming prompt's record, P(collapse) = E[(1-p)^4] under
    its posterior, and names those at or above the threshold, in step order; it reads only, so
    the step that follows grants hints exactly as without it."""
    world = HintWorld([COLLAPSED, EASY] * 16)
    world.examples = [  # a pool per kind, so that each prior is its own kind's
        dataclasses.replace(e, difficulty=float(i % 2)) for i, e in enumerate(world.examples)
    ]
    runs = {}
    for ahead in (True, False):
        allocator = _uniform(_sage(max_extra_rollouts_fraction=0.25))
        world.run_step(allocator, 1, HintGenerator(source="template"))
        predicted = allocator.predicted_collapses(2, world.examples) if ahead else []
        step = world.run_step(allocator, 2, HintGenerator(source="template"))
        runs[ahead] = (allocator, predicted, step)
    allocator, predicted, _ = runs[True]
    ids = [e.prompt_id for e in world.examples]
    history = allocator.stats.history(
        ids, step=2, pools={e.prompt_id: f"difficulty={e.difficulty:g}" for e in world.examples}
    )
    probability = allocator.hints.collapse_probabilities(history)
    collapsed, easy = ids[0::2], ids[1::2]
    assert min(probability[p] for p in collapsed) > 0.9 and max(probability[p] for p in easy) < 0.1
    assert predicted == collapsed  # the threshold is 0.5
    # Naming them changes nothing in the step: the same prompts get the same hints.
    (with_ahead, sent_ahead), (without, sent) = runs[True][2], runs[False][2]
    assert [r.request_id for r in sent_ahead] == [r.request_id for r in sent]
    assert with_ahead.result.metrics["sampling/hint_activations/level1"] == 8  # ⌈0.25 × 32⌉
    assert deterministic_metrics(with_ahead.result.metrics) == deterministic_metrics(
        without.result.metrics
    )
