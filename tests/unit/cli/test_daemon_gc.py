"""Every daemon's event loop runs with the cyclic GC's young generation raised
(`cli.daemon.GC_YOUNG_THRESHOLD`: with Python's 700 the controller's full collections were half
of an admission round's CPU at 7,500 pods), the older generations' thresholds as they were."""

from __future__ import annotations

import gc

from gpupool.cli.daemon import GC_YOUNG_THRESHOLD, run_loop


def test_a_daemon_runs_with_the_young_generation_raised_and_the_older_kept() -> None:
    before = gc.get_threshold()
    seen: list[tuple[int, int, int]] = []

    async def main() -> None:
        seen.append(gc.get_threshold())

    try:
        gc.set_threshold(700, 11, 12)
        run_loop(main())
        assert seen == [(GC_YOUNG_THRESHOLD, 11, 12)]
    finally:
        gc.set_threshold(*before)
