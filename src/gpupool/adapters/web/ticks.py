"""The web view's clock, read in whole steps of the resync period.

What moves with time (each live lease's held time and GiB-hours, the tenants' sums, a queued pod's
wait) is figured at the snapshot's `now`. Were `now` the moment of each render, every render a
change triggers would move those figures on every lease, and the live stream's patch for one pod
placed would carry two numbers per live lease (about 900 KB at 1,213 nodes and 12,130 leases,
bench/web_state.py). Read in steps, renders within one step share `now`: a change sends only what
it changed, and time moves the figures once per step, as the periodic render always did. The page
says the `now` its figures are at."""

from __future__ import annotations

import math
from collections.abc import Callable


def stepped(clock: Callable[[], float], step_s: float) -> Callable[[], float]:
    """`clock` read down to the last whole multiple of `step_s` (`clock` itself when not > 0)."""
    if not step_s > 0:
        return clock

    def read() -> float:
        return math.floor(clock() / step_s) * step_s

    return read


def until_step(clock: Callable[[], float], step_s: float) -> Callable[[], float]:
    """Seconds from `clock` to just past its next whole multiple of `step_s` (`step_s` > 0): when
    the view renders for the clock's next step, that step has begun."""
    if not step_s > 0:
        raise ValueError(f"a step is a positive number of seconds, not {step_s}")

    def read() -> float:
        return step_s - clock() % step_s + 0.01

    return read
