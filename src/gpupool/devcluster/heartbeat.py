"""Fake node agents for the dev cluster: one GpuNode per kwok node, and its heartbeat Lease.

A real `gpupool agent` is a kubelet device plugin: it registers over the kubelet's gRPC socket on
its node, and kwok nodes have no kubelet. So the dev cluster runs this loop instead, in one
process (`gpupool dev-cluster heartbeat`, started by `up`): it keeps the kwok nodes (label
`type=kwok`), the GpuNodes and the ResourceSlices by watch (one LIST of each at start, then a
WATCH each, as the controller's cache does), and every `interval_s` (by default the real agent's
period, `DEFAULT_HEARTBEAT_S`), for each fake GPU node
(label `gpupool.io/gpu-model`), renews the node's Lease (namespace
gpupool-node-lease, the heartbeat the controller's node health reads) and builds each node's
report from its labels exactly as `gpupool agent --fake-gpus` would (same card uuids, reserve
and status fields): the GpuNode is created when missing and its status written only when it
differs from that report, as the real agent does. It also looks for other paths handing out
each node's cards (a device plugin's `nvidia.com/gpu` patched into the Node, another DRA driver's
ResourceSlice) and writes the GpuNode's `OtherGpuPath` condition and the Node's Event as the real
agent does (`adapters.kubernetes.gpu_paths`), from the watched objects: no LIST per beat.

A GpuNode annotated `gpupool.io/fake-heartbeat: paused` is skipped: that node stops
heartbeating, as if its agent died (`kubectl annotate gpunode NODE gpupool.io/fake-heartbeat=
paused`; remove the annotation to resume). A node that appears between rounds gets its first
beat at once (a second after it appears, with the others that came with it), as its agent would
on starting: `up` waits for every node's GpuNode, and a whole period would hold it up.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Node
from lightkube.types import PatchType

from gpupool.adapters.kubeclient import async_client
from gpupool.adapters.kubernetes.gpu_paths import (
    SLICES_KIND,
    GpuPathWriter,
    ResourceSlice,
    decide,
)
from gpupool.adapters.kubernetes.node_lease import lease_duration_s, renew_node_lease
from gpupool.adapters.kubernetes.reporter import gpunode_status, status_differs
from gpupool.adapters.kubernetes.resources import GpuNode
from gpupool.adapters.kubernetes.watch_cache import GPUNODES, WatchCache, Watched
from gpupool.adapters.wire.names import (
    ANN_FAKE_HEARTBEAT,
    API_VERSION,
    LABEL_GPU_COUNT,
    LABEL_GPU_MEMORY,
    LABEL_GPU_MODEL,
)
from gpupool.domain.errors import GpupoolError
from gpupool.domain.heartbeat import DEFAULT_HEARTBEAT_S
from gpupool.domain.reserve import DEFAULT_RESERVE_PCT
from gpupool.node.agent import node_report
from gpupool.node.nvml.fake import FakeInventory
from gpupool.rfc3339 import format_time

log = logging.getLogger("gpupool.devcluster.heartbeat")

PAUSE_ANNOTATION = ANN_FAKE_HEARTBEAT
PAUSED = "paused"
HOLDER = "gpupool-fake-agent"


def fake_gpu_spec(node: Mapping[str, Any]) -> str | None:
    """`8xA100-80GB` from a fake node's labels; None for a node without GPUs, or with a model
    whose memory size is not known (the dev cluster labels memory only for known models)."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    model = labels.get(LABEL_GPU_MODEL)
    count = labels.get(LABEL_GPU_COUNT, "1")
    if not model or LABEL_GPU_MEMORY not in labels:
        return None
    if not str(count).isdigit() or int(count) < 1:
        return None
    return f"{int(count)}x{model}"


def is_paused(gpunode: Mapping[str, Any] | None) -> bool:
    annotations = ((gpunode or {}).get("metadata") or {}).get("annotations") or {}
    return annotations.get(PAUSE_ANNOTATION) == PAUSED


def fake_status(name: str, spec: str, reserve_pct: float = DEFAULT_RESERVE_PCT) -> dict[str, Any]:
    """The GpuNode status `gpupool agent --fake-gpus SPEC --node-name NAME` would publish."""
    inventory = FakeInventory.from_spec(spec, node=name)
    try:
        report = node_report(name, inventory.devices(), inventory.facts(), reserve_pct)
    finally:
        inventory.close()
    return gpunode_status(report)


