"""`rounds` mode reproduces the reference implementation's synchronous rounds exactly.

The oracle below re-implements the released Reinforce-Ada loop as MATH.md describes it
(RLHFlow/Reinforce-Ada `_generate_multi_round_adaptive_downsampling`): every active prompt gets
`round_repeat` samples per round, up to `max_rounds`; every sample of a round is counted;
positive means reward > 0.7; the balanced exit is ≥ n//2 positives and ≥ n - n//2 negatives,
the positive-focused exit ≥ 1 positive; a prompt resolved at the end of a round keeps the
earliest min(n//2, |pos|) positives and fills with the earliest negatives (topping up from the
positives if short); a prompt unresolved after the last round keeps min(n, N) samples by the
fallback rule; the advantage is r - p̃ with p̃ from the whole pool. Only the request naming and
seeding convention is shared with adarl (so both draw the same responses from the fake engine).
"""

from __future__ import annotations

import math
from collections import defaultdict

import pytest
from _allocator_world import FakeWorld, StepTrace

from adarl.allocator import build_allocator
from adarl.allocator.samplers.base import derive_seed
from adarl.config.allocator import AllocatorConfig, GroupConfig, SequentialConfig
from adarl.types import PromptRequest

THRESHOLD = 0.7


def reference_rounds(
    world: FakeWorld,
    *,
    step: int,
    seed: int,
    n: int,
    round_repeat: int,
    max_rounds: int,
    choice: str,
) -> dict[str, dict]:
    uids = [e.prompt_id for e in world.examples]
    examples = {e.prompt_id: e for e in world.examples}
    state = {uid: {"finished": False, "seen": 0} for uid in uids}
    pos_cache: dict[str, list[int]] = defaultdict(list)  # sample indices, in sampling order
    neg_cache: dict[str, list[int]] = defaultdict(list)
    rewards: dict[str, list[float]] = defaultdict(list)
    selected: dict[str, list[int]] = {}

    def downsample_cache(uid: str, target_total: int) -> list[int]:
        target_pos = min(target_total // 2, len(pos_cache[uid]))
        target_neg = min(target_total - target_pos, len(neg_cache[uid]))
        if target_pos + target_neg < target_total:
            if len(pos_cache[uid]) > target_pos:
                target_pos += min(
                    len(pos_cache[uid]) - target_pos, target_total - target_pos - target_neg
                )
            elif len(neg_cache[uid]) > target_neg:
                target_neg += min(
                    len(neg_cache[uid]) - target_neg, target_total - target_pos - target_neg
                )
        return pos_cache[uid][:target_pos] + neg_cache[uid][:target_neg]

    active = set(uids)
    target_pos, target_neg = n // 2, n - n // 2
    for r in range(max_rounds):
        if not active:
            break
        for uid in [u for u in uids if u in active]:
            request = PromptRequest(
                request_id=f"{step}:{uid}:{r}",
                example=examples[uid],
                num_samples=round_repeat,
                step=step,
                seed=derive_seed(seed, step, uid, r),
            )
            st = state[uid]
            for scored in world.generate(request):
                index = len(rewards[uid])
                rewards[uid].append(scored.reward)
                st["seen"] += 1
                (pos_cache if scored.reward > THRESHOLD else neg_cache)[uid].append(index)
            if choice == "balanced":
                if len(pos_cache[uid]) >= target_pos and len(neg_cache[uid]) >= target_neg:
                    selected[uid] = downsample_cache(uid, n)
                    st["finished"] = True
            elif len(pos_cache[uid]) >= 1:
                selected[uid] = downsample_cache(uid, n)
                st["finished"] = True
        active = {u for u in active if not state[u]["finished"]}

    for uid in [u for u in uids if not state[u]["finished"]]:
        pos_num, neg_num = len(pos_cache[uid]), len(neg_cache[uid])
        take = min(n, pos_num + neg_num)
        if choice == "positive_focused":
            ratio = pos_num / (pos_num + neg_num) if pos_num + neg_num else 0.0
            target_pos = max(min(math.ceil(ratio * n), take - 1), 1)
            target_neg = take - target_pos
        actual_pos, actual_neg = min(pos_num, target_pos), min(neg_num, target_neg)
        if actual_pos + actual_neg < take:
            if pos_num > actual_pos:
                actual_pos += min(pos_num - actual_pos, take - actual_pos - actual_neg)
            elif neg_num > actual_neg:
                actual_neg += min(neg_num - actual_neg, take - actual_pos - actual_neg)
        selected[uid] = pos_cache[uid][:actual_pos] + neg_cache[uid][:actual_neg]

    out = {}
    for uid in uids:
        pool_mean = sum(r > THRESHOLD for r in rewards[uid]) / len(rewards[uid])
        kept = sorted(selected[uid])
        out[uid] = {
            "seen": state[uid]["seen"],
            "resolved": state[uid]["finished"],
            "kept": kept,
            "advantages": [rewards[uid][i] - pool_mean for i in kept],
        }
    return out


@pytest.mark.parametrize("choice", ["balanced", "positive_focused"])
@pytest.mark.parametrize("order_seed", [0, 1])
def test_rounds_mode_matches_the_reference_loop(choice: str, order_seed: int) -> None:
    n, round_repeat, max_rounds, seed = 4, 8, 4, 7
    pass_rates = [0.0, 0.02, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 0.95, 1.0] * 2
    config = AllocatorConfig(
        sampler="seq_balance" if choice == "balanced" else "seq_pos",
        prompts_per_step=len(pass_rates),
        positive_threshold=THRESHOLD,
        seed=seed,
        sequential=SequentialConfig(
            k_pos=n // 2 if choice == "balanced" else 1,
            k_neg=n - n // 2,
            mode="rounds",
            round_repeat=round_repeat,
            max_rounds=max_rounds,
        ),
        group=GroupConfig(
            group_size=n,
            advantage="pool",
            correction="none",
            downsample_order="earliest",
            unresolved_policy="keep_available",
            pass_rate_estimate="pool",  # the released code's p̃ = N⁺/N
        ),
    )
    allocator = build_allocator(config)
    for step in range(2):
        world = FakeWorld(pass_rates, engine_seed=step)
        trace = StepTrace()
        result = world.run_step(allocator, step, trace=trace, order_seed=order_seed)
        assert result is not None
        oracle = reference_rounds(
            FakeWorld(pass_rates, engine_seed=step),
            step=step,
            seed=seed,
            n=n,
            round_repeat=round_repeat,
            max_rounds=max_rounds,
            choice=choice,
        )
        groups = {g.prompt_id: g for g in result.groups}
        assert set(groups) == set(oracle)
        for pid, expected in oracle.items():
            group = groups[pid]
            position = {id(s): i for i, s in enumerate(trace.scored[pid])}
            kept = sorted(position[id(s)] for s in group.rollouts)
            assert group.pool_size == expected["seen"] == len(trace.rewards[pid]), pid
            assert group.resolved == expected["resolved"], pid
            assert kept == expected["kept"], pid
            by_index = dict(
                zip((position[id(s)] for s in group.rollouts), group.advantages, strict=True)
            )
            assert [by_index[i] for i in kept] == pytest.approx(expected["advantages"]), pid
        assert result.metrics["sampling/rollouts"] == sum(o["seen"] for o in oracle.values())
        # the oracle's prompts cover every kind of exit: resolved early, late and never
        seen = {o["seen"] for o in oracle.values()}
        assert {round_repeat, round_repeat * max_rounds} <= seen
