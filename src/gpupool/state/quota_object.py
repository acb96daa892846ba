"""A GpuQuota as the controllers read it (`ports.ClusterApi.quotas`): decoded once at the edge
into the tenant's quota (or why it is invalid) and its lease terms."""

from __future__ import annotations

from dataclasses import dataclass

from gpupool.domain.errors import GpupoolError
from gpupool.quota.spec import TenantQuota
from gpupool.state.lease_terms import TenantLeaseTerms


@dataclass(frozen=True, slots=True)
class QuotaObject:
    """`quota`: the tenant's quota, or None when its spec is invalid (`invalid`: what the
    reader refused, a user's mistake the admission queue shows on the tenant's pods);
    `terms`: the lease terms it gives (read whether or not the quota is valid)."""

    name: str
    generation: int | None
    quota: TenantQuota | None
    invalid: GpupoolError | None
    terms: TenantLeaseTerms
