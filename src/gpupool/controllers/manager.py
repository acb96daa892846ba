"""Runs the reconcilers, each when it is owed a round (`controllers.work_queue`): after a change
to a kind it wakes on (the process's watch cache; heartbeats do not count), when it is woken
from outside (the elector's on_elected), when the deadline its last round computed comes (its
`due_at`: the next lease expiry, grace end, heartbeat timeout, retry of an object set aside),
and at least every period of its own (the safety net, `resync_s`, in minutes). A loop with
nothing owed does not run: an idle cluster costs what the loops' deadlines ask for. A round
that fails as a whole is tried again after `retry_s`, doubling while it keeps failing.

Each round is told what it is owed for (`work_queue.Owed`): the watched changes since its last
round, or everything (its first round, a wake, its period, the round after one that failed as a
whole, whose keys went with it).

Inside a round each loop contains its objects' failures (`controllers.contain`: an object that
fails is set aside with an Event and retried with backoff, the others go on); a reconcile that
still fails as a whole is logged, counted (`reconcile_failed(loop, "round")`) and retried on the
next round; one reconciler failing never stops the others. Each round's time is reported per
loop (`reconcile_took`), and how long it waited in the queue (`queue_waited`) and how many loops
are owed a round (`queue_depth`), timed by the injected monotonic clock. The rounds read the
watch cache, not the API server: a round costs no LIST.

With leader election (`leading`), a replica reconciles only while it leads: a standby skips its
rounds (no writes) and wakes when `wake` is set, so a new leader starts at once with every loop
owed a round. Leadership is checked again before each reconciler of a round, and the writes
themselves are refused once the term is over (ClusterApi's `may_write`): a lost lease ends the
round.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from gpupool.adapters.kubernetes.leader import NotLeader
from gpupool.controllers.work_queue import EVERYTHING, LoopQueue, LoopSpec, Owed

log = logging.getLogger("gpupool.controller")


ROUND_KIND = "round"  # the kind a round's failure as a whole counts under


class RoundObserver(Protocol):
    """What the controller's metrics hear of the rounds (`ControllerMetrics`)."""

    def reconcile_took(self, loop: str, seconds: float) -> None: ...

    def reconcile_failed(self, loop: str, kind: str) -> None: ...

    def queue_waited(self, loop: str, seconds: float) -> None: ...

    def queue_depth(self, loops: int) -> None: ...


@dataclass(frozen=True, slots=True)
class Loop:
    name: str
    # A round: told what it is owed for (`Owed`: the changes since the last, or everything).
    reconcile: Callable[[Owed], Awaitable[object]]
    wakes_on: frozenset[str] = frozenset()  # watched kinds whose changes owe it a round
    period_s: float | None = None  # a round at least this often; None: run_loops' resync_s
    min_gap_s: float = 0.0  # a round at most this often (`LoopSpec.min_gap_s`)
    # After a round: the wall-clock time its timed work next comes due, as that round saw it
    # (None: nothing timed; the loop waits for a change or its period).
    due_at: Callable[[], float | None] | None = None


Changed = Callable[[str, str], None]  # (kind, key) of a watched object that changed


def whole(reconcile: Callable[[], Awaitable[object]]) -> Callable[[Owed], Awaitable[object]]:
    """A loop that decides over its whole snapshot whatever changed."""

    async def round_(_owed: Owed) -> object:
        return await reconcile()

    return round_


