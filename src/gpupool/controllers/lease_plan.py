"""The lease lifecycle over one snapshot, pure: which GpuLeases move on, end, or are collected.

For each GpuLease (phases Reserved → Bound → Active → Released | Expired | Lost | Reclaimed):
- its pod is gone (no pod with the lease's pod uid) or finished (Succeeded/Failed): Released,
  metered in GiB-hours from the reservation to now; a pod that is being deleted keeps its lease
  until it is gone, since its container may still use the card. Reclaimed instead (reason
  Evicted, metered the same) when reclaim recorded its eviction on the lease (`status.reclaim`,
  written by `reclaim.apply_reclaim` after the Eviction API took the pod): the lease still holds
  its capacity through the pod's termination and ends only once the pod is gone or finished;
- its expiry has passed: Expired (metered to the expiry);
- its pod is bound to a node: Bound; running: Active;
- ended longer than `retention_s` ago: deleted (garbage collection), after its GiB-hours have
  counted in the budget window it belongs to;
- still Reserved `reserved_timeout_s` after it was made, its pod alive but bound to no node: a
  stale reservation (a bind that never reached its Binding, or whose pod kube-scheduler placed
  elsewhere): swept, i.e. deleted once a fresh read of the pod confirms it is still unbound.
  Deleted, not Released: the lease is named after the pod uid, so an ended one would stop the
  pod's next bind from creating its lease; the pod never ran on it, so nothing is metered.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpupool.adapters.wire.times import format_time, parse_time
from gpupool.controllers.snapshot import PodView
from gpupool.domain.units import GiB

LIVE = ("Reserved", "Bound", "Active")
ENDED = ("Released", "Expired", "Lost", "Reclaimed")
# Far beyond any bind (the extender refuses a bind it cannot start within seconds, and
# kube-scheduler gives one up after its httpTimeout), so a bind in flight is never swept.
RESERVED_TIMEOUT_S = 120.0


@dataclass(frozen=True, slots=True)
class ReclaimRecord:
    """`status.reclaim` of a GpuLease: reclaim evicted its pod (when, which kind, for whom)."""

    at: float
    reason: str  # QuotaReclaim | RoomReclaim
    message: str


def read_reclaim_record(value: Any) -> ReclaimRecord | None:
    if not isinstance(value, Mapping):
        return None
    at = parse_time(value.get("at"))
    if at is None:
        return None
    return ReclaimRecord(at, str(value.get("reason") or ""), str(value.get("message") or ""))


@dataclass(frozen=True, slots=True)
class LeaseView:
    namespace: str
    name: str
    tenant: str
    pod_namespace: str
    pod_name: str
    pod_uid: str
    node: str
    phase: str
    start: float
    end: float | None
    expiry: float | None
    memory_bytes: int  # over all its slices
    reclaim: ReclaimRecord | None = None  # reclaim evicted its pod

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def gib_hours(self, until: float) -> float:
        return self.memory_bytes / GiB * max(0.0, until - self.start) / 3600.0


def read_lease(obj: Mapping[str, Any]) -> LeaseView:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    ref = spec.get("podRef") or {}
    start = parse_time(status.get("start")) or parse_time(meta.get("creationTimestamp")) or 0.0
    return LeaseView(
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        tenant=str(spec.get("tenant") or ""),
        pod_namespace=str(ref.get("namespace") or meta.get("namespace") or ""),
        pod_name=str(ref.get("name") or ""),
        pod_uid=str(ref.get("uid") or ""),
        node=str(spec.get("node") or ""),
        phase=str(status.get("phase") or "Reserved"),
        start=start,
        end=parse_time(status.get("end")),
        expiry=parse_time(spec.get("expiry")),
        memory_bytes=sum(int(d.get("sizeBytes") or 0) for d in spec.get("devices") or []),
        reclaim=read_reclaim_record(status.get("reclaim")),
    )


@dataclass(frozen=True, slots=True)
class Move:
    """Set the lease's phase; `end` and `gib_hours` are set when it ends."""

    lease: LeaseView
    phase: str
    reason: str
    message: str
    end: float | None = None
    gib_hours: float | None = None


@dataclass(frozen=True, slots=True)
class Collect:
    lease: LeaseView


@dataclass(frozen=True, slots=True)
class LeasePlan:
    moves: tuple[Move, ...]
    collect: tuple[Collect, ...]
    unsure: tuple[LeaseView, ...]  # pod not in the snapshot: look it up before releasing
    sweep: tuple[LeaseView, ...] = ()  # stale reservations: delete if the pod is still unbound


def _ended(lease: LeaseView, reason: str, what: str, now: float) -> Move:
    """The lease of a pod that is gone or finished: Released, or Reclaimed when reclaim evicted
    the pod; metered to now either way."""
    record = lease.reclaim
    if record is None:
        return Move(lease, "Released", reason, what, now, lease.gib_hours(now))
    message = f"{what}; reclaim evicted it at {format_time(record.at)}: {record.message}"
    return Move(lease, "Reclaimed", "Evicted", message, now, lease.gib_hours(now))


def plan_leases(
    leases: list[LeaseView],
    pods_by_uid: Mapping[str, PodView],
    now: float,
    *,
    retention_s: float = 3600.0,
    reserved_timeout_s: float | None = RESERVED_TIMEOUT_S,
    known_gone: frozenset[str] = frozenset(),
) -> LeasePlan:
    """`known_gone`: pod uids confirmed absent by a direct lookup; `reserved_timeout_s`: None
    never sweeps."""
    moves: list[Move] = []
    collect: list[Collect] = []
    unsure: list[LeaseView] = []
    sweep: list[LeaseView] = []
    for lease in leases:
        if lease.phase in ENDED:
            if (lease.end or lease.start) + retention_s <= now:
                collect.append(Collect(lease))
            continue
        pod = pods_by_uid.get(lease.pod_uid)
        if lease.expiry is not None and lease.expiry <= now:
            moves.append(
                Move(lease, "Expired", "Expired", "the lease was not renewed before its expiry",
                     lease.expiry, lease.gib_hours(lease.expiry))
            )  # fmt: skip
            continue
        if pod is None:
            if lease.pod_uid in known_gone:
                what = f"pod {lease.pod_namespace}/{lease.pod_name} ({lease.pod_uid}) is gone"
                moves.append(_ended(lease, "PodGone", what, now))
            else:
                unsure.append(lease)
            continue
        if pod.terminal:
            moves.append(_ended(lease, "PodCompleted", f"pod {pod.key} is {pod.phase}", now))
            continue
        if pod.phase == "Running" and lease.phase != "Active":
            moves.append(Move(lease, "Active", "PodRunning", f"pod {pod.key} runs"))
        elif pod.node and lease.phase == "Reserved":
            moves.append(Move(lease, "Bound", "PodBound", f"pod {pod.key} is bound to {pod.node}"))
        elif (
            not pod.node
            and lease.phase == "Reserved"
            and not pod.deleting
            and reserved_timeout_s is not None
            and lease.start + reserved_timeout_s <= now
        ):
            sweep.append(lease)
    return LeasePlan(tuple(moves), tuple(collect), tuple(unsure), tuple(sweep))
