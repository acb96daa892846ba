"""What a tenant's GpuQuota says about its leases' time to live (`TenantLeaseTerms`), decoded in
`adapters.wire.lease_terms`: a default TTL for pods that give none, and the grace period between
an expiry notice and the eviction (the quota's reclaim grace period, as for reclaim)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class TenantLeaseTerms:
    default_ttl_s: float | None = None  # None: leases of pods without a TTL never expire
    grace_s: float = 30.0
