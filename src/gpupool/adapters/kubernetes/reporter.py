"""The node agent's GpuNodeReporter (ports.GpuNodeReporter): one GpuNode per node, its status the
agent's NodeReport, written on every call (each call is the heartbeat)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.types import PatchType

from gpupool.adapters.kubernetes.resources import GpuNode
from gpupool.adapters.wire.names import API_VERSION
from gpupool.ports import NodeReport


def gpunode_status(report: NodeReport, now: dt.datetime) -> dict[str, Any]:
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
        "heartbeat": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "driverVersion": report.facts.driver_version,
        "cudaVersion": report.facts.cuda_version,
        "reservePercent": report.reserve_pct,
        "devices": devices,
    }


class KubernetesGpuNodeReporter:
    def __init__(self, client: AsyncClient) -> None:
        self.client = client

    async def publish(self, report: NodeReport) -> None:
        status = gpunode_status(report, dt.datetime.now(dt.UTC))
        try:
            await self.client.get(GpuNode, report.node)
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
        await self.client.patch(
            GpuNode.Status,
            report.node,
            {"status": status},
            patch_type=PatchType.MERGE,
        )
