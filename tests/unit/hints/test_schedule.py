"""Hint schedules: level transitions, one hint per prompt per step, resume of sage_light."""

from __future__ import annotations

import pytest

from adarl.config.hints import HintsConfig
from adarl.hints.schedule import (
    HintSchedule,
    OffSchedule,
    SageLightSchedule,
    SageSchedule,
    build_hint_schedule,
)


def test_off_never_gives_a_hint() -> None:
    schedule = build_hint_schedule(HintsConfig())
    assert isinstance(schedule, OffSchedule)
    schedule.observe("p", level=0, accuracy=0.0)
    assert [schedule.level("p", a) for a in (1, 2, 3, 4)] == [None] * 4


def test_sage_escalates_within_the_step_then_stops() -> None:
    schedule = build_hint_schedule(HintsConfig(schedule="sage"))
    assert isinstance(schedule, SageSchedule)
    assert [schedule.level("p", a) for a in (1, 2, 3, 4, 5)] == [1, 2, 3, None, None]
    schedule.observe("p", level=3, accuracy=0.0)  # stateless: the next step starts at 1 again
    assert schedule.level("p", 1) == 1
    assert schedule.state_dict() == {}


def test_a_first_level_starts_the_escalation_there() -> None:
    sage = build_hint_schedule(HintsConfig(schedule="sage", first_level=3))
    assert [sage.level("p", a) for a in (1, 2)] == [3, None]
    sage = build_hint_schedule(HintsConfig(schedule="sage", first_level=2))
    assert [sage.level("p", a) for a in (1, 2, 3)] == [2, 3, None]
    light = build_hint_schedule(HintsConfig(schedule="sage_light", first_level=2))
    assert light.level("p", 1) == 2  # never below the first level
    light.observe("p", level=2, accuracy=0.0)
    assert light.level("p", 1) == 3  # moves up from it as before
    for level in (0, 4):
        with pytest.raises(ValueError, match="first_level"):
            HintsConfig(schedule="sage", first_level=level).validate()
        with pytest.raises(ValueError, match="first_level"):
            SageSchedule(first_level=level)


def test_sage_light_moves_one_level_at_a_time() -> None:
    schedule = build_hint_schedule(HintsConfig(schedule="sage_light"))
    assert isinstance(schedule, SageLightSchedule)
    assert isinstance(schedule, HintSchedule)
    assert schedule.level("p", 1) == 1  # a collapsed prompt gets at least level 1
    assert schedule.level("p", 2) is None  # one hint per prompt per step
    schedule.observe("p", level=1, accuracy=0.0)  # ≤ 0.1: up
    assert schedule.level("p", 1) == 2
    schedule.observe("p", level=2, accuracy=0.1)  # ≤ 0.1 (inclusive): up
    assert schedule.level("p", 1) == 3
    schedule.observe("p", level=3, accuracy=0.0)  # capped at 3
    assert schedule.stored_level("p") == 3
    schedule.observe("p", level=3, accuracy=0.2)  # between the thresholds: stays
    assert schedule.stored_level("p") == 3
    schedule.observe("p", level=3, accuracy=0.35)  # not > 0.35: stays
    assert schedule.stored_level("p") == 3
    schedule.observe("p", level=3, accuracy=0.5)  # > 0.35: down
    assert schedule.stored_level("p") == 2
    schedule.observe("p", level=1, accuracy=0.9)  # moves from the level observed at
    assert schedule.stored_level("p") == 0
    assert schedule.level("p", 1) == 1
    assert schedule.stored_level("other") == 0


def test_sage_light_unhinted_collapse_raises_the_next_level() -> None:
    # Rolled unhinted (level 0) at accuracy 0, then at level 1 with accuracy 0.05: 0 → 1 → 2.
    schedule = SageLightSchedule()
    schedule.observe("p", level=0, accuracy=0.0)
    schedule.observe("p", level=1, accuracy=0.05)
    assert schedule.level("p", 1) == 2
    assert schedule.metrics() == {
        "sampling/hint_schedule_level_1": 0.0,
        "sampling/hint_schedule_level_2": 1.0,
        "sampling/hint_schedule_level_3": 0.0,
    }


def test_sage_light_thresholds_come_from_the_config() -> None:
    schedule = build_hint_schedule(
        HintsConfig(schedule="sage_light", up_threshold=0.0, down_threshold=0.5)
    )
    schedule.observe("p", level=1, accuracy=0.05)  # above up_threshold=0: stays at 1
    assert schedule.level("p", 1) == 1
    schedule.observe("q", level=2, accuracy=0.4)  # not above 0.5: stays at 2
    assert schedule.level("q", 1) == 2


def test_sage_light_levels_survive_a_resume() -> None:
    schedule = SageLightSchedule()
    for prompt, observations in {"a": [0.0], "b": [0.0, 0.0], "c": [0.0, 0.9]}.items():
        level = 0
        for accuracy in observations:
            schedule.observe(prompt, level=level, accuracy=accuracy)
            level = schedule.stored_level(prompt)
    state = schedule.state_dict()
    assert state == {"levels": {"a": 1, "b": 2}}  # c came back to 0 and is not stored
    resumed = SageLightSchedule()
    resumed.load_state_dict(state)
    assert [resumed.level(p, 1) for p in "abc"] == [1, 2, 1]
    resumed.observe("b", level=2, accuracy=0.0)
    assert resumed.stored_level("b") == 3
    assert schedule.stored_level("b") == 2  # the state is a copy


@pytest.mark.parametrize(
    "state", [{}, {"levels": {"a": 0}}, {"levels": {"a": 4}}, {"levels": {"a": "2"}}]
)
def test_sage_light_rejects_bad_state(state: dict) -> None:
    with pytest.raises(ValueError, match="sage_light state"):
        SageLightSchedule().load_state_dict(state)


def test_bad_calls_are_named() -> None:
    for schedule in (OffSchedule(), SageSchedule(), SageLightSchedule()):
        with pytest.raises(ValueError, match="1-based"):
            schedule.level("p", 0)
        with pytest.raises(ValueError, match="level observed"):
            schedule.observe("p", level=4, accuracy=0.0)
        with pytest.raises(ValueError, match="accuracy"):
            schedule.observe("p", level=1, accuracy=1.5)
    with pytest.raises(ValueError, match="thresholds"):
        SageLightSchedule(up_threshold=0.5, down_threshold=0.2)
