"""The agent's look for other paths handing out its node's cards (`domain.gpu_paths` decides).

`GpuPathWatch.check` reads the node's Node (its extended resources) and the ResourceSlices on it,
decides, and, when the finding changed, writes the GpuNode's `OtherGpuPath` condition (True:
placement refuses the node) and records an Event on the Node. The real agent runs it at every
heartbeat; the dev cluster's fake agents (`devcluster.heartbeat`) run it for each kwok node.
RBAC: get nodes, list resourceslices, patch gpunodes/status, create events.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from lightkube import AsyncClient, codecs
from lightkube.core.exceptions import ApiError
from lightkube.generic_resource import create_global_resource
from lightkube.resources.core_v1 import Node
from lightkube.types import PatchType

from gpupool.adapters.kubernetes.resources import GpuNode, to_dict
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

log = logging.getLogger(__name__)

ResourceSlice: Any = create_global_resource(
    "resource.k8s.io", "v1", "ResourceSlice", "resourceslices"
)
Json = Mapping[str, Any]


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
    """The real agent's look at its one node: reads the Node and the ResourceSlices on it,
    decides, and says what changed on the GpuNode; `last` is the last finding (the agent's
    metric). The GpuNode is read only when the finding differs from what this agent last
    found there, or every RECHECK looks (someone may have edited or recreated it): two requests
    a look, not three."""

    RECHECK = 10

    def __init__(self, client: AsyncClient, node: str) -> None:
        self.client = client
        self.node = node
        self.writer = GpuPathWriter(client, component="gpupool-agent")
        self.last: PathFinding | None = None
        self._held: tuple[str, str, str] | None = None  # the condition last found on the GpuNode
        self._looks = 0

    async def check(self, card_uuids: Collection[str], stamp: str) -> PathFinding | None:
        """Decide now and write what changed; None when something cannot be read (logged; the
        GpuNode keeps what it said)."""
        try:
            node_json = to_dict(await self.client.get(Node, self.node))
            slices = [
                to_dict(s)
                async for s in self.client.list(ResourceSlice, fields={"spec.nodeName": self.node})
            ]
            finding = decide(self.node, node_json, slices, card_uuids)
            self.last = finding
            self._looks += 1
            wanted = path_condition(finding, stamp)
            key = (wanted["status"], wanted["reason"], wanted["message"])
            if key == self._held and self._looks % self.RECHECK:
                return finding
            gpunode = await self._gpunode()
        except ApiError as err:
            log.warning(
                "node %s: cannot look for other GPU paths (%s); the GpuNode keeps what it said",
                self.node,
                err.status.message,
            )
            return None
        self._held = None
        if await self.writer.say(finding, node_json, gpunode, stamp) or (
            gpunode is not None
            and not condition_differs(
                find_condition(
                    (gpunode.get("status") or {}).get("conditions") or [], COND_OTHER_GPU_PATH
                ),
                wanted,
            )
        ):
            self._held = key
        return finding

    async def _gpunode(self) -> Json | None:
        try:
            return to_dict(await self.client.get(GpuNode, self.node))
        except ApiError as err:
            if err.status.code == 404:
                return None
            raise
