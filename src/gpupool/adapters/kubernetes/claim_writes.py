"""The claim allocator's write (`state.claim_writes.ClaimAllocationWrite`) as the ResourceClaim
`status` kube-scheduler and the kubelet read: one result per card on the node's pool (with its
consumed capacity and share ID when the devices are shared), the claim's opaque configs for
gpupool's driver, the node selector and the allocation's timestamp."""

from __future__ import annotations

from typing import Any

from gpupool.domain import dra_capacity
from gpupool.state.claim_writes import ClaimAllocationWrite, device_name, share_id


def allocation_status(write: ClaimAllocationWrite) -> dict[str, Any]:
    target, node = write.target, write.node
    results = []
    for piece in write.slices:
        device = device_name(piece)
        result: dict[str, Any] = {
            "request": target.request,
            "driver": target.driver,
            "pool": node,
            "device": device,
        }
        if write.shared:
            result["shareID"] = share_id(target.uid, device)
            result["consumedCapacity"] = {
                # the slice's bytes, down to the driver's step
                "memory": str(dra_capacity.consumed_memory(piece.size_bytes)),
                "compute": str(piece.compute_milli // 10),
                "shares": "1",
            }
        results.append(result)
    config = [
        {"source": "FromClaim", "requests": [target.request], "opaque": c["opaque"]}
        for c in target.configs
        if "opaque" in c
    ]
    devices: dict[str, Any] = {"results": results}
    if config:
        devices["config"] = config
    selector = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
    return {
        "allocation": {
            "devices": devices,
            "nodeSelector": {"nodeSelectorTerms": [selector]},
            "allocationTimestamp": write.allocated_at,
        }
    }
