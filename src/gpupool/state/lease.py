"""A GpuLease as the live system holds it: one pod's hold on slices of GPUs (`LeaseRecord`).

The extender's bind creates it (Reserved); the lease controller moves it through the core's
lifecycle (`quota.lease.LeasePhase` and `ALLOWED`: the same table the simulator runs) by turning
the record into the core's accounting `Lease` (`LeaseRecord.accounting`) and asking that for the
transition; what the transition returns (`bound_at`, `active_at`, `ended_at`, GiB-hours) is what
the controller writes back. Phases Released, Expired, Lost and Reclaimed hold no capacity.

The JSON of the GpuLease object is read and written in `adapters.kubernetes.lease`; here are the
typed values only (times as epoch seconds, the phase as the core's enum).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpupool.domain.allocations import Slice
from gpupool.quota.lease import Lease, LeasePhase


@dataclass(frozen=True, slots=True)
class PodRef:
    namespace: str
    name: str
    uid: str

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


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


@dataclass(frozen=True, slots=True)
class ReclaimRecord:
    """`status.reclaim` of a GpuLease: reclaim evicted its pod (when, which kind, for whom)."""

    at: float
    reason: str  # QuotaReclaim | RoomReclaim | Defragmentation
    message: str


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
    expiry: float | None = None  # spec.expiry (epoch s): the lease ends then unless renewed
    ttl_s: float | None = None  # spec.ttlSeconds: what a renewal extends it by (the controller)
    renewal: str | None = None  # spec.renewal: the pod's gpupool.io/renew value last honoured
    compute_mode: str | None = None  # spec.computeMode (mps | none): set by the extender at bind
    mps_percentage: int | None = None  # spec.mpsActiveThreadPercentage, with computeMode mps
    phase: LeasePhase = LeasePhase.RESERVED  # no status yet (just created) reads as Reserved
    resource_version: str | None = None
    device_ids: tuple[str, ...] = ()  # status.deviceIds: the kubelet's devices, set by the agent
    room_hold: RoomHold | None = None  # status.reclaim: its node held for the pod reclaim freed
    reclaim: ReclaimRecord | None = None  # status.reclaim: reclaim evicted its pod
    start: float = 0.0  # status.start, else the object's creation: metering counts from here
    end: float | None = None  # status.end, once it ended

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def holds_capacity(self) -> bool:
        return not self.phase.terminal

    @property
    def memory_bytes(self) -> int:
        return sum(s.size_bytes for s in self.slices)

    def accounting(self, now: float) -> Lease:
        """The core's lease for this record: the lifecycle's transitions and GiB-hours.

        Its reservation time is the record's start, but never after `now`: the start is stamped
        by the API server, whose clock may run a little ahead of ours (the lease then has held
        nothing yet, which is what metering says either way)."""
        return Lease(
            id=self.pod.uid or self.key,
            tenant=self.tenant,
            amount=max(0, self.amount),
            reserved_at=min(self.start, now),
            priority=self.priority,
            gpu_memory_bytes=self.memory_bytes,
            borrowed=self.borrowed > 0,
            preemptible=self.preemptible,
            exclusive=self.exclusive,
            phase=self.phase,
            ended_at=self.end,
            ttl_s=self.ttl_s if self.ttl_s is not None and self.ttl_s > 0 else None,
            expires_at=self.expiry,
        )
