"""Feeds the extender's ClusterCache from the API server: list, then watch nodes, GpuNodes and
GpuLeases; relist everything on any watch error or end, and about every `resync_s` (the safety
net, jittered as the watch caches' relist: half an hour by default; drift is counted). At 7,500
leases a relist costs the extender about 6 s of CPU: every 5 minutes, as it was, that was most
of its CPU on a cluster at rest.

Nothing is decided from memory alone: on start the cache is empty and `ready` stays unset until
the first full list has been folded in, and bind re-reads the node's leases anyway.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import random
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from lightkube import AsyncClient, operators
from lightkube.resources.core_v1 import Node

from gpupool.adapters.kubernetes.decoded import read_pod
from gpupool.adapters.kubernetes.errors import InvalidObject
from gpupool.adapters.kubernetes.lease import lease_from_json
from gpupool.adapters.kubernetes.node import read_gpu_node, read_node
from gpupool.adapters.kubernetes.resources import GpuLease, GpuNode, to_dict
from gpupool.adapters.kubernetes.watch_cache import (
    GPULEASES,
    GPUNODES,
    NODES,
    RELIST_JITTER,
    RELIST_S,
    TENANT_PODS,
    list_objects,
)
from gpupool.state.cluster import ClusterCache, Drift
from gpupool.state.lease import LeaseRecord
from gpupool.state.pod_hold import held_by

log = logging.getLogger(__name__)

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
    ) -> None:
        self.client = client
        self.cache = cache
        self.resync_s = resync_s
        self.on_drift = on_drift
        self.ready = asyncio.Event()

    @staticmethod
    def _leases(items: Sequence[Mapping[str, Any]]) -> list[LeaseRecord]:
        out = []
        for item in items:
            try:
                out.append(lease_from_json(item))
            except InvalidObject as err:
                log.error("ignoring unreadable lease: %s", err)
        return out

    async def sync(self) -> dict[str, str]:
        """One full list of every kind folded into the cache; returns each kind's list version."""
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
        self.ready.set()
        return {"nodes": rv_nodes, "gpunodes": rv_gpunodes, "leases": rv_leases}

    async def _watch(
        self, res: Any, rv: str, apply: Callable[[str, dict[str, Any]], None], **kw: Any
    ) -> None:
        async for kind, obj in self.client.watch(res, resource_version=rv or None, **kw):
            apply(kind, to_dict(obj))

    def _on_node(self, kind: str, obj: dict[str, Any]) -> None:
        if kind == "DELETED":
            self.cache.delete_node(obj["metadata"]["name"])
        else:
            self.cache.set_node(read_node(obj))

    def _on_gpunode(self, kind: str, obj: dict[str, Any]) -> None:
        if kind == "DELETED":
            self.cache.delete_gpunode(obj["metadata"]["name"])
        else:
            self.cache.set_gpunode(read_gpu_node(obj))

    def _on_lease(self, kind: str, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        if kind == "DELETED":
            self.cache.lose_lease(key)  # held on while its pod is bound, until made again
            return
        try:
            self.cache.set_lease(lease_from_json(obj))
        except InvalidObject as err:
            log.error("ignoring unreadable lease: %s", err)

    async def run(self, stop: asyncio.Event) -> None:
        """Sync, watch, and start over on error or every resync period, until `stop` is set."""
        while not stop.is_set():
            try:
                versions = await self.sync()
            except Exception as err:
                log.warning("listing from the API server failed: %s; retrying", err)
                await _sleep_or_stop(stop, 2.0)
                continue
            watches: list[Awaitable[None]] = [
                self._watch(Node, versions["nodes"], self._on_node),
                self._watch(GpuNode, versions["gpunodes"], self._on_gpunode),
                self._watch(GpuLease, versions["leases"], self._on_lease, namespace="*"),
            ]
            tasks = [asyncio.ensure_future(w) for w in watches]
            stopper = asyncio.ensure_future(stop.wait())
            period = self.resync_s * random.uniform(1 - RELIST_JITTER, 1 + RELIST_JITTER)
            timer = asyncio.ensure_future(asyncio.sleep(period))
            done, _ = await asyncio.wait(
                [*tasks, stopper, timer], return_when=asyncio.FIRST_COMPLETED
            )
            for task in [*tasks, stopper, timer]:
                task.cancel()
            await asyncio.gather(*tasks, stopper, timer, return_exceptions=True)
            for task in done:
                if task in tasks and not task.cancelled() and task.exception() is not None:
                    log.warning("watch ended: %s; relisting", task.exception())
                    await _sleep_or_stop(stop, 1.0)


async def _sleep_or_stop(stop: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), timeout=seconds)
