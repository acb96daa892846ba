"""The reads every reconciler shares, over the port's typed reads (`state.listed.Listed`, decoded
once by the adapter). Within a loop, `decode_leases` and `decode_pods` pass a read through the
loop's `Containment`: an object that did not decode is set aside with a ReconcileFailed event.
Outside a loop (the CLI), `read_leases` logs an unreadable GpuLease and leaves it out (it holds
nothing the controllers could act on; the extender fences its node)."""

from __future__ import annotations

import logging

from gpupool.controllers.contain import Containment
from gpupool.quota.spec import TenantQuota
from gpupool.state.lease import LeaseRecord
from gpupool.state.listed import Listed, ObjectReference, Unreadable
from gpupool.state.pods import PodView
from gpupool.state.quota_object import QuotaObject

READ = "read"  # the step name of decoding, in every loop


def read_leases(listed: Listed[LeaseRecord], log: logging.Logger) -> list[LeaseRecord]:
    for bad in listed.unreadable:
        log.error("ignoring an unreadable GpuLease %s: %s", bad.ref.key, bad.error)
    return listed.values


def decode_leases(
    contain: Containment, listed: Listed[LeaseRecord], now: float, *, every: bool = True
) -> list[LeaseRecord]:
    """`every`: `listed` is every GpuLease (not the few a round over what changed read)."""
    return [le for le, _ in contain.decode(READ, "GpuLease", listed, now, every=every)]


def decode_pods(
    contain: Containment, listed: Listed[PodView], now: float, *, every: bool = True
) -> list[tuple[PodView, ObjectReference]]:
    """(view, reference) of each pod that reads; `every`: as `decode_leases`'."""
    return contain.decode(READ, "Pod", listed, now, every=every)


def quota_specs(listed: Listed[QuotaObject]) -> Listed[TenantQuota]:
    """The quotas' specs: a quota whose spec is invalid is unreadable here (a loop that needs
    its spec sets it aside; the admission queue shows why on the tenant's pods instead)."""
    good = tuple((q.quota, ref) for q, ref in listed.read if q.quota is not None)
    bad = tuple(
        Unreadable(ref, q.invalid) for q, ref in listed.read if q.quota is None and q.invalid
    )
    return Listed(good, listed.unreadable + bad)
