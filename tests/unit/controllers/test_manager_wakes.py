"""`run_loops` over the work queue: a watched change starts only the loops that wake on its kind;
a loop with nothing owed and its period far off does not run again."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from typing import Any

from support.waiting import wait_until_async

from gpupool.controllers.manager import Loop, run_loops, whole
from gpupool.controllers.work_queue import EVERYTHING, Owed


def fed_by(
    changes: asyncio.Queue[tuple[str, str]],
) -> Callable[[Callable[[str, str], None]], Coroutine[Any, Any, None]]:
    """A watch for `run_loops` that hands on each (kind, key) put on `changes`."""

    async def watch(changed: Callable[[str, str], None]) -> None:
        while True:
            kind, key = await changes.get()
            changed(kind, key)

    return watch


def test_a_change_starts_only_the_loops_that_wake_on_its_kind() -> None:
    ran: list[str] = []

    async def main() -> None:
        stop = asyncio.Event()
        changes: asyncio.Queue[tuple[str, str]] = asyncio.Queue()
        watch = fed_by(changes)

        def loop(name: str, kinds: set[str]) -> Loop:
            async def reconcile() -> None:
                ran.append(name)

            return Loop(name, whole(reconcile), frozenset(kinds), period_s=3600.0)

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


def test_a_loop_runs_again_when_the_deadline_its_round_computed_comes() -> None:
    """No change and the period an hour off: only the deadline (0.1 s after the first round,
    none after the second) starts the second round, and nothing a third."""
    ran: list[float] = []

    async def main() -> None:
        stop = asyncio.Event()

        async def reconcile() -> None:
            ran.append(time.monotonic())

        def due_at() -> float | None:
            return time.time() + 0.1 if len(ran) == 1 else None

        task = asyncio.ensure_future(
            run_loops([Loop("timed", whole(reconcile), due_at=due_at)], stop, resync_s=3600.0,
                      debounce_s=0.0)
        )  # fmt: skip
        await wait_until_async(lambda: len(ran) == 2, 5, "the round at the deadline")
        await asyncio.sleep(0.3)  # a third round would come now if anything owed one
        stop.set()
        await asyncio.wait_for(task, 5)

    asyncio.run(main())
    assert len(ran) == 2


def test_a_round_that_fails_as_a_whole_is_retried_after_retry_s_not_the_period() -> None:
    calls: list[int] = []

    async def main() -> None:
        stop = asyncio.Event()

        async def reconcile() -> None:
            calls.append(1)
            if len(calls) == 1:
                raise RuntimeError("the API server is away")

        task = asyncio.ensure_future(
            run_loops([Loop("flaky", whole(reconcile))], stop, resync_s=3600.0, debounce_s=0.0,
                      retry_s=0.05)
        )  # fmt: skip
        await wait_until_async(lambda: len(calls) == 2, 5, "the retry")
        stop.set()
        await asyncio.wait_for(task, 5)

    asyncio.run(main())
    assert len(calls) == 2


def test_a_deadline_that_was_due_before_the_round_and_still_is_waits_retry_s() -> None:
    """A due_at the round did not move (an object due but not in play): the loop does not spin;
    it runs again after retry_s (an hour here), so only the first round runs."""
    ran: list[int] = []

    async def main() -> None:
        stop = asyncio.Event()

        async def reconcile() -> None:
            ran.append(1)

        task = asyncio.ensure_future(
            run_loops([Loop("stale", whole(reconcile), due_at=lambda: 0.0)], stop, resync_s=3600.0,
                      debounce_s=0.0, retry_s=3600.0)
        )  # fmt: skip
        await wait_until_async(lambda: len(ran) == 1, 5, "the first round")
        await asyncio.sleep(0.3)  # a spinning loop would run many rounds now
        stop.set()
        await asyncio.wait_for(task, 5)

    asyncio.run(main())
    assert ran == [1]


def test_a_round_hears_the_changes_it_is_owed_and_everything_after_a_failed_round() -> None:
    heard: list[Owed] = []

    async def main() -> None:
        stop = asyncio.Event()
        changes: asyncio.Queue[tuple[str, str]] = asyncio.Queue()
        watch = fed_by(changes)

        async def reconcile(owed: Owed) -> None:
            heard.append(owed)
            if len(heard) == 2:
                raise RuntimeError("the API server is away")

        task = asyncio.ensure_future(
            run_loops([Loop("per-node", reconcile, frozenset({"gpunodes"}))], stop,
                      resync_s=3600.0, debounce_s=0.0, retry_s=0.05, watch=watch)
        )  # fmt: skip
        await wait_until_async(lambda: len(heard) == 1, 5, "the first round")
        await changes.put(("gpunodes", "n1"))
        await wait_until_async(lambda: len(heard) == 3, 5, "the change's round and its retry")
        stop.set()
        await asyncio.wait_for(task, 5)

    asyncio.run(main())
    assert heard[0] == EVERYTHING
    assert heard[1] == Owed(frozenset({("gpunodes", "n1")}), everything=False)
    assert heard[2] == EVERYTHING  # the failed round's keys are gone with it
