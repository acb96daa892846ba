"""Usage for a bill: GiB-hours and GPU-hours per tenant, namespace or pod over a period, from
what each lease held and when (pure: `gpupool usage` feeds it GpuLeases, a test a replay).

A lease counts for the part of [its start, its end or `until`) inside the period [since, until):
GiB-hours are its device memory in GiB × those hours (`Lease.gib_hours`, the meter's and the
controller's `gpupool_controller_tenant_gib_hours`); GPU-hours its card-equivalents (each slice's
share of its card's memory, a whole card 1) × those hours.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum

from gpupool.domain.requests import MILLI
from gpupool.domain.units import GiB

SECONDS_PER_HOUR = 3600.0


class UsageBy(Enum):
    TENANT = "tenant"
    NAMESPACE = "namespace"
    POD = "pod"


@dataclass(frozen=True, slots=True)
class Held:
    """What one lease held: `gpu_milli` card-equivalents × 1000; `end` None while it holds."""

    tenant: str
    namespace: str
    pod: str
    gpu_memory_bytes: int
    gpu_milli: int
    start: float
    end: float | None


@dataclass(frozen=True, slots=True)
class UsageRow:
    tenant: str
    namespace: str  # "" when grouped by tenant
    pod: str  # "" unless grouped by pod
    gib_hours: float
    gpu_hours: float
    leases: int  # leases that held something in the period


def held_hours(held: Held, since: float, until: float) -> float:
    end = until if held.end is None else min(held.end, until)
    return max(0.0, end - max(held.start, since)) / SECONDS_PER_HOUR


def usage(held: Iterable[Held], since: float, until: float, by: UsageBy) -> tuple[UsageRow, ...]:
    """One row per tenant (namespace, pod) that held anything in [since, until), sorted."""
    sums: dict[tuple[str, str, str], tuple[float, float, int]] = {}
    for h in held:
        hours = held_hours(h, since, until)
        if hours <= 0:
            continue
        key = (
            h.tenant,
            h.namespace if by is not UsageBy.TENANT else "",
            h.pod if by is UsageBy.POD else "",
        )
        gib, gpu, n = sums.get(key, (0.0, 0.0, 0))
        sums[key] = (
            gib + h.gpu_memory_bytes / GiB * hours,
            gpu + h.gpu_milli / MILLI * hours,
            n + 1,
        )
    return tuple(UsageRow(*key, *sums[key]) for key in sorted(sums))
