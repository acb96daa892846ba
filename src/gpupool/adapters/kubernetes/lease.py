"""GpuLease objects ⇄ `LeaseRecord` values.

A GpuLease is one pod's hold on slices of GPUs: named after the pod's uid, in the pod's
namespace, labelled with its node. The extender creates it at bind (phase Reserved); the
controller drives its status. Phases Released, Expired, Lost and Reclaimed hold no capacity.

A lease whose pod reclaim evicted *for room* carries the hold on its node (`status.reclaim`:
`room`, `for`, `forUid`, `holdUntil`; `RoomHold`): the extender refuses that node to every other
pod while the hold stands (`extender_http.room_hold`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpupool.adapters.kubernetes import API_VERSION, LABEL_NODE, LABEL_TENANT
from gpupool.adapters.kubernetes.errors import InvalidObject
from gpupool.adapters.wire.times import parse_time
from gpupool.domain.allocations import Slice, extents_from_json
from gpupool.domain.units import format_bytes
from gpupool.ports import PodLease

KIND = "GpuLease"
PHASES = ("Reserved", "Bound", "Active", "Released", "Expired", "Lost", "Reclaimed")
ENDED = frozenset({"Released", "Expired", "Lost", "Reclaimed"})


@dataclass(frozen=True, slots=True)
class PodRef:
    namespace: str
    name: str
    uid: str


@dataclass(frozen=True, slots=True)
class RoomHold:
    """Node `node` is held for pod `pod` (namespace/name, uid `uid`) until `until` (epoch s):
    reclaim evicted this lease's pod to make room there for it (`status.reclaim` with `room`)."""

    node: str
    pod: str
    uid: str
    until: float

    @property
    def lease_key(self) -> str:
        """The key of the GpuLease the held-for pod gets once bound (named after its uid)."""
        return f"{self.pod.partition('/')[0]}/{self.uid}"


def read_room_hold(reclaim: object) -> RoomHold | None:
    """The hold a lease's `status.reclaim` carries; None when it carries none (a quota reclaim,
    a record without `holdUntil`: never written, or ended by the controller) or is unreadable."""
    if not isinstance(reclaim, Mapping) or reclaim.get("reason") != "RoomReclaim":
        return None
    node, pod, uid = reclaim.get("room"), reclaim.get("for"), reclaim.get("forUid")
    until = parse_time(reclaim.get("holdUntil"))
    if not (isinstance(node, str) and node and isinstance(pod, str) and "/" in pod):
        return None
    if not isinstance(uid, str) or not uid or until is None:
        return None
    return RoomHold(node=node, pod=pod, uid=uid, until=until)


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    name: str
    namespace: str
    tenant: str
    pod: PodRef
    node: str
    slices: tuple[Slice, ...]
    amount: int = 0  # in the tenant quota's resource (bytes for gpu-memory)
    resource: str = "gpu-memory"
    borrowed: int = 0
    priority: int = 0
    preemptible: bool = False
    exclusive: bool = False
    expiry: str | None = None  # RFC 3339
    phase: str | None = None  # None: just created, not yet seen by the controller (= Reserved)
    resource_version: str | None = None
    device_ids: tuple[str, ...] = ()  # status.deviceIds: the kubelet's devices, set by the agent
    room_hold: RoomHold | None = None  # status.reclaim: its node held for the pod reclaim freed

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def holds_capacity(self) -> bool:
        return self.phase not in ENDED


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
    if lease.expiry:
        spec["expiry"] = lease.expiry
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
            expiry=spec.get("expiry"),
            phase=status.get("phase"),
            resource_version=meta.get("resourceVersion"),
            device_ids=tuple(str(x) for x in ids),
            room_hold=read_room_hold(status.get("reclaim")),
        )
    except (TypeError, ValueError, AttributeError) as err:
        if isinstance(err, InvalidObject):
            raise
        raise InvalidObject(KIND, name, f"malformed: {err}") from None


def pod_lease(lease: LeaseRecord, compute_mode: str | None = None) -> PodLease:
    """The node agent's view of a lease (ports.PodLease)."""
    return PodLease(
        lease=lease.key,
        pod=f"{lease.pod.namespace}/{lease.pod.name}",
        pod_uid=lease.pod.uid,
        node=lease.node,
        slices=lease.slices,
        compute_mode=compute_mode,
        device_ids=lease.device_ids,
    )
