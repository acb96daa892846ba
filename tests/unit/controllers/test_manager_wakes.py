"""`run_loops` over the work queue: a watched change starts only the loops that wake on its kind;
a loop with nothing owed and its period far off does not run again."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from support.waiting import wait_until_async

from gpupool.controllers.manager import Loop, run_loops


def test_a_change_starts_only_the_loops_that_wake_on_its_kind() -> None:
    ran: list[str] = []

    async def main() -> None:
        stop = asyncio.Event()
        changes: asyncio.Queue[tuple[str, str]] = asyncio.Queue()

        async def watch(changed: Callable[[str, str], None]) -> None:
            while True:
                kind, key = await changes.get()
                changed(kind, key)

        def loop(name: str, kinds: set[str]) -> Loop:
            async def reconcile() -> None:
                ran.append(name)

            return Loop(name, reconcile, frozenset(kinds), period_s=3600.0)

        task = asyncio.ensure_future(
            run_loops(
                [loop("pods-loop", {"pods"}), loop("nodes-loop", {"nodes", "gpunodes"})],
                stop,
                resync_s=3600.0,
                debounce_s=0.0,
                watch=watch,
            )
        )
        await wait_until_async(lambda: len(ran) == 2, 5, "the first rounds")
        assert ran == ["pods-loop", "nodes-loop"]
        await changes.put(("pods", "t/p1"))
        await wait_until_async(lambda: len(ran) == 3, 5, "a round after the pod changed")
        await changes.put(("gpunodes", "n1"))
        await wait_until_async(lambda: len(ran) == 4, 5, "a round after the GpuNode changed")
        await changes.put(("deployments", "t/d"))  # nobody wakes on it
        await changes.put(("pods", "t/p2"))
        await wait_until_async(lambda: len(ran) == 5, 5, "a round after the second pod")
        stop.set()
        await asyncio.wait_for(task, 5)

    asyncio.run(main())
    assert ran == ["pods-loop", "nodes-loop", "pods-loop", "nodes-loop", "pods-loop"]