# What the fake agents keep by watch (their ServiceAccount may list and watch each).
KWOK_NODES = Watched("nodes", Node, False, {"type": "kwok"})
FAKE_AGENT_KINDS = (KWOK_NODES, GPUNODES, Watched(SLICES_KIND, ResourceSlice, False))


class FakeHeartbeats:
    """One beat: every fake GPU node's Lease renewed, its GpuNode created if missing and its
    status written if it differs from the node's report. The nodes, GpuNodes and ResourceSlices
    come from `cache` (kept by `run_heartbeats`), never listed per beat."""

    def __init__(
        self,
        client: AsyncClient,
        cache: WatchCache,
        *,
        reserve_pct: float = DEFAULT_RESERVE_PCT,
        interval_s: float = DEFAULT_HEARTBEAT_S,
    ) -> None:
        self.client = client
        self.cache = cache
        self.reserve_pct = reserve_pct
        self.interval_s = interval_s
        self.lease_duration_s = lease_duration_s(interval_s)
        self._paused: set[str] = set()
        self._beaten: set[str] = set()  # the nodes that had a beat: a node new to us gets one
        self._limit = asyncio.Semaphore(32)
        self._paths_writer = GpuPathWriter(client, component="gpupool-fake-agent")

    async def beat(self, *, new_only: bool = False) -> list[str]:
        """One heartbeat per unpaused fake GPU node (`new_only`: per node that never had one);
        return the names that beat."""
        nodes = await self.cache.values(KWOK_NODES.kind)
        gpunodes = {str(g["metadata"]["name"]): g for g in await self.cache.values(GPUNODES.kind)}
        slices = self._slices()
        now = time.time()
        jobs = []
        for node in nodes:
            name = str(node["metadata"]["name"])
            spec = fake_gpu_spec(node)
            if spec is None or (new_only and name in self._beaten):
                continue
            gpunode = gpunodes.get(name)
            if is_paused(gpunode):
                if name not in self._paused:
                    log.warning(
                        "GpuNode %s: heartbeat paused (annotation %s)", name, PAUSE_ANNOTATION
                    )
                    self._paused.add(name)
                continue
            if name in self._paused:
                log.warning("GpuNode %s: heartbeat resumed", name)
                self._paused.discard(name)
            jobs.append(self._publish(name, spec, gpunode, now=now))
            if slices is not None:
                jobs.append(self._paths(node, spec, gpunode, slices, now=now))
        results = await asyncio.gather(*jobs, return_exceptions=True)
        published = []
        for result in results:
            if isinstance(result, BaseException):
                log.warning("heartbeat failed: %s", result)
            elif result:
                published.append(result)
        self._beaten.update(published)
        return published

    def _slices(self) -> list[Mapping[str, Any]] | None:
        """Every ResourceSlice (the paths check reads those on each node); None until they are
        in (never, on an API server without resource.k8s.io/v1: the cache logs why)."""
        if not self.cache.reflectors[SLICES_KIND].synced.is_set():
            return None
        return self.cache.stores[SLICES_KIND].values()

    async def _paths(
        self,
        node: Mapping[str, Any],
        spec: str,
        gpunode: Mapping[str, Any] | None,
        slices: list[Mapping[str, Any]],
        *,
        now: float,
    ) -> str:
        """What the agent's look for other GPU paths would say, for a fake node (its GpuNode
        as read at the start of the beat: a change lands at the next)."""
        async with self._limit:
            name = str(node["metadata"]["name"])
            uuids = [d["uuid"] for d in fake_status(name, spec, self.reserve_pct)["devices"]]
            finding = decide(name, node, slices, uuids)
            await self._paths_writer.say(finding, node, gpunode, format_time(now))
            return ""

    async def _publish(
        self, name: str, spec: str, gpunode: Mapping[str, Any] | None, *, now: float
    ) -> str:
        async with self._limit:
            status = fake_status(name, spec, self.reserve_pct)
            if gpunode is None:
                try:
                    await self.client.create(
                        GpuNode(
                            apiVersion=API_VERSION,
                            kind="GpuNode",
                            metadata={"name": name},
                            spec={},
                        )
                    )
                except ApiError as err:
                    if err.status.code != 409:
                        raise
            if gpunode is None or status_differs(gpunode.get("status"), status):
                await self.client.patch(
                    GpuNode.Status, name, {"status": status}, patch_type=PatchType.MERGE
                )
            # after the GpuNode: a cluster without the Leases' namespace still gets GpuNodes
            await renew_node_lease(
                self.client, name, holder=HOLDER, duration_s=self.lease_duration_s, now=now
            )
            return name


