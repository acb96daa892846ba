"""The web view's stepped clock (adapters/web/ticks.py)."""

from __future__ import annotations

import pytest

from gpupool.adapters.web.ticks import stepped, until_step


def test_the_clock_moves_in_whole_steps() -> None:
    now = [1_800_000_000.0]
    clock = stepped(lambda: now[0], 30.0)
    assert clock() == 1_800_000_000.0
    now[0] += 29.9
    assert clock() == 1_800_000_000.0  # within the step: the same `now` for every render
    now[0] += 0.1
    assert clock() == 1_800_000_030.0


def test_no_step_is_the_clock_itself() -> None:
    assert stepped(lambda: 12.5, 0.0)() == 12.5


def test_the_wait_ends_just_past_the_next_step() -> None:
    now = [1_800_000_010.0]
    wait = until_step(lambda: now[0], 30.0)
    assert 20.0 < wait() < 20.1
    now[0] += wait()
    assert stepped(lambda: now[0], 30.0)() == 1_800_000_030.0


def test_a_step_is_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        until_step(lambda: 0.0, 0.0)
