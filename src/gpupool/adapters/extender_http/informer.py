"""Feeds the extender's ClusterCache from the API server: list, then watch nodes, GpuNodes and
GpuLeases through the watch caches' own stream (`watch_cache.WatchStream`: bookmarks, each
event decoded straight to a dict). A watch that ends or breaks is resumed from the last version
it saw, as the watch caches' reflectors do; everything is listed again only when a watch says
its version is gone (410) and about every `resync_s` (the safety net, jittered as the watch
caches' relist: half an hour by default; drift is counted). At 7,500 leases a relist costs the
extender about 6 s of CPU on its one event loop: on every broken watch, as it was, an API server
restart cost every extender replica that.

Nothing is decided from memory alone: on start the cache is empty and `ready` stays unset until
the first full list has been folded in, and bind re-reads the node's leases anyway.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from lightkube import AsyncClient, operators

from gpupool.adapters.kubernetes.decoded import read_pod
from gpupool.adapters.kubernetes.errors import InvalidObject
from gpupool.adapters.kubernetes.lease import lease_from_json
from gpupool.adapters.kubernetes.node import read_gpu_node, read_node
from gpupool.adapters.kubernetes.watch_cache import (
    GPULEASES,
    GPUNODES,
    NODES,
    RELIST_JITTER,
    RELIST_S,
    TENANT_PODS,
    Gone,
    Watched,
    WatchObserver,
    WatchStream,
    list_objects,
)
from gpupool.state.cluster import ClusterCache, Drift
from gpupool.state.lease import LeaseRecord
from gpupool.state.objects import Obj
from gpupool.state.pod_hold import held_by

log = logging.getLogger(__name__)

WATCHED_KINDS = (NODES.kind, GPUNODES.kind, GPULEASES.kind)  # what the extender watches
# the bound GPU pods (GPU pods carry their tenant's label): what they hold without a lease
BOUND_TENANT_PODS = replace(TENANT_PODS, fields={"spec.nodeName": operators.not_equal("")})


class Informer:
    def __init__(
        self,
        client: AsyncClient,
        cache: ClusterCache,
        *,
        resync_s: float = RELIST_S,
        on_drift: Callable[[Drift], None] | None = None,
        observer: WatchObserver | None = None,
    ) -> None:
        self.client = client
        self.cache = cache
        self.resync_s = resync_s
        self.on_drift = on_drift
        self.observer = observer
        self.ready = asyncio.Event()
        # each kind's watch, from its last list's version (made by `sync`)
        self.streams: dict[str, WatchStream] = {}
        self._folds: dict[str, Callable[[str, Obj], None]] = {
            NODES.kind: self._on_node, GPUNODES.kind: self._on_gpunode,
            GPULEASES.kind: self._on_lease,
        }  # fmt: skip

    @staticmethod
    def _leases(items: Sequence[Mapping[str, Any]]) -> list[LeaseRecord]:
        out = []
        for item in items:
            try:
                out.append(lease_from_json(item))
            except InvalidObject as err:
                log.error("ignoring unreadable lease: %s", err)
        return out

    async def sync(self) -> None:
        """One full list of every kind folded into the cache; each kind's watch goes on from
        its list's version."""
        # decoded straight to dicts (watch_cache.list_objects): through lightkube's models the
        # 5-minute resync cost seconds of CPU at thousands of pods and leases
        nodes, rv_nodes = await list_objects(self.client, NODES)
        gpunodes, rv_gpunodes = await list_objects(self.client, GPUNODES)
        leases, rv_leases = await list_objects(self.client, GPULEASES)
        pods, _ = await list_objects(self.client, BOUND_TENANT_PODS)
        held = [h for h in (held_by(read_pod(p)) for p in pods) if h is not None]
        drift = self.cache.rebuild(
            [read_node(n) for n in nodes],
            [read_gpu_node(n) for n in gpunodes],
            self._leases(leases),
            held=held,
        )
        self.cache.snapshot()
        # The cache is large and long-lived: keep the cyclic GC from walking it on every full
        # collection (those pauses showed as p99 spikes of 100+ ms at 5,000 nodes).
        gc.freeze()
        if drift.total and self.on_drift is not None:
            self.on_drift(drift)
        if drift.total:
            log.warning("resync found drift: %s", drift)
        self.streams = {
            w.kind: WatchStream(self.client, w, version)
            for w, version in ((NODES, rv_nodes), (GPUNODES, rv_gpunodes), (GPULEASES, rv_leases))
        }
        self.ready.set()

    async def follow(self, watched: Watched) -> None:
        """Fold `watched`'s events (NODES, GPUNODES or GPULEASES) into the cache for as long as
        the task runs, resuming its watch as `WatchStream.follow` does; raises Gone when its
        version is too old, for `run` to list everything again."""
        stream = self.streams[watched.kind]
        await stream.follow(self._folds[watched.kind], self.observer)

    def _on_node(self, kind: str, obj: Obj) -> None:
        if kind == "DELETED":
            self.cache.delete_node(obj["metadata"]["name"])
        else:
            self.cache.set_node(read_node(obj))

    def _on_gpunode(self, kind: str, obj: Obj) -> None:
        if kind == "DELETED":
            self.cache.delete_gpunode(obj["metadata"]["name"])
        else:
            self.cache.set_gpunode(read_gpu_node(obj))

    def _on_lease(self, kind: str, obj: Obj) -> None:
        meta = obj.get("metadata") or {}
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        if kind == "DELETED":
            self.cache.lose_lease(key)  # held on while its pod is bound, until made again
        else:  # one that cannot be read is logged and left out (`WatchStream.once`)
            self.cache.set_lease(lease_from_json(obj))

    async def run(self, stop: asyncio.Event) -> None:
        """Sync and follow every kind, until `stop` is set; list everything again when a watch's
        version is gone and every resync period."""
        while not stop.is_set():
            try:
                await self.sync()
            except Exception as err:
                log.warning("listing from the API server failed: %s; retrying", err)
                await _sleep_or_stop(stop, 2.0)
                continue
            tasks: dict[asyncio.Future[Any], Watched] = {
                asyncio.ensure_future(self.follow(w)): w for w in (NODES, GPUNODES, GPULEASES)
            }
            stopper = asyncio.ensure_future(stop.wait())
            period = self.resync_s * random.uniform(1 - RELIST_JITTER, 1 + RELIST_JITTER)
            timer = asyncio.ensure_future(asyncio.sleep(period))
            done, _ = await asyncio.wait(
                [*tasks, stopper, timer], return_when=asyncio.FIRST_COMPLETED
            )
            for task in [*tasks, stopper, timer]:
                task.cancel()
            await asyncio.gather(*tasks, stopper, timer, return_exceptions=True)
            self._say_why(done, tasks, timer)

    def _say_why(
        self, done: Iterable[asyncio.Future[Any]], tasks: Mapping[asyncio.Future[Any], Watched],
        timer: asyncio.Future[Any],
    ) -> None:  # fmt: skip
        """Counts and logs why everything is listed again: a watch's version gone, the resync
        period, or (not expected: `follow` resumes on its own) a watch that ended."""
        for task in done:
            watched = tasks.get(task)
            if task is timer and self.observer is not None:
                for kind in WATCHED_KINDS:
                    self.observer.relisted(kind)
            if watched is None or task.cancelled():
                continue
            err = task.exception()
            if isinstance(err, Gone):
                log.info("watch of %s: version gone (%s); listing again", watched.kind, err)
                if self.observer is not None:
                    self.observer.relisted(watched.kind)
            else:
                log.warning("watch of %s ended (%s); listing again", watched.kind, err)


async def _sleep_or_stop(stop: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), timeout=seconds)
