"""The autoscaler's rule (`placement.autoscale`): the issue's numbers as examples, and its
properties over any policy, replica count, utilisation and time: the replicas stay within
bounds, a step up at most doubles, nothing moves inside the cooldown, and a step goes the way
the utilisation says."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpupool.placement.autoscale import (
    Direction,
    InvalidAutoscaleBounds,
    InvalidAutoscaleSetting,
    InvalidAutoscaleThreshold,
    LastStep,
    ScalePolicy,
    decide,
    within_room,
)


def test_95_percent_on_two_replicas_doubles_them() -> None:
    step = decide(ScalePolicy(max_replicas=8), 2, 95.0, now=1000.0)
    assert (step.direction, step.replicas) == (Direction.UP, 4)
    assert "95%" in step.reason and "80%" in step.reason


def test_a_step_up_is_proportional_below_the_cap() -> None:
    # 10 replicas at 85%: 10 * 85 / 55 = 15.5 -> 16 (not the x2 cap of 20)
    assert decide(ScalePolicy(max_replicas=40), 10, 85.0, now=0.0).replicas == 16


def test_10_percent_scales_down_to_the_minimum() -> None:
    step = decide(ScalePolicy(max_replicas=8, min_replicas=2), 4, 10.0, now=0.0)
    assert (step.direction, step.replicas) == (Direction.DOWN, 2)


def test_inside_the_band_and_without_figures_it_holds() -> None:
    policy = ScalePolicy(max_replicas=8)
    assert decide(policy, 3, 50.0, now=0.0).direction is Direction.HOLD
    assert decide(policy, 3, None, now=0.0).direction is Direction.HOLD


def test_nothing_inside_the_cooldown_and_a_step_after_it() -> None:
    policy = ScalePolicy(max_replicas=8, cooldown_s=300.0)
    last = LastStep(at=1000.0, from_replicas=2, to_replicas=4)
    inside = decide(policy, 4, 10.0, now=1299.0, last=last)
    assert inside.direction is Direction.HOLD and "cooling down" in inside.reason
    after = decide(policy, 4, 10.0, now=1300.0, last=last)
    assert (after.direction, after.replicas) == (Direction.DOWN, 1)


def test_a_count_outside_the_bounds_is_brought_back() -> None:
    policy = ScalePolicy(max_replicas=4, min_replicas=2)
    assert decide(policy, 9, 50.0, now=0.0).replicas == 4
    assert decide(policy, 1, 50.0, now=0.0).replicas == 2
    assert decide(policy, 0, 99.0, now=0.0).direction is Direction.HOLD  # stopped by its owner


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"max_replicas": 2, "min_replicas": 3}, InvalidAutoscaleBounds),
        ({"max_replicas": 2, "min_replicas": 0}, InvalidAutoscaleBounds),
        ({"max_replicas": 2, "up_pct": 120.0}, InvalidAutoscaleThreshold),
        ({"max_replicas": 2, "down_pct": -1.0}, InvalidAutoscaleThreshold),
        ({"max_replicas": 2, "up_pct": 30.0, "down_pct": 40.0}, InvalidAutoscaleThreshold),
        ({"max_replicas": 2, "cooldown_s": -5.0}, InvalidAutoscaleSetting),
    ],
)
def test_a_policy_that_cannot_hold_is_refused(kwargs: dict[str, float], error: type) -> None:
    with pytest.raises(error):
        ScalePolicy(**kwargs)  # type: ignore[arg-type]


def test_a_step_up_is_cut_to_the_room_and_held_without_any() -> None:
    step = decide(ScalePolicy(max_replicas=8), 2, 95.0, now=0.0)
    cut = within_room(step, 2, room=1)
    assert (cut.direction, cut.replicas) == (Direction.UP, 3) and "room for 1" in cut.reason
    none = within_room(step, 2, room=0)
    assert none.direction is Direction.HOLD and none.unhostable == 4
    assert within_room(step, 2, room=5) == step


@st.composite
def policies(draw: st.DrawFn) -> ScalePolicy:
    low = draw(st.integers(1, 20))
    high = draw(st.integers(low, 40))
    down = draw(st.floats(0.0, 99.0))
    up = draw(st.floats(down + 0.5, 100.0))
    return ScalePolicy(high, low, up, down, draw(st.floats(0.0, 3600.0)))


@given(
    policies(),
    st.integers(1, 60),
    st.one_of(st.none(), st.floats(0.0, 100.0)),
    st.floats(0.0, 1e6),
    st.one_of(st.none(), st.floats(0.0, 1e6)),
)
def test_properties(
    policy: ScalePolicy, replicas: int, util: float | None, now: float, last_at: float | None
) -> None:
    last = None if last_at is None else LastStep(last_at, replicas, replicas)
    step = decide(policy, replicas, util, now, last)
    if last is not None and now < last.at + policy.cooldown_s:
        assert step.direction is Direction.HOLD and step.replicas == replicas
    if step.direction is Direction.HOLD:
        assert step.replicas == replicas
        return
    assert policy.min_replicas <= step.replicas <= policy.max_replicas
    inside = policy.min_replicas <= replicas <= policy.max_replicas
    if step.direction is Direction.UP:
        assert replicas < step.replicas
        # a step on utilisation at most doubles; below the minimum it goes to the minimum
        assert step.replicas <= 2 * replicas or step.replicas == policy.min_replicas
        assert not inside or (util is not None and util > policy.up_pct)
        assert not inside or step.replicas <= 2 * replicas
    else:
        assert step.replicas < replicas
        assert not inside or (util is not None and util < policy.down_pct)


@given(policies(), st.integers(1, 60), st.floats(0.0, 100.0), st.integers(0, 80))
def test_room_never_raises_a_step_nor_lets_it_exceed_the_room(
    policy: ScalePolicy, replicas: int, util: float, room: int
) -> None:
    step = decide(policy, replicas, util, 0.0)
    cut = within_room(step, replicas, room)
    if step.direction is Direction.UP:
        assert replicas <= cut.replicas <= step.replicas
        assert cut.replicas - replicas <= room
    else:
        assert cut == step
