"""GpuLease objects ⇄ `state.lease.LeaseRecord` values (the JSON side; the record is in state).

A GpuLease is one pod's hold on slices of GPUs: named after the pod's uid, in the pod's
namespace, labelled with its node. The extender creates it at bind (phase Reserved); the
controller drives its status through the core's lifecycle (`quota.lease.ALLOWED`). Phases
Released, Expired, Lost and Reclaimed hold no capacity.

A lease whose pod reclaim evicted *for room* carries the hold on its node (`status.reclaim`:
`room`, `for`, `forUid`, `holdUntil`; `RoomHold`): the extender refuses that node to every other
pod while the hold stands (`extender_http.room_hold`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpupool.adapters.kubernetes.errors import InvalidObject
from gpupool.adapters.wire.names import API_VERSION, LABEL_NODE, LABEL_TENANT
from gpupool.adapters.wire.times import format_time, parse_time
from gpupool.domain.allocations import Slice, extents_from_json
from gpupool.domain.units import format_bytes
from gpupool.ports import PodLease
from gpupool.quota.lease import LeasePhase
from gpupool.state.lease import LeaseRecord, PodRef, ReclaimRecord, RoomHold

KIND = "GpuLease"
PHASES = {phase: phase.value.capitalize() for phase in LeasePhase}  # the wire's names
PHASE_OF = {name: phase for phase, name in PHASES.items()}


def phase_name(phase: LeasePhase) -> str:
    """The phase as the GpuLease's `status.phase` spells it (`Reserved`, `Bound`, ...)."""
    return PHASES[phase]


# Evictions that made room for one pod: reclaim for room, and defragmentation's for the pod its
# cleared card is held for (controllers.defrag).
HOLDING_REASONS = ("RoomReclaim", "Defragmentation")


def read_room_hold(reclaim: object) -> RoomHold | None:
    """The hold a lease's `status.reclaim` carries; None when it carries none (a quota reclaim,
    a record without `holdUntil`: never written, or ended by the controller) or is unreadable."""
    if not isinstance(reclaim, Mapping) or reclaim.get("reason") not in HOLDING_REASONS:
        return None
    node, pod, uid = reclaim.get("room"), reclaim.get("for"), reclaim.get("forUid")
    until = parse_time(reclaim.get("holdUntil"))
    if not (isinstance(node, str) and node and isinstance(pod, str) and "/" in pod):
        return None
    if not isinstance(uid, str) or not uid or until is None:
        return None
    return RoomHold(node=node, pod=pod, uid=uid, until=until)


def read_reclaim_record(value: object) -> ReclaimRecord | None:
    """`status.reclaim`: reclaim evicted the lease's pod; None when absent or without a time."""
    if not isinstance(value, Mapping):
        return None
    at = parse_time(value.get("at"))
    if at is None:
        return None
    return ReclaimRecord(at, str(value.get("reason") or ""), str(value.get("message") or ""))


def lease_to_json(lease: LeaseRecord) -> dict[str, Any]:
    """The GpuLease object to create (no status: the controller writes it)."""
    spec: dict[str, Any] = {
        "tenant": lease.tenant,
        "podRef": {"namespace": lease.pod.namespace, "name": lease.pod.name, "uid": lease.pod.uid},
        "node": lease.node,
        "devices": [s.to_annotation() for s in lease.slices],
        "resource": lease.resource,
        "amount": lease.amount,
        "amountDisplay": format_bytes(lease.amount)
        if lease.resource == "gpu-memory"
        else f"{lease.amount}m",
        "borrowed": lease.borrowed,
        "priority": lease.priority,
        "preemptible": lease.preemptible,
        "exclusive": lease.exclusive,
    }
    if lease.expiry is not None:
        spec["expiry"] = format_time(lease.expiry)
    if lease.compute_mode is not None:
        spec["computeMode"] = lease.compute_mode
    if lease.mps_percentage is not None:
        spec["mpsActiveThreadPercentage"] = lease.mps_percentage
    meta: dict[str, Any] = {
        "name": lease.name,
        "namespace": lease.namespace,
        "labels": {LABEL_NODE: lease.node, LABEL_TENANT: lease.tenant},
    }
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": meta, "spec": spec}


