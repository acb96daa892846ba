"""The web view's model fed by its watch cache: each change the cache hears (more than a
heartbeat) is queued as it comes, and at the next render decoded (`kubernetes.decoded`'s
readers, the ones `gpupool status` reads with) and folded into a `LiveStatus`, which rebuilds
only what the change reaches. A change whose decoded value is the one held (a write of fields
the views do not read) moves nothing: the render returns the same view and the source publishes
nothing.

An object that cannot be decoded is left out and named in the views' notes, as `read_views`
does; its last good value is not kept (the view must not show what the cluster no longer says).
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable, Mapping
from typing import Any

from gpupool.adapters.kubernetes.decoded import (
    lease_from_json,
    read_gpu_node,
    read_node,
    read_pod,
    read_quota,
)
from gpupool.adapters.kubernetes.views_read import quota_status
from gpupool.adapters.kubernetes.watch_cache import WatchCache
from gpupool.domain.errors import GpupoolError
from gpupool.state.objects import Change
from gpupool.state.views.live import LiveStatus
from gpupool.state.views.status import StatusView

KINDS = ("nodes", "gpunodes", "gpuleases", "pods", "gpuquotas")  # the notes' order


class CacheFeed:
    def __init__(self, cache: WatchCache, poke: Callable[[], None]) -> None:
        self._cache = cache
        self._poke = poke
        # appended on the event loop, taken by the render's thread (deque: both ends atomic)
        self._pending: collections.deque[Change] = collections.deque()
        self._live = LiveStatus()
        self._notes: dict[str, dict[str, str]] = {kind: {} for kind in KINDS}
        self.folded = 0  # changes folded in (the idle benchmark's count)
        cache.subscribe(self._heard, frozenset(KINDS))

    def _heard(self, change: Change) -> None:
        self._pending.append(change)
        self._poke()

    async def render(self, now: float) -> StatusView:
        """The views at `now`, once every kind's first list is in (the source's `render`)."""
        await asyncio.gather(*(r.synced.wait() for r in self._cache.reflectors.values()))
        return await asyncio.to_thread(self.render_now, now)

    def render_now(self, now: float) -> StatusView:
        while self._pending:
            self._fold(self._pending.popleft())
            self.folded += 1
        self._live.set_notes(tuple(n for kind in KINDS for n in self._notes[kind].values()))
        return self._live.view(now)

    def _fold(self, change: Change) -> None:
        kind, key, obj = change.kind, change.key, change.new
        if kind == "nodes":
            self._live.set_node(key, self._decode(kind, key, obj, read_node))
        elif kind == "gpunodes":
            self._live.set_gpunode(key, self._decode(kind, key, obj, read_gpu_node))
        elif kind == "gpuleases":
            self._live.set_lease(key, self._decode(kind, key, obj, lease_from_json))
        elif kind == "pods":
            self._live.set_pod(key, self._decode(kind, key, obj, read_pod))
        elif kind == "gpuquotas":
            quota = self._decode(kind, key, obj, read_quota)
            status = quota_status(obj.get("status")) if obj is not None else None
            self._live.set_quota(key, quota, status)

    def _decode(
        self,
        kind: str,
        key: str,
        obj: Mapping[str, Any] | None,
        read: Callable[[Mapping[str, Any]], Any],
    ) -> Any:
        notes = self._notes[kind]
        notes.pop(key, None)
        if obj is None:
            return None
        try:
            return read(obj)
        except GpupoolError as err:
            notes[key] = f"left out an unreadable object: {err}"
            return None
