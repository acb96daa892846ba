"""Runs the reconcilers: after any watched change (debounced) and at least every resync period.

A reconcile that fails is logged and retried on the next round; one reconciler failing never
stops the others. Every round rebuilds its view from the API server.

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
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any

from gpupool.adapters.kubernetes.leader import NotLeader

log = logging.getLogger("gpupool.controller")


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
) -> None:
    """`leading` None: always reconcile (one replica). `wake`, set from outside, starts a round
    at once (as a watched change does)."""
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
                try:
                    await loop.reconcile()
                except asyncio.CancelledError:
                    raise
                except NotLeader as err:
                    log.info("reconcile %s stopped: %s", loop.name, err)
                except Exception:
                    log.exception("reconcile %s failed; retrying next round", loop.name)
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
