"""Runs the reconcilers: after any watched change (debounced) and at least every resync period.

A reconcile that fails is logged and retried on the next round; one reconciler failing never
stops the others. Every round rebuilds its view from the API server.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any

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
) -> None:
    wake = asyncio.Event()
    watcher = asyncio.create_task(watch(wake.set)) if watch is not None else None
    try:
        while not stop.is_set():
            wake.clear()
            for loop in loops:
                try:
                    await loop.reconcile()
                except asyncio.CancelledError:
                    raise
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
