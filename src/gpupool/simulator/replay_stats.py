"""What one replay run measures, and its JSON form (the keys the issue fixes)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gpupool.quota.lease import Lease


def _percentile(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else 0.0


@dataclass(slots=True)
class TenantStats:
    admitted: int = 0
    rejected: int = 0
    never_admitted: int = 0
    delays: list[float] = field(default_factory=list)
    gib_hours: float = 0.0
    gpu_hours: float = 0.0
    borrowed_gib_hours: float = 0.0
    borrowed_gpu_hours: float = 0.0

    def to_json(self) -> dict[str, float | int]:
        return {
            "gib_hours": round(self.gib_hours, 3),
            "gpu_hours": round(self.gpu_hours, 3),
            "borrowed_gpu_hours": round(self.borrowed_gpu_hours, 3),
            "admitted": self.admitted,
            "rejected": self.rejected + self.never_admitted,
            "queue_delay_s_p50": round(_percentile(self.delays, 50), 3),
            "queue_delay_s_p95": round(_percentile(self.delays, 95), 3),
            "queue_delay_s_p99": round(_percentile(self.delays, 99), 3),
        }


@dataclass(slots=True)
class RunStats:
    mode: str
    tenant_names: list[str]
    capacity_milli: int
    tenants: dict[str, TenantStats] = field(default_factory=dict)
    seen: set[str] = field(default_factory=set)
    reclaims: int = 0
    room_reclaims: int = 0  # evictions that freed room on a node for a lender's pod
    borrowed_admissions: int = 0
    seconds: float = 0.0
    requested_area: float = 0.0  # milli-GPU x seconds
    held_area: float = 0.0
    borrowed_area: float = 0.0
    peak_requested: int = 0
    timeline: list[tuple[float, float, float]] = field(default_factory=list)
    # (time, pool fragmentation, that of the cards in use; 0..1) on a fixed grid over the
    # arrival window (replay_defrag)
    fragmentation: list[tuple[float, float, float]] = field(default_factory=list)
    defrag_rounds: int = 0
    defrag_moves: int = 0
    restart_area: float = 0.0  # milli-GPU x seconds of work the moved pods lost

    def __post_init__(self) -> None:
        for name in self.tenant_names:
            self.tenants.setdefault(name, TenantStats())

    def integrate(self, dt: float, requested: int, held: int, borrowed: int) -> None:
        self.requested_area += dt * requested
        self.held_area += dt * held
        self.borrowed_area += dt * borrowed
        self.seconds += dt
        self.peak_requested = max(self.peak_requested, requested)

    def sample(self, at: float, requested: int, held: int) -> None:
        self.timeline.append((at, requested, held))

    def sample_fragmentation(self, at: float, pool: float, in_use: float) -> None:
        self.fragmentation.append((at, pool, in_use))

    def moved(self, lost_milli_s: float) -> None:
        self.defrag_moves += 1
        self.restart_area += lost_milli_s

    def admitted(self, tenant: str, delay: float, first: bool) -> None:
        if first:
            stats = self.tenants[tenant]
            stats.admitted += 1
            stats.delays.append(delay)

    def rejected(self, tenant: str) -> None:
        self.tenants[tenant].rejected += 1

    def never_admitted(self, tenant: str) -> None:
        self.tenants[tenant].never_admitted += 1

    def metered(self, lease: Lease, borrowed: bool) -> None:
        assert lease.ended_at is not None
        stats = self.tenants[lease.tenant]
        gib = lease.gib_hours(lease.ended_at)
        stats.gib_hours += gib
        stats.gpu_hours += lease.gpu_hours(lease.ended_at)
        if borrowed:
            stats.borrowed_gib_hours += gib
            stats.borrowed_gpu_hours += lease.gpu_hours(lease.ended_at)

    def _pct(self, area: float) -> float:
        if self.seconds <= 0 or self.capacity_milli <= 0:
            return 0.0
        return 100.0 * area / (self.seconds * self.capacity_milli)

    def _fragmentation_json(self) -> dict[str, object]:
        values = [f for _, f, _ in self.fragmentation]
        in_use = [f for _, _, f in self.fragmentation]
        return {
            "fragmentation_pct_peak": round(100.0 * max(values, default=0.0), 3),
            "fragmentation_pct_mean": round(100.0 * float(np.mean(values)) if values else 0.0, 3),
            "fragmentation_pct_end": round(100.0 * values[-1] if values else 0.0, 3),
            "in_use_fragmentation_pct_peak": round(100.0 * max(in_use, default=0.0), 3),
            "in_use_fragmentation_pct_mean": round(
                100.0 * float(np.mean(in_use)) if in_use else 0.0, 3
            ),
            "defrag_rounds": self.defrag_rounds,
            "defrag_moves": self.defrag_moves,
            "defrag_restart_gpu_hours": round(self.restart_area / 1000.0 / 3600.0, 3),
            "fragmentation_timeline": [  # [time, pool %, cards in use %]
                [round(t, 3), round(100.0 * f, 3), round(100.0 * u, 3)]
                for t, f, u in self.fragmentation
            ],
        }

    def to_json(self) -> dict[str, object]:
        delays = [d for t in self.tenants.values() for d in t.delays]
        return {
            "gpu_allocation_pct_mean": round(self._pct(self.requested_area), 3),
            "queue_delay_s_p50": round(_percentile(delays, 50), 3),
            "queue_delay_s_p95": round(_percentile(delays, 95), 3),
            "queue_delay_s_p99": round(_percentile(delays, 99), 3),
            "reclaims": self.reclaims,
            "reclaims_for_room": self.room_reclaims,
            "borrowed_gib_hours": round(
                sum(t.borrowed_gib_hours for t in self.tenants.values()), 3
            ),
            "borrowed_gpu_hours": round(
                sum(t.borrowed_gpu_hours for t in self.tenants.values()), 3
            ),
            "gpu_held_pct_mean": round(self._pct(self.held_area), 3),
            "gpu_allocation_pct_peak": round(
                100.0 * self.peak_requested / max(1, self.capacity_milli), 3
            ),
            "admitted": sum(t.admitted for t in self.tenants.values()),
            "rejected": sum(t.rejected + t.never_admitted for t in self.tenants.values()),
            "borrowed_admissions": self.borrowed_admissions,
            "window_s": round(self.seconds, 3),
            **self._fragmentation_json(),
            "tenants": {name: t.to_json() for name, t in sorted(self.tenants.items())},
        }
