"""The web view's one copy of the cluster: the same `StatusView` the terminal views print,
numbered, and handed to every open page.

Where the views come from is a `render(now)`: in `gpupool web` the model kept between renders
(`feed.CacheFeed`: the watch cache's changes folded into `state.views.live.LiveStatus`); in tests
and benchmarks also a plain read of the whole cluster, built afresh (`StateSource.reading`).

A render runs soon after a watch saw a change (`poke`, then `DEBOUNCE_S` for its neighbours), and
when the view's stepped clock moves (`ticks.py`: what moves with time moves once a step). A render
that returns the view the source already holds (nothing shown moved: an object written again the
same, a change the view does not show) publishes nothing: no new version, no work for the pages.
A render that fails keeps the last view and says so in its notes; pages are never left with
nothing but an error unless no render ever succeeded.
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

DEBOUNCE_S = 0.3  # after a watch event, wait this long for its neighbours before rendering

Render = Callable[[float], Awaitable[StatusView]]


@dataclass(frozen=True, slots=True)
class Snapshot:
    version: int
    view: StatusView | None  # None until a render succeeded
    error: str | None  # the last render's failure, when it failed


class StateSource:
    """`render(now)` gives the views at `now` (`clock`'s); `until_step()` says how long until
    the clock's next step (None: render at least every `resync_s`)."""

    def __init__(
        self,
        render: Render,
        clock: Callable[[], float],
        *,
        resync_s: float = 5.0,
        until_step: Callable[[], float] | None = None,
    ) -> None:
        self._render = render
        self._clock = clock
        self._resync_s = resync_s
        self._until_step = until_step
        self._snapshot = Snapshot(0, None, None)
        self._changed = asyncio.Condition()
        self._poked = asyncio.Event()
        self.ready = asyncio.Event()  # set after the first good render
        self.renders = 0  # renders run (published or not): what the idle benchmark counts

    @classmethod
    def reading(
        cls,
        read: Callable[[], Awaitable[ViewInputs]],
        clock: Callable[[], float],
        *,
        resync_s: float = 5.0,
    ) -> StateSource:
        """A source that reads the whole cluster and builds the views afresh on each render."""

        async def render(now: float) -> StatusView:
            inputs = await read()
            return await asyncio.to_thread(build_status, inputs, now)

        return cls(render, clock, resync_s=resync_s)

    @property
    def current(self) -> Snapshot:
        return self._snapshot

    def poke(self) -> None:
        """Something changed: render again soon."""
        self._poked.set()

    async def refresh(self) -> Snapshot:
        """Render once; publish the result when it is not the view already held."""
        previous = self._snapshot
        self.renders += 1
        try:
            view = await self._render(self._clock())
            if view is previous.view and previous.error is None:
                return previous  # nothing shown moved
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

    def _wait_s(self) -> float:
        return self._until_step() if self._until_step is not None else self._resync_s

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            self._poked.clear()
            await self.refresh()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._poked.wait(), self._wait_s())
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
