"""What the controllers write on a GpuLease, as values (`ports.ClusterApi.move_lease`,
`mark_lease_evicted`): the adapter encodes them (`adapters.kubernetes.lease_writes`), the
decoder reads them back (`state.lease.LeaseRecord`'s phase, times, `reclaim`, `room_hold`)."""

from __future__ import annotations

from dataclasses import dataclass

from gpupool.quota.lease import LeasePhase
from gpupool.state.lease import ReclaimRecord, RoomHold


@dataclass(frozen=True, slots=True)
class LeaseStatusWrite:
    """The lease's phase now, with the condition that says why (type: the phase's name unless
    `condition` names another, e.g. Lost; status True; `at`: its lastTransitionTime), and what
    the move records: when it was bound, became active, ended, and its metered GiB-hours (None:
    left as they are)."""

    phase: LeasePhase
    reason: str
    message: str
    at: float
    condition: str | None = None
    bound_at: float | None = None
    active_at: float | None = None
    ended_at: float | None = None
    gib_hours: float | None = None


@dataclass(frozen=True, slots=True)
class EvictionMark:
    """`status.reclaim` of an evicted pod's lease: why it was evicted (its lease ends for that
    reason once the pod is gone) and, when it made room for a waiting pod, the hold on the node
    (`hold.node` is the room; the extender keeps it for `hold.pod` until `hold.until`)."""

    record: ReclaimRecord
    hold: RoomHold | None = None
