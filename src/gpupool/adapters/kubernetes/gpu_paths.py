"""The agent's look for other paths handing out its node's cards (`domain.gpu_paths` decides).

`GpuPathWatch` keeps the node's Node (its extended resources), the ResourceSlices on it and its
GpuNode by watch, decides when one of them changes in a way that matters, and, when the finding
differs from what the GpuNode says, writes the GpuNode's `OtherGpuPath` condition (True:
placement refuses the node) and records an Event on the Node. The dev cluster's fake agents
(`devcluster.heartbeat`) decide with `decide` and write with `GpuPathWriter` for each kwok node.
RBAC: list and watch nodes, resourceslices and gpunodes; patch gpunodes/status; create events.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from lightkube import AsyncClient, codecs
from lightkube.core.exceptions import ApiError
from lightkube.generic_resource import create_global_resource
from lightkube.resources.core_v1 import Node
from lightkube.types import PatchType

from gpupool.adapters.kubernetes.resources import GpuNode
from gpupool.adapters.kubernetes.watch_cache import WatchCache, Watched
from gpupool.adapters.wire.conditions import find_condition, with_condition
from gpupool.adapters.wire.names import (
    COND_OTHER_GPU_PATH,
    DRA_DRIVER,
    EVENT_OTHER_GPU_PATH,
    EVENT_OTHER_GPU_PATH_GONE,
    NVIDIA_RESOURCE_PREFIX,
    REASON_ONLY_GPUPOOL,
    REASON_OTHER_DEVICE_PLUGIN,
    REASON_OTHER_DRA_DRIVER,
    REASON_OTHER_GPU_PATHS,
    RES_VGPU,
)
from gpupool.domain.errors import GpupoolError
from gpupool.domain.gpu_paths import PathFinding, PathKind, PublishedSlice, find_paths
from gpupool.domain.quantity import parse_quantity
from gpupool.state.objects import Change

log = logging.getLogger(__name__)

ResourceSlice: Any = create_global_resource(
    "resource.k8s.io", "v1", "ResourceSlice", "resourceslices"
)
Json = Mapping[str, Any]

# What the agent keeps in its cache (`watched_for`), by kind.
NODE_KIND, SLICES_KIND, GPUNODE_KIND = "node", "resourceslices", "gpunode"
# A failed write is tried again after this long (a change in between tries it sooner).
RETRY_S = 30.0
# The agent's safety-net relist. The controller's 10 minutes, on every node, would be 3 LISTs
# per node per 10 minutes: 364 a minute on the 1,213-node trace, against issue 24's budget of 6
# for all of gpupool. One node's few objects are listed at start and on a 410; the API server
# ends each watch within its --min-request-timeout (30 to 60 minutes), and the reflector then
# resumes from its version, which also restarts this timer.
AGENT_RELIST_S = 6 * 3600.0


def watched_for(node: str) -> tuple[Watched, ...]:
    """What one agent keeps, each by a field selector: its Node, the ResourceSlices on its node,
    its GpuNode. Three watches and, at start, three LISTs of at most a few objects each."""
    return (
        Watched(NODE_KIND, Node, False, fields={"metadata.name": node}),
        Watched(SLICES_KIND, ResourceSlice, False, fields={"spec.nodeName": node}),
        Watched(GPUNODE_KIND, GpuNode, False, fields={"metadata.name": node}),
    )


def path_inputs(kind: str, obj: Json) -> object:
    """What the look reads of one kept object: the Node's extended resources (not its status
    heartbeat, addresses or images), a slice's node, driver and devices, the GpuNode's
    `OtherGpuPath` condition (someone edited or removed it: the agent says it again)."""
    if kind == NODE_KIND:
        return advertised(obj)
    spec = obj.get("spec") or {}
    if kind == SLICES_KIND:
        return (spec.get("nodeName"), spec.get("driver"), spec.get("devices"))
    conditions = (obj.get("status") or {}).get("conditions") or []
    return find_condition(conditions, COND_OTHER_GPU_PATH)


def matters(change: Change) -> bool:
    """Whether `change` can change the finding or what the GpuNode must say: an object that
    came or went, or one whose `path_inputs` moved."""
    if change.old is None or change.new is None:
        return True
    return path_inputs(change.kind, change.old) != path_inputs(change.kind, change.new)


def advertised(node: Json) -> dict[str, int]:
    """The Node's extended resources (names with a `/`), the larger of capacity and
    allocatable; a value that is not a whole number is left out."""
    status = node.get("status") or {}
    out: dict[str, int] = {}
    for part in ("capacity", "allocatable"):
        for name, value in (status.get(part) or {}).items():
            if "/" not in str(name):
                continue
            try:
                amount = int(parse_quantity(str(value)))
            except GpupoolError:
                continue
            out[str(name)] = max(out.get(str(name), 0), amount)
    return out


def _uuids(device: Json) -> frozenset[str]:
    """The card uuids a DRA device names: any attribute called `uuid` (bare or qualified by
    a domain, as `gpu.nvidia.com/uuid`), string valued."""
    found = set()
    for key, value in (device.get("attributes") or {}).items():
        if str(key).rsplit("/", 1)[-1].lower() == "uuid" and isinstance(value, Mapping):
            text = value.get("string")
            if isinstance(text, str) and text:
                found.add(text)
    return frozenset(found)


def published_slices(slices: Iterable[Json], node: str) -> list[PublishedSlice]:
    """The ResourceSlices whose `spec.nodeName` is `node`, as the decision reads them."""
    out = []
    for item in slices:
        spec = item.get("spec") or {}
        if spec.get("nodeName") != node:
            continue
        devices = spec.get("devices") or []
        uuids: frozenset[str] = frozenset().union(*(_uuids(d) for d in devices))
        out.append(
            PublishedSlice(
                name=str((item.get("metadata") or {}).get("name") or ""),
                driver=str(spec.get("driver") or ""),
                devices=len(devices),
                uuids=uuids,
            )
        )
    return out


def decide(
    node: str, node_json: Json, slices: Iterable[Json], card_uuids: Collection[str]
) -> PathFinding:
    """The finding for `node` from its Node and the ResourceSlices (pure)."""
    return find_paths(
        node,
        advertised(node_json),
        published_slices(slices, node),
        own_resources=(RES_VGPU,),
        own_driver=DRA_DRIVER,
        gpu_resource_prefixes=(NVIDIA_RESOURCE_PREFIX,),
        card_uuids=card_uuids,
    )


def reason_of(finding: PathFinding) -> str:
    kinds = finding.kinds
    if len(kinds) > 1:
        return REASON_OTHER_GPU_PATHS
    if PathKind.DEVICE_PLUGIN in kinds:
        return REASON_OTHER_DEVICE_PLUGIN
    if PathKind.DRA_DRIVER in kinds:
        return REASON_OTHER_DRA_DRIVER
    return REASON_ONLY_GPUPOOL


def path_condition(finding: PathFinding, stamp: str) -> dict[str, Any]:
    """The GpuNode condition for a finding (pure)."""
    return {
        "type": COND_OTHER_GPU_PATH,
        "status": "True" if finding.refused else "False",
        "reason": reason_of(finding),
        "message": finding.message(),
        "lastTransitionTime": stamp,
    }


def condition_differs(held: Json | None, wanted: Json) -> bool:
    return held is None or any(held.get(k) != wanted[k] for k in ("status", "reason", "message"))


class GpuPathWriter:
    """Says a finding on the GpuNode (its `OtherGpuPath` condition, only when it changed) and,
    when a node turns refused or stops being refused, as an Event on the Node."""

    def __init__(self, client: AsyncClient, *, component: str) -> None:
        self.client = client
        self.component = component

    async def say(
        self, finding: PathFinding, node_json: Json, gpunode: Json | None, stamp: str
    ) -> bool:
        """Write what changed; whether anything was written. No GpuNode yet: nothing (the
        heartbeat creates it, the next check writes the condition)."""
        if gpunode is None:
            return False
        node = finding.node
        held_list = (gpunode.get("status") or {}).get("conditions") or []
        held = find_condition(held_list, COND_OTHER_GPU_PATH)
        wanted = path_condition(finding, stamp)
        if not condition_differs(held, wanted):
            return False
        patch = {
            # a conflict (someone wrote the list since it was read) is retried at the next check
            "metadata": {"resourceVersion": (gpunode.get("metadata") or {}).get("resourceVersion")},
            "status": {"conditions": with_condition(held_list, wanted)},
        }
        try:
            await self.client.patch(GpuNode.Status, node, patch, patch_type=PatchType.MERGE)
        except ApiError as err:
            if err.status.code == 409:
                return False
            raise
        (log.error if finding.refused else log.info)("%s", finding.message())
        was_refused = held is not None and held.get("status") == "True"
        if finding.refused or was_refused:
            await self._event(finding, node_json, stamp)
        return True

    async def _event(self, finding: PathFinding, node_json: Json, stamp: str) -> None:
        meta = node_json.get("metadata") or {}
        event: Any = codecs.from_dict(
            {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"generateName": f"{finding.node}.", "namespace": "default"},
                "involvedObject": {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "name": finding.node,
                    "uid": meta.get("uid"),
                },
                "reason": EVENT_OTHER_GPU_PATH if finding.refused else EVENT_OTHER_GPU_PATH_GONE,
                "message": finding.message()[:1024],
                "type": "Warning" if finding.refused else "Normal",
                "source": {"component": self.component, "host": finding.node},
                "firstTimestamp": stamp,
                "lastTimestamp": stamp,
                "count": 1,
            }
        )
        try:
            await self.client.create(event)
        except ApiError as err:  # best effort: the condition is the record
            log.warning("could not record event on node %s: %s", finding.node, err.status.message)


class GpuPathWatch:
    """The real agent's look at its one node, by watch: it keeps its Node, the ResourceSlices on
    its node and its GpuNode (`watched_for`: listed once, then watched with bookmarks; listed
    again only when the API server answers 410, or after `relist_s`), and decides again only
    when one of them changed in a way the decision reads (`matters`); what it found is written
    on the GpuNode only when it differs from what the GpuNode says. A quiet node costs no
    request at all. `last` is the last finding (the agent's metric)."""

    def __init__(self, client: AsyncClient, node: str, *, relist_s: float = AGENT_RELIST_S) -> None:
        self.client = client
        self.node = node
        self.writer = GpuPathWriter(client, component="gpupool-agent")
        self.cache = WatchCache(client, watched_for(node), relist_s=relist_s)
        self.cache.subscribe(self._heard)
        self.last: PathFinding | None = None
        self._wake = asyncio.Event()
        self._wake.set()  # the first look, once the cache is in
        self._conflicted = False  # the last write met a newer GpuNode: look at its next change
        self._missing_node = False

    def _heard(self, change: Change) -> None:
        if matters(change) or (self._conflicted and change.kind == GPUNODE_KIND):
            self._wake.set()

    async def run(self, stop: asyncio.Event) -> None:
        """Keep the node's objects until `stop` is set."""
        await self.cache.run(stop)

    async def changed(self) -> None:
        """Returns once something the look reads changed since the last `check` (the first
        time: once the node's objects are in)."""
        await self._wake.wait()
        for reflector in self.cache.reflectors.values():
            await reflector.synced.wait()

    async def check(self, card_uuids: Collection[str], stamp: str) -> PathFinding | None:
        """Decide from the kept objects and write what changed; None when the node's objects
        are not in yet, its Node is not found, or the write failed (logged; retried after
        RETRY_S; the GpuNode keeps what it said)."""
        self._wake.clear()
        if not all(r.synced.is_set() for r in self.cache.reflectors.values()):
            self._wake.set()  # `changed` waits for them
            return None
        nodes = self.cache.stores[NODE_KIND].values()
        if not nodes:
            if not self._missing_node:
                log.warning("node %s: no such Node; not looking for other GPU paths", self.node)
                self._missing_node = True
            return None
        self._missing_node = False
        node_json = nodes[0]
        finding = decide(self.node, node_json, self.cache.stores[SLICES_KIND].values(), card_uuids)
        self.last = finding
        gpunodes = self.cache.stores[GPUNODE_KIND].values()
        gpunode = gpunodes[0] if gpunodes else None
        try:
            wrote = await self.writer.say(finding, node_json, gpunode, stamp)
        except Exception as err:  # ApiError, or the transport's: the API server is not there
            why = err.status.message if isinstance(err, ApiError) else repr(err)
            log.warning(
                "node %s: cannot say what it found about other GPU paths (%s); the GpuNode "
                "keeps what it said; trying again in %gs",
                self.node,
                why,
                RETRY_S,
            )
            asyncio.get_running_loop().call_later(RETRY_S, self._wake.set)
            return None
        # not written though it differs: the GpuNode changed since the cache read it (409)
        self._conflicted = (
            not wrote and gpunode is not None and _condition_differs_on(gpunode, finding, stamp)
        )
        return finding


def _condition_differs_on(gpunode: Json, finding: PathFinding, stamp: str) -> bool:
    held = find_condition(
        (gpunode.get("status") or {}).get("conditions") or [], COND_OTHER_GPU_PATH
    )
    return condition_differs(held, path_condition(finding, stamp))
