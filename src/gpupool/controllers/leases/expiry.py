"""Lease expiry and renewal over one snapshot, pure: which leases get their expiry, which are
renewed, which pods get an expiry notice and which are evicted.

A lease's time to live is its pod's `gpupool.io/lease-ttl`, else its tenant's GpuQuota
`leaseTTLSeconds`, else none (it never expires); a pod's TTL longer than its tenant's
`leaseTTLSeconds` is cut to it (the webhook refuses such a pod; one created while it was away
gets its tenant's TTL, not its own). The controller writes it when it first sees the
lease, not the extender at its creation: the default comes from the GpuQuota, which only the
controller reads, and renewal moves the expiry later, so the controller is the one writer of
`spec.expiry`, `spec.ttlSeconds` and `spec.renewal` (the renewal value last honoured). The
expiry counts from the reservation (`status.start`), as metering does.

- Renewal: the pod's `gpupool.io/renew` differs from the lease's `spec.renewal` before the
  expiry: the expiry becomes now + TTL (the core's `Lease.renew`). After the expiry a renewal is
  too late (the core refuses it): the pod is noticed and evicted as any other.
- At the expiry, with the pod alive: the notice `gpupool.io/expiry-notice` (the reclaim notice's
  JSON: `{at, evictAt, claimant: the tenant, for: the pod}`) and an event; once its tenant's
  grace period (`reclaimGracePeriodSeconds`, as for reclaim) has passed, eviction through the
  Eviction API (`notices`, shared with reclaim, budget drain and defragmentation). The lease
  keeps its card until the pod is gone; `leases.plan` then ends it Expired, metered to that
  moment.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from gpupool.controllers.notices.plan import (
    EvictPod,
    NoticePod,
    deadline,
    given_and_over,
    new_notice,
    settle,
)
from gpupool.quota.lease import LeasePhase
from gpupool.rfc3339 import format_time
from gpupool.state.lease import LeaseRecord
from gpupool.state.lease_terms import TenantLeaseTerms
from gpupool.state.pods import PodView


@dataclass(frozen=True, slots=True)
class SetTerms:
    """Write the lease's `spec.expiry`, `ttlSeconds` and `renewal` (first sight or a renewal)."""

    lease: LeaseRecord
    ttl_s: float
    expiry: float
    renewal: str | None
    message: str


@dataclass(frozen=True, slots=True)
class ExpiryPlan:
    terms: tuple[SetTerms, ...] = ()
    notices: tuple[NoticePod, ...] = ()
    evictions: tuple[EvictPod, ...] = ()


def _first_terms(lease: LeaseRecord, pod: PodView, tenant: TenantLeaseTerms) -> SetTerms | None:
    ttl = pod.lease_ttl_s if pod.lease_ttl_s is not None else tenant.default_ttl_s
    if ttl is None:
        return None
    source = (
        f"the pod's TTL of {ttl:g}s"
        if pod.lease_ttl_s is not None
        else f"tenant {lease.tenant}'s default TTL of {ttl:g}s"
    )
    if tenant.default_ttl_s is not None and ttl > tenant.default_ttl_s:
        source = (
            f"the pod asked for {ttl:g}s, cut to tenant {lease.tenant}'s leaseTTLSeconds of "
            f"{tenant.default_ttl_s:g}s"
        )
        ttl = tenant.default_ttl_s
    expiry = lease.start + ttl
    return SetTerms(lease, ttl, expiry, pod.renewal, f"expires at {format_time(expiry)}: {source}")


def _renews(lease: LeaseRecord, pod: PodView) -> bool:
    """The tenant wrote a new renewal value since the last one honoured."""
    return pod.renewal is not None and pod.renewal != lease.renewal


def plan_expiry(
    leases: list[LeaseRecord],
    pods_by_uid: Mapping[str, PodView],
    tenants: Mapping[str, TenantLeaseTerms],
    now: float,
) -> ExpiryPlan:
    """`tenants`: each tenant's terms from its GpuQuota (absent: no default TTL, 30 s grace)."""
    terms: list[SetTerms] = []
    notices: list[NoticePod] = []
    evictions: list[EvictPod] = []
    for lease in leases:
        pod = pods_by_uid.get(lease.pod.uid)
        if lease.phase.terminal or pod is None or pod.terminal:
            continue  # `leases.plan` ends the lease of a pod that is gone or finished
        tenant = tenants.get(lease.tenant, TenantLeaseTerms())
        acct = lease.accounting(now)
        if lease.expiry is None:
            first = _first_terms(lease, pod, tenant)
            if first is None:
                continue
            terms.append(first)
            acct = replace(acct, ttl_s=first.ttl_s, expires_at=first.expiry)
        elif _renews(lease, pod) and acct.ttl_s is not None and not acct.is_due(now):
            renewed = acct.renew(now)
            assert renewed.expires_at is not None
            terms.append(
                SetTerms(lease, acct.ttl_s, renewed.expires_at, pod.renewal,
                         f"renewed by {pod.key} ({pod.renewal!r}): expires at "
                         f"{format_time(renewed.expires_at)}")
            )  # fmt: skip
            continue
        if not acct.is_due(now) or pod.deleting or acct.phase is LeasePhase.RESERVED:
            continue  # a reservation whose pod never started is swept, not evicted
        assert acct.expires_at is not None
        expired = format_time(acct.expires_at)
        notice = pod.expiry_notice
        if notice is None:
            given = new_notice(now, tenant.grace_s, lease.tenant, pod.key)
            notices.append(
                NoticePod(
                    pod,
                    given,
                    f"the GPU lease {lease.key} of this pod expired at {expired} and was not "
                    f"renewed (annotation gpupool.io/renew, before the expiry); the pod will be "
                    f"evicted at {deadline(given.evict_at, tenant.grace_s)}",
                )
            )
            continue
        evicted = (
            f"evicted: its GPU lease {lease.key} expired at {expired} and was not renewed "
            f"({given_and_over(notice)})"
        )
        outcome = settle(pod, notice, now, withdraw=None, evicted=evicted)
        if isinstance(outcome, EvictPod):
            evictions.append(outcome)
    return ExpiryPlan(tuple(terms), tuple(notices), tuple(evictions))