ARRIVAL_GATHER_S = 1.0  # after a node appears, how long to let others that come with it gather


async def run_heartbeats(
    kubeconfig: Path | None,
    stop: asyncio.Event,
    *,
    interval_s: float = DEFAULT_HEARTBEAT_S,
    reserve_pct: float = DEFAULT_RESERVE_PCT,
) -> None:
    """Beat every `interval_s` until `stop` is set (a failed beat is logged and retried); a node
    that appears in between gets its first beat at once, as its agent would on starting."""
    client = async_client(kubeconfig, field_manager="gpupool-fake-agent")
    cache = WatchCache(client, FAKE_AGENT_KINDS)
    beats = FakeHeartbeats(client, cache, reserve_pct=reserve_pct, interval_s=interval_s)
    arrived = asyncio.Event()
    cache.subscribe(
        lambda change: arrived.set() if change.old is None else None, frozenset({KWOK_NODES.kind})
    )
    watching = asyncio.create_task(cache.run(stop))
    try:
        await _synced_or_stop(cache, stop)
        await beat_rounds(_logged(beats), stop, arrived, interval_s)
    finally:
        watching.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watching
        await client.close()


def _logged(beats: FakeHeartbeats) -> Callable[[bool], Awaitable[None]]:
    """`beats.beat`, its failures logged (the next round retries), the first round announced."""
    first = [True]

    async def beat(new_only: bool) -> None:
        try:
            published = await beats.beat(new_only=new_only)
            if first[0] and not new_only:
                log.info("%d fake GPU node(s) beating every %gs", len(published), beats.interval_s)
                first[0] = False
        except (ApiError, GpupoolError, OSError) as err:
            log.warning("heartbeat round failed: %s; retrying", err)
        except Exception as err:  # the httpx transport's errors, among others
            log.warning("heartbeat round failed: %r; retrying", err)

    return beat


async def beat_rounds(
    beat: Callable[[bool], Awaitable[None]],
    stop: asyncio.Event,
    arrived: asyncio.Event,
    interval_s: float,
    gather_s: float = ARRIVAL_GATHER_S,
) -> None:
    """`beat(False)` (every node) every `interval_s`, and `beat(True)` (the nodes never beaten)
    `gather_s` after `arrived` is set between rounds; until `stop` is set."""
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        arrived.clear()
        await beat(False)
        due = loop.time() + interval_s
        while not stop.is_set() and (left := due - loop.time()) > 0:
            if await _set_first(arrived, stop, left) is arrived:
                with contextlib.suppress(TimeoutError):  # let the nodes that come with it gather
                    await asyncio.wait_for(stop.wait(), timeout=gather_s)
                arrived.clear()
                if not stop.is_set():
                    await beat(True)


async def _set_first(
    one: asyncio.Event, other: asyncio.Event, timeout_s: float
) -> asyncio.Event | None:
    """Whichever of `one` and `other` is set first within `timeout_s` (None: neither)."""
    waits = {asyncio.ensure_future(one.wait()): one, asyncio.ensure_future(other.wait()): other}
    done, pending = await asyncio.wait(
        list(waits), timeout=max(timeout_s, 0.0), return_when=asyncio.FIRST_COMPLETED
    )
    for task in pending:
        task.cancel()
    return next((waits[t] for t in waits if t in done), None)


async def _synced_or_stop(cache: WatchCache, stop: asyncio.Event) -> None:
    """Until the nodes and GpuNodes are in (the first beat needs them), or `stop` is set. The
    ResourceSlices are not waited for: an API server may not serve them."""
    synced = asyncio.gather(
        *(cache.reflectors[w.kind].synced.wait() for w in (KWOK_NODES, GPUNODES))
    )
    stopping = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait((synced, stopping), return_when=asyncio.FIRST_COMPLETED)
    finally:
        synced.cancel()
        stopping.cancel()
