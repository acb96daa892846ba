"""What the claim allocator writes as a ResourceClaim's status
(`ports.ClaimApi.patch_claim_status`), as values: the claim it allocates (`ClaimTarget`) and
where (`ClaimAllocationWrite`); the adapter encodes them into the `status.allocation`
kube-scheduler and the kubelet read (`adapters.kubernetes.claim_writes`)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpupool.domain.allocations import Slice

DEVICE_PREFIX = "gpu-"  # node.dra.slices.device_name: the card's device in its node's pool
# A fixed namespace for share IDs: the same claim on the same card always gets the same one,
# so an allocation written twice (a retried round) is the same allocation.
SHARE_NAMESPACE = uuid.UUID("6f1d5c8e-3b7a-4c1e-9a55-2d0f8e6b4a10")
COMPUTE_MODES = ("mps", "none")


@dataclass(frozen=True, slots=True)
class ClaimTarget:
    """The claim to allocate: its name and uid, the request name the result answers, gpupool's
    driver name (`names.DRA_DRIVER`, which this pure module does not import), and the claim's
    opaque configs for that driver (copied into the allocation, where the node's plugin reads
    `computeMode`: the user's parameters, passed on as they are, never read here but for it)."""

    namespace: str
    name: str
    uid: str
    request: str
    driver: str
    configs: tuple[Mapping[str, Any], ...] = ()

    @property
    def compute_mode(self) -> str | None:
        mode = None
        for config in self.configs:
            parameters = (config.get("opaque") or {}).get("parameters") or {}
            value = parameters.get("computeMode") if isinstance(parameters, Mapping) else None
            if value in COMPUTE_MODES:
                mode = str(value)
        return mode


@dataclass(frozen=True, slots=True)
class ClaimAllocationWrite:
    """The claim's allocation: one result per card (`slices`) on `node`'s pool. `shared`: the
    devices allow several allocations (consumable capacity), so each result carries its
    consumed capacity and a share ID. `allocated_at` (RFC 3339) is written as the allocation's
    `allocationTimestamp`: on 1.36 (DRADeviceBindingConditions and
    DRAResourceClaimDeviceStatus, beta) kube-scheduler's PreBind stamps an allocation that
    lacks one, and the API server refuses that change of an allocation as immutable, so the
    pod would never bind."""

    target: ClaimTarget
    node: str
    slices: tuple[Slice, ...]
    allocated_at: str
    shared: bool = True


def device_name(piece: Slice) -> str:
    """The card's device in its node's pool."""
    return f"{DEVICE_PREFIX}{piece.gpu_index}"


def share_id(claim_uid: str, device: str) -> str:
    return str(uuid.uuid5(SHARE_NAMESPACE, f"{claim_uid}/{device}"))
