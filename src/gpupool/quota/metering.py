"""Metering: usage-hours per tenant, in total and per budget window, from leases.

A lease's usage is its amount (in the tenant's quota resource) times the hours it is held
(`Lease.held_seconds`); the budget window is the fixed window `[k*W, (k+1)*W)` containing `now`.
Ended leases are folded into per-window sums when they close; live ones are added at query time.

The live controller keeps no meter between rounds: `Meter.snapshot` folds every lease it reads
(ended ones to their end, live ones to `now`, from the leases' own persisted timestamps), so a
restarted controller neither loses nor double-counts hours. Its `as_of` watermark says up to when
the live leases are already folded in; a live lease passed at query time then adds only what it
held after that (nothing, in the same round). The simulator's meter has no watermark.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gpupool.domain.requests import MILLI
from gpupool.domain.units import GiB
from gpupool.quota.book import QuotaBook
from gpupool.quota.idle import RecentPeak, recent_peak
from gpupool.quota.lease import Lease


@dataclass(frozen=True, slots=True)
class TenantUsage:
    gib_hours: float
    gpu_hours: float
    leases: int


def _overlap(start: float, end: float, lo: float, hi: float) -> float:
    return max(0.0, min(end, hi) - max(start, lo))


class Meter:
    def __init__(self, book: QuotaBook, *, as_of: float | None = None) -> None:
        self.book = book
        self.as_of = as_of
        self._window: dict[tuple[str, int], float] = {}
        self._gib: dict[str, float] = {}
        self._gpu: dict[str, float] = {}
        self._count: dict[str, int] = {}
        self._ended: dict[str, list[Lease]] = {}  # recently ended, for idle lending (`quota.idle`)

    @classmethod
    def snapshot(cls, book: QuotaBook, leases: Iterable[Lease], now: float) -> Meter:
        """A meter of every lease up to `now`: ended ones to their end, live ones to `now`."""
        meter = cls(book, as_of=now)
        for lease in leases:
            if lease.live:
                meter._fold(lease, now)
            elif lease.ended_at is not None:
                meter._fold(lease, min(lease.ended_at, now))
                meter._remember(lease)
        return meter

    def close(self, lease: Lease) -> None:
        """Fold an ended lease into the tenant's totals and budget windows."""
        if lease.ended_at is None:
            raise ValueError(f"lease {lease.id} has not ended")
        self._fold(lease, lease.ended_at)
        self._remember(lease)

    def _remember(self, lease: Lease) -> None:
        quota = self.book.get(lease.tenant)
        if quota is not None and quota.lend_after_idle_s > 0:
            self._ended.setdefault(lease.tenant, []).append(lease)

    def idle_peak(self, tenant: str, now: float, live: Iterable[Lease]) -> RecentPeak:
        """The most the tenant held at once within its idle time before lending (`quota.idle`);
        `live`: its live leases. Ended leases older than that are forgotten here."""
        quota = self.book.get(tenant)
        idle = 0.0 if quota is None else quota.lend_after_idle_s
        since = now - idle
        kept = [le for le in self._ended.get(tenant, ()) if (le.ended_at or 0.0) > since]
        if kept or tenant in self._ended:
            self._ended[tenant] = kept
        return recent_peak([*kept, *(le for le in live if le.live)], since, now, idle)

    def _fold(self, lease: Lease, end: float) -> None:
        tenant = lease.tenant
        held = max(0.0, end - lease.reserved_at)
        self._gib[tenant] = self._gib.get(tenant, 0.0) + lease.gpu_memory_bytes / GiB * held / 3600
        self._gpu[tenant] = self._gpu.get(tenant, 0.0) + lease.gpu_milli / MILLI * held / 3600
        self._count[tenant] = self._count.get(tenant, 0) + 1
        quota = self.book.get(tenant)
        if quota is None or quota.budget is None:
            return
        budget = quota.budget
        start = lease.reserved_at
        if end <= start:
            return
        for index in range(budget.window_of(start), budget.window_of(end) + 1):
            lo = budget.window_start(index)
            seconds = _overlap(start, end, lo, lo + budget.window_s)
            if seconds > 0:
                key = (tenant, index)
                self._window[key] = self._window.get(key, 0.0) + quota.resource.hours(
                    lease.amount, seconds
                )

    def window_usage(self, tenant: str, now: float, live: Iterable[Lease]) -> float:
        """Usage-hours in the budget window containing `now` (0 when the tenant has no budget)."""
        quota = self.book.get(tenant)
        if quota is None or quota.budget is None:
            return 0.0
        budget = quota.budget
        index = budget.window_of(now)
        lo = budget.window_start(index)
        total = self._window.get((tenant, index), 0.0)
        since = lo if self.as_of is None else max(lo, self.as_of)
        for lease in live:
            if lease.tenant == tenant and lease.live:
                total += quota.resource.hours(
                    lease.amount, _overlap(lease.reserved_at, now, since, now)
                )
        return total

    def usage(self, tenant: str, now: float, live: Iterable[Lease] = ()) -> TenantUsage:
        gib = self._gib.get(tenant, 0.0)
        gpu = self._gpu.get(tenant, 0.0)
        count = self._count.get(tenant, 0)
        if self.as_of is not None:
            return TenantUsage(gib_hours=gib, gpu_hours=gpu, leases=count)  # live ones folded
        for lease in live:
            if lease.tenant == tenant and lease.live:
                gib += lease.gib_hours(now)
                gpu += lease.gpu_hours(now)
                count += 1
        return TenantUsage(gib_hours=gib, gpu_hours=gpu, leases=count)
