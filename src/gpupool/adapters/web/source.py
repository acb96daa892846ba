"""The web view's one copy of the cluster: read with the web view's identity (the same read as
`gpupool status`, `views_read.read_views`), turned into the same `StatusView` the terminal views
print (`build_status`), numbered, and handed to every open page.

A new read starts every `resync_s`, or soon after a watch saw a GpuLease, pod or GpuQuota change
(`poke`), so a pod placed while a page is open shows within a second or two. A read that fails
keeps the last view and says so in its notes; pages are never left with nothing but an error
unless no read ever succeeded.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace

from gpupool.domain.errors import GpupoolError
from gpupool.state.views.status import StatusView, ViewInputs, build_status

log = logging.getLogger("gpupool.web")

DEBOUNCE_S = 0.3  # after a watch event, wait this long for its neighbours before reading


@dataclass(frozen=True, slots=True)
class Snapshot:
    version: int
    view: StatusView | None  # None until a read succeeded
    error: str | None  # the last read's failure, when it failed


class StateSource:
    def __init__(
        self,
        read: Callable[[], Awaitable[ViewInputs]],
        clock: Callable[[], float],
        *,
        resync_s: float = 5.0,
    ) -> None:
        self._read = read
        self._clock = clock
        self._resync_s = resync_s
        self._snapshot = Snapshot(0, None, None)
        self._changed = asyncio.Condition()
        self._poked = asyncio.Event()
        self.ready = asyncio.Event()  # set after the first good read

    @property
    def current(self) -> Snapshot:
        return self._snapshot

    def poke(self) -> None:
        """Something changed: read again soon."""
        self._poked.set()

    async def refresh(self) -> Snapshot:
        """Read the cluster once and publish the result."""
        previous = self._snapshot
        try:
            inputs = await self._read()
            view = await asyncio.to_thread(build_status, inputs, self._clock())
            snapshot = Snapshot(previous.version + 1, view, None)
            self.ready.set()
        except GpupoolError as err:
            log.warning("reading the cluster failed: %s", err)
            old = previous.view
            if old is not None:
                note = f"the last read of the cluster failed ({err}); showing the one before"
                old = replace(old, notes=(*old.notes, note))
            snapshot = Snapshot(previous.version + 1, old, str(err))
        async with self._changed:
            self._snapshot = snapshot
            self._changed.notify_all()
        return snapshot

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            self._poked.clear()
            await self.refresh()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._poked.wait(), self._resync_s)
                await asyncio.sleep(DEBOUNCE_S)

    async def after(self, version: int, timeout_s: float) -> Snapshot | None:
        """The first snapshot newer than `version`; None when none came within `timeout_s`."""
        async with self._changed:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    self._changed.wait_for(lambda: self._snapshot.version > version), timeout_s
                )
            snapshot = self._snapshot
        return snapshot if snapshot.version > version else None
