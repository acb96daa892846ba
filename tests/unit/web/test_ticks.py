"""The web view's stepped clock (adapters/web/ticks.py)."""

from __future__ import annotations

from gpupool.adapters.web.ticks import stepped


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
