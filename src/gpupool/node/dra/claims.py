"""ResourceClaims for `gpu.gpupool.io`, decoded once at the edge into values. Pure.

Two readings:

- `check_claim_spec` (in `adapters.wire.claims`, named here too): what a claim (or a
  ResourceClaimTemplate's spec) asks of gpupool's cards, refused with a message naming the fix;
  the webhook runs it when a pod naming such a claim is made;
- `read_allocated_claim`: what the scheduler allocated to a claim on this driver
  (`status.allocation.devices.results[]` with `consumedCapacity`), for NodePrepareResources.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpupool.adapters.wire.claims import (
    CAPACITY_COMPUTE,
    CAPACITY_MEMORY,
    Ask,
    CardOffer,
    MalformedCapacity,
    capacity_name,
    check_claim_spec,
    read_compute,
    read_memory,
)
from gpupool.adapters.wire.names import DRA_DRIVER
from gpupool.node.dra.errors import ClaimNotServable

__all__ = ["Ask", "CardOffer", "check_claim_spec", "read_allocated_claim"]

MPS = "mps"
NO_MPS = "none"
COMPUTE_MODE_KEY = "computeMode"  # in the claim's opaque config for this driver


@dataclass(frozen=True, slots=True)
class ClaimRef:
    namespace: str
    name: str
    uid: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class AllocatedDevice:
    """One result of the claim's allocation on this driver."""

    request: str
    pool: str
    device: str
    share_id: str | None
    memory_bytes: int | None  # consumed; None: not recorded (the whole card's)
    compute_pct: int | None  # consumed; None or 0: no hard cap


@dataclass(frozen=True, slots=True)
class AllocatedClaim:
    ref: ClaimRef
    devices: tuple[AllocatedDevice, ...]
    compute_mode: str | None  # "mps" | "none" | None, from the claim's opaque config
    pod: str  # namespace/name of the first pod it is reserved for ("" when none)
    pod_uid: str


def _compute_mode(allocation: Mapping[str, Any], ref: ClaimRef) -> str | None:
    mode: str | None = None
    for entry in (allocation.get("devices") or {}).get("config") or []:
        opaque = entry.get("opaque") or {}
        if opaque.get("driver") != DRA_DRIVER:
            continue
        parameters = opaque.get("parameters") or {}
        value = parameters.get(COMPUTE_MODE_KEY) if isinstance(parameters, Mapping) else None
        if value is None:
            continue
        if value not in (MPS, NO_MPS):
            raise MalformedCapacity(
                f"claim {ref}: opaque config for {DRA_DRIVER} has {COMPUTE_MODE_KEY}: {value!r}; "
                f"write {MPS!r} or {NO_MPS!r}"
            )
        mode = str(value)
    return mode


def read_allocated_claim(claim: Mapping[str, Any], uid: str) -> AllocatedClaim:
    """The claim object as the API server returns it, for the claim the kubelet named by `uid`."""
    meta = claim.get("metadata") or {}
    ref = ClaimRef(str(meta.get("namespace", "")), str(meta.get("name", "")), str(meta.get("uid")))
    if ref.uid != uid:
        raise ClaimNotServable(
            f"claim {ref} is now uid {ref.uid}, not {uid} that the kubelet asked for: it was "
            f"deleted and made again; the pod must be created again too"
        )
    status = claim.get("status") or {}
    allocation = status.get("allocation")
    if not allocation:
        raise ClaimNotServable(f"claim {ref} is not allocated yet; the kubelet asked too early")
    devices: list[AllocatedDevice] = []
    for result in (allocation.get("devices") or {}).get("results") or []:
        if result.get("driver") != DRA_DRIVER:
            continue
        where = f"claim {ref}: device {result.get('device')!r}: consumedCapacity"
        consumed = {
            capacity_name(str(k)): v for k, v in (result.get("consumedCapacity") or {}).items()
        }
        memory = consumed.get(CAPACITY_MEMORY)
        compute = consumed.get(CAPACITY_COMPUTE)
        share = result.get("shareID")
        devices.append(
            AllocatedDevice(
                request=str(result.get("request", "")),
                pool=str(result.get("pool", "")),
                device=str(result.get("device", "")),
                share_id=str(share) if share else None,
                memory_bytes=None if memory is None else read_memory(memory, f"{where}.memory"),
                compute_pct=None
                if compute is None
                else read_compute(compute, f"{where}.compute", allow_zero=True),
            )
        )
    reserved = [r for r in status.get("reservedFor") or [] if r.get("resource") == "pods"]
    pod = f"{ref.namespace}/{reserved[0].get('name')}" if reserved else ""
    pod_uid = str(reserved[0].get("uid", "")) if reserved else ""
    return AllocatedClaim(ref, tuple(devices), _compute_mode(allocation, ref), pod, pod_uid)
