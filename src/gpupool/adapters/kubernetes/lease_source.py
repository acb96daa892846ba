"""The node agent's AllocationSource over GpuLease objects (ports.AllocationSource).

`leases_on` lists the leases whose spec.node is this node (a field selector, a consistent read)
that still hold capacity; `record_devices` writes the kubelet's device IDs to the lease's
status.deviceIds (the agent's RBAC allows patching gpuleases/status only).
"""

from __future__ import annotations

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.types import PatchType

from gpupool.adapters.kubernetes.errors import InvalidObject
from gpupool.adapters.kubernetes.lease import lease_from_json, pod_lease
from gpupool.adapters.kubernetes.resources import GpuLease, to_dict
from gpupool.ports import LeaseSourceUnavailable, PodLease


class KubernetesAllocationSource:
    def __init__(self, client: AsyncClient) -> None:
        self.client = client

    async def leases_on(self, node: str) -> tuple[PodLease, ...]:
        try:
            items = [
                to_dict(x)
                async for x in self.client.list(GpuLease, namespace="*", fields={"spec.node": node})
            ]
        except Exception as err:  # API server unreachable, RBAC: retryable for the kubelet
            raise LeaseSourceUnavailable(f"cannot list GpuLeases for node {node}: {err}") from err
        out = []
        for item in items:
            try:
                lease = lease_from_json(item)
            except InvalidObject:
                continue
            if lease.holds_capacity:
                out.append(pod_lease(lease))
        return tuple(out)

    async def record_devices(self, lease: str, device_ids: tuple[str, ...]) -> None:
        namespace, _, name = lease.partition("/")
        try:
            await self.client.patch(
                GpuLease.Status,
                name,
                {"status": {"deviceIds": list(device_ids)}},
                namespace=namespace,
                patch_type=PatchType.MERGE,
            )
        except ApiError as err:
            raise LeaseSourceUnavailable(
                f"cannot record devices on lease {lease}: {err.status.message}"
            ) from err