async def run_loops(
    loops: Sequence[Loop],
    stop: asyncio.Event,
    *,
    resync_s: float = 300.0,
    debounce_s: float = 0.05,
    retry_s: float = 5.0,
    watch: Callable[[Changed], Coroutine[Any, Any, None]] | None = None,
    leading: Callable[[], bool] | None = None,
    wake: asyncio.Event | None = None,
    observer: RoundObserver | None = None,
    monotonic: Callable[[], float] = time.monotonic,
    wall: Callable[[], float] = time.time,
) -> None:
    """`watch(changed)` runs for as long as the loops do and calls `changed(kind, key)` for each
    watched change. `leading` None: always reconcile (one replica). `wake`, set from outside,
    owes every loop a round at once. `observer` hears each round's time, its wait in the queue
    and each round that failed as a whole, timed by `monotonic`."""
    wake = wake if wake is not None else asyncio.Event()
    poke = asyncio.Event()  # something is owed
    queue = LoopQueue(
        (LoopSpec(lp.name, lp.wakes_on, lp.period_s or resync_s, lp.min_gap_s) for lp in loops),
        monotonic(),
    )
    by_name = {lp.name: lp for lp in loops}
    failures: dict[str, int] = {}  # loop -> its rounds failed in a row

    def next_due(loop: Loop, failed: bool, ended: float, began_wall: float) -> float | None:
        """The monotonic time the loop's timed work comes due after its round (begun at wall
        time `began_wall`) ended at `ended`."""
        if failed:
            n = failures[loop.name] = failures.get(loop.name, 0) + 1
            backoff: float = retry_s * 2.0 ** min(n - 1, 10)
            return ended + min(backoff, resync_s)
        failures.pop(loop.name, None)
        at = loop.due_at() if loop.due_at is not None else None
        if at is None:
            return None
        if at <= began_wall:  # due before the round began and still due: not a reason to spin
            return ended + min(retry_s, resync_s)
        return ended + max(0.0, float(at) - wall())

    def changed(kind: str, key: str) -> None:
        if queue.mark(kind, key, monotonic()):
            poke.set()

    watcher = asyncio.create_task(watch(changed)) if watch is not None else None
    led = False
    try:
        while not stop.is_set():
            if wake.is_set():
                wake.clear()
                queue.mark_all(monotonic())
            poke.clear()
            if observer is not None:
                observer.queue_depth(queue.depth())
            standing_by = False
            for name in queue.due(monotonic()):
                loop = by_name[name]
                if leading is not None and not leading():
                    if led:
                        log.info("not leader any more: reconciling stops until elected again")
                    led = False
                    standing_by = True
                    break
                if leading is not None and not led:
                    log.info("leader: reconciling")
                    led = True
                started = monotonic()
                # a round after one that failed as a whole is owed everything (its keys are gone)
                owed = EVERYTHING if name in failures else queue.owed(name, started)
                some = queue.keys(name) if log.isEnabledFor(logging.DEBUG) else []
                waited, changes = queue.start(name, started)
                log.debug("round %s: %d watched changes (%s), owed for %.2f s",
                          name, changes, ", ".join(some), waited)  # fmt: skip
                if observer is not None:
                    observer.queue_waited(name, waited)
                failed = False
                began_wall = wall()
                try:
                    await loop.reconcile(owed)
                except asyncio.CancelledError:
                    raise
                except NotLeader as err:
                    log.info("reconcile %s stopped: %s", loop.name, err)
                except Exception:
                    failed = True
                    log.exception("reconcile %s failed; retrying", loop.name)
                    if observer is not None:
                        observer.reconcile_failed(loop.name, ROUND_KIND)
                ended = monotonic()
                if observer is not None:
                    observer.reconcile_took(loop.name, ended - started)
                try:
                    queue.schedule(name, next_due(loop, failed, ended, began_wall))
                except Exception:  # a deadline that cannot be computed: the period stands
                    log.exception("the next deadline of %s could not be computed", loop.name)
            if standing_by:
                queue.mark_all(monotonic())  # a standby owes every loop a round once elected
                pause = min(resync_s, retry_s)
            else:
                pause = queue.wait_s(monotonic())
            if pause > 0:  # else a loop is owed a round already (a change during this one)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(pause):
                        await _first(wake, poke, stop)
            if not stop.is_set():
                await asyncio.sleep(debounce_s)
    finally:
        if watcher is not None:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await watcher


async def _first(*events: asyncio.Event) -> None:
    """Until any of `events` is set."""
    waiters = [asyncio.create_task(e.wait()) for e in events]
    try:
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()
