"""The node agent's GpuNodeReporter (ports.GpuNodeReporter): one GpuNode per node, its status the
agent's NodeReport, written only when it differs from what the GpuNode holds; and the node's
heartbeat, its Lease renewed (`node_lease`). An idle node's GpuNode is never written, so nothing
that watches GpuNodes wakes for a heartbeat."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.types import PatchType

from gpupool.adapters.kubernetes.node_lease import AGENT_HOLDER, renew_node_lease
from gpupool.adapters.kubernetes.resources import GpuNode, to_dict
from gpupool.adapters.wire.names import API_VERSION
from gpupool.ports import NodeReport


def gpunode_status(report: NodeReport) -> dict[str, Any]:
    """The GpuNode status for a report (pure)."""
    facts = {f.uuid: f for f in report.facts.gpus}
    allocatable = dict(report.allocatable_bytes)
    uuids = {g.uuid: g.index for g in report.gpus}
    devices = []
    for gpu in report.gpus:
        fact = facts.get(gpu.uuid)
        device: dict[str, Any] = {
            "uuid": gpu.uuid,
            "index": gpu.index,
            "model": gpu.model,
            "memoryBytes": gpu.total_memory or 0,
            "numaNode": gpu.numa_node,
            "healthy": gpu.healthy,
            "shares": report.shares_per_card,
        }
        if gpu.uuid in allocatable:
            device["allocatableBytes"] = allocatable[gpu.uuid]
        if gpu.nvlink_domain is not None:
            device["nvlinkDomain"] = gpu.nvlink_domain
        if fact is not None:
            if fact.sm_count is not None:
                device["smCount"] = fact.sm_count
            peers = [uuids[p] for p in fact.nvlink_peers if p in uuids]
            if peers:
                device["nvlinkPeers"] = peers
        devices.append(device)
    return {
        "gpuCount": len(devices),
        "health": "Healthy" if all(g.healthy for g in report.gpus) else "Degraded",
        "driverVersion": report.facts.driver_version,
        "cudaVersion": report.facts.cuda_version,
        "reservePercent": report.reserve_pct,
        "devices": devices,
    }


def status_differs(held: Mapping[str, Any] | None, wanted: Mapping[str, Any]) -> bool:
    """Whether the GpuNode's status `held` lacks a field of `wanted` or holds another value (pure;
    fields only others write, the controller's conditions, do not count)."""
    held = held or {}
    return any(held.get(key) != value for key, value in wanted.items())


class KubernetesGpuNodeReporter:
    """`publish` reads the GpuNode and writes its status only when it differs (the agent calls it
    when its report changes, and now and then to repair an edited or deleted GpuNode); `renew`
    is the heartbeat, the node's Lease."""

    def __init__(self, client: AsyncClient, *, lease_duration_s: int = 90) -> None:
        self.client = client
        self.lease_duration_s = lease_duration_s

    async def publish(self, report: NodeReport) -> None:
        status = gpunode_status(report)
        held: Mapping[str, Any] | None = None
        try:
            held = to_dict(await self.client.get(GpuNode, report.node)).get("status")
        except ApiError as err:
            if err.status.code != 404:
                raise
            await self.client.create(
                GpuNode(
                    apiVersion=API_VERSION,
                    kind="GpuNode",
                    metadata={"name": report.node},
                    spec={},
                )
            )
        if not status_differs(held, status):
            return
        await self.client.patch(
            GpuNode.Status,
            report.node,
            {"status": status},
            patch_type=PatchType.MERGE,
        )

    async def renew(self, node: str) -> None:
        await renew_node_lease(
            self.client, node, holder=AGENT_HOLDER, duration_s=self.lease_duration_s,
            now=time.time(),
        )  # fmt: skip