def _need(obj: Mapping[str, Any], key: str, kind: str, name: str) -> Any:
    if key not in obj or obj[key] is None:
        raise InvalidObject(kind, name, f"missing field {key!r}")
    return obj[key]


def _slice_from_json(d: Mapping[str, Any], name: str) -> Slice:
    offset = int(d.get("offsetBytes", 0))
    size = int(_need(d, "sizeBytes", KIND, name))
    return Slice(
        gpu_index=int(_need(d, "index", KIND, name)),
        uuid=str(d.get("uuid", "")),
        model=str(_need(d, "model", KIND, name)),
        offset_bytes=offset,
        size_bytes=size,
        compute_milli=int(d.get("computePercent", 0)) * 10,
        extents=extents_from_json(d.get("extents"), offset, size),
    )


def lease_from_json(obj: Mapping[str, Any]) -> LeaseRecord:
    """Read a GpuLease; InvalidObject if a required field is missing or has the wrong type."""
    meta = obj.get("metadata") or {}
    name = str(meta.get("name", ""))
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        raise InvalidObject(KIND, name, "missing spec")
    try:
        ref = _need(spec, "podRef", KIND, name)
        devices = _need(spec, "devices", KIND, name)
        slices = tuple(_slice_from_json(d, name) for d in devices)
        status = obj.get("status") or {}
        ids = status.get("deviceIds") or []
        phase_text = status.get("phase") or "Reserved"
        if phase_text not in PHASE_OF:
            raise InvalidObject(KIND, name, f"unknown phase {phase_text!r}")
        reclaim = status.get("reclaim")
        start = parse_time(status.get("start")) or parse_time(meta.get("creationTimestamp"))
        return LeaseRecord(
            name=name,
            namespace=str(meta.get("namespace", "")),
            tenant=str(_need(spec, "tenant", KIND, name)),
            pod=PodRef(
                namespace=str(_need(ref, "namespace", KIND, name)),
                name=str(_need(ref, "name", KIND, name)),
                uid=str(_need(ref, "uid", KIND, name)),
            ),
            node=str(_need(spec, "node", KIND, name)),
            slices=slices,
            amount=int(spec.get("amount", 0)),
            resource=str(spec.get("resource", "gpu-memory")),
            borrowed=int(spec.get("borrowed", 0)),
            priority=int(spec.get("priority", 0)),
            preemptible=bool(spec.get("preemptible", False)),
            exclusive=bool(spec.get("exclusive", False)),
            expiry=parse_time(spec.get("expiry")),
            ttl_s=float(spec["ttlSeconds"]) if spec.get("ttlSeconds") else None,
            renewal=str(spec["renewal"]) if spec.get("renewal") is not None else None,
            compute_mode=str(spec["computeMode"]) if spec.get("computeMode") else None,
            mps_percentage=int(spec["mpsActiveThreadPercentage"])
            if spec.get("mpsActiveThreadPercentage")
            else None,
            phase=PHASE_OF[phase_text],
            resource_version=meta.get("resourceVersion"),
            device_ids=tuple(str(x) for x in ids),
            room_hold=read_room_hold(reclaim),
            reclaim=read_reclaim_record(reclaim),
            start=start or 0.0,
            end=parse_time(status.get("end")),
        )
    except (TypeError, ValueError, AttributeError) as err:
        if isinstance(err, InvalidObject):
            raise
        raise InvalidObject(KIND, name, f"malformed: {err}") from None


def pod_lease(lease: LeaseRecord) -> PodLease:
    """The node agent's view of a lease (ports.PodLease), with the compute mode bind wrote."""
    return PodLease(
        lease=lease.key,
        pod=f"{lease.pod.namespace}/{lease.pod.name}",
        pod_uid=lease.pod.uid,
        node=lease.node,
        slices=lease.slices,
        compute_mode=lease.compute_mode,
        mps_percentage=lease.mps_percentage,
        device_ids=lease.device_ids,
    )
