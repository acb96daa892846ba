"""Leases as people read them: live ones and those that ended recently, with their GiB-hours
(metered by the core, `quota.lease.Lease.gib_hours`: from the reservation to the end or now)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gpupool.state.lease import LeaseRecord

RECENT_S = 3600.0  # an ended lease shows for this long after its end


@dataclass(frozen=True, slots=True)
class LeaseView:
    lease: str  # namespace/name of the GpuLease
    tenant: str
    pod: str
    node: str
    cards: tuple[int, ...]  # GPU indexes
    memory_bytes: int
    phase: str
    borrowed: bool
    preemptible: bool
    start: float
    end: float | None
    held_s: float
    gib_hours: float


@dataclass(frozen=True, slots=True)
class LeasesView:
    live: tuple[LeaseView, ...]  # oldest first
    recent: tuple[LeaseView, ...]  # ended within `recent_s`, latest end first
    recent_s: float

    @property
    def gib_hours(self) -> float:
        return sum(x.gib_hours for x in (*self.live, *self.recent))


def lease_view(lease: LeaseRecord, now: float) -> LeaseView:
    core = lease.accounting(now)
    return LeaseView(
        lease=lease.key,
        tenant=lease.tenant,
        pod=lease.pod.key,
        node=lease.node,
        cards=tuple(s.gpu_index for s in lease.slices),
        memory_bytes=lease.memory_bytes,
        phase=lease.phase.value,
        borrowed=lease.borrowed > 0,
        preemptible=lease.preemptible,
        start=core.reserved_at,
        end=lease.end,
        held_s=core.held_seconds(now),
        gib_hours=core.gib_hours(now),
    )


def build_leases(
    leases: Iterable[LeaseRecord], now: float, recent_s: float = RECENT_S
) -> LeasesView:
    live: list[LeaseView] = []
    recent: list[LeaseView] = []
    for lease in leases:
        if lease.holds_capacity:
            live.append(lease_view(lease, now))
        elif lease.end is None or now - lease.end <= recent_s:
            recent.append(lease_view(lease, now))
    live.sort(key=lambda x: (x.start, x.lease))
    recent.sort(key=lambda x: (-(x.end or now), x.lease))
    return LeasesView(tuple(live), tuple(recent), recent_s)
