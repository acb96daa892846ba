"""Runs the reconcilers: after any watched change (debounced) and at least every resync period.

Inside a round each loop contains its objects' failures (`controllers.contain`: an object that
fails is set aside with an Event and retried with backoff, the others go on); a reconcile that
still fails as a whole is logged, counted (`reconcile_failed(loop, "round")`) and retried on the
next round; one reconciler failing never stops the others. Each round's time is reported per
loop (`reconcile_took`, timed by the injected monotonic clock). Every round rebuilds its view
from the API server.

With leader election (`leading`), a replica reconciles only while it leads: a standby skips its
rounds (no reads, no writes) and wakes when `wake` is set (the elector's on_elected), so a new
leader starts at once from what the API server holds; nothing is kept in memory between rounds.
Leadership is checked again before each reconciler of a round, and the writes themselves are
refused once the term is over (ClusterApi's `may_write`): a lost lease ends the round.
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

log = logging.getLogger("gpupool.controller")


ROUND_KIND = "round"  # the kind a round's failure as a whole counts under


class RoundObserver(Protocol):
    """What the controller's metrics hear of the rounds (`ControllerMetrics`)."""

    def reconcile_took(self, loop: str, seconds: float) -> None: ...

    def reconcile_failed(self, loop: str, kind: str) -> None: ...


@dataclass(frozen=True, slots=True)
class Loop:
    name: str
    reconcile: Callable[[], Awaitable[object]]


async def run_loops(
    loops: Sequence[Loop],
    stop: asyncio.Event,
    *,
    resync_s: float = 5.0,
    debounce_s: float = 0.2,
    watch: Callable[[Callable[[], None]], Coroutine[Any, Any, None]] | None = None,
    leading: Callable[[], bool] | None = None,
    wake: asyncio.Event | None = None,
    observer: RoundObserver | None = None,
    monotonic: Callable[[], float] = time.monotonic,
) -> None:
    """`leading` None: always reconcile (one replica). `wake`, set from outside, starts a round
    at once (as a watched change does). `observer` hears each round's time and each round
    that failed as a whole, timed by `monotonic`."""
    wake = wake if wake is not None else asyncio.Event()
    watcher = asyncio.create_task(watch(wake.set)) if watch is not None else None
    led = False
    try:
        while not stop.is_set():
            wake.clear()
            for loop in loops:
                if leading is not None and not leading():
                    if led:
                        log.info("not leader any more: reconciling stops until elected again")
                    led = False
                    break
                if leading is not None and not led:
                    log.info("leader: reconciling")
                    led = True
                started = monotonic()
                try:
                    await loop.reconcile()
                except asyncio.CancelledError:
                    raise
                except NotLeader as err:
                    log.info("reconcile %s stopped: %s", loop.name, err)
                except Exception:
                    log.exception("reconcile %s failed; retrying next round", loop.name)
                    if observer is not None:
                        observer.reconcile_failed(loop.name, ROUND_KIND)
                if observer is not None:
                    observer.reconcile_took(loop.name, monotonic() - started)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(resync_s):
                    waiter = asyncio.create_task(wake.wait())
                    stopper = asyncio.create_task(stop.wait())
                    try:
                        await asyncio.wait({waiter, stopper}, return_when=asyncio.FIRST_COMPLETED)
                    finally:
                        waiter.cancel()
                        stopper.cancel()
            if not stop.is_set():
                await asyncio.sleep(debounce_s)
    finally:
        if watcher is not None:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await watcher
