"""Builders for quota tests: tenants in a cohort, leases, asks."""

from __future__ import annotations

from gpupool.domain.units import GiB
from gpupool.quota.book import QuotaBook
from gpupool.quota.lease import Lease
from gpupool.quota.ledger import Ledger
from gpupool.quota.spec import TenantQuota

_SEQ = [0]


def tenant(name: str, nominal: int, **kw: object) -> TenantQuota:
    kw.setdefault("cohort", "research")
    return TenantQuota(name=name, nominal=nominal, **kw)  # type: ignore[arg-type]


def lease(tenant_name: str, amount: int, at: float = 0.0, **kw: object) -> Lease:
    _SEQ[0] += 1
    return Lease(id=f"l{_SEQ[0]}", tenant=tenant_name, amount=amount, reserved_at=at, **kw)  # type: ignore[arg-type]


def ledger_of(*quotas: TenantQuota) -> Ledger:
    return Ledger(QuotaBook(quotas))


G = GiB
