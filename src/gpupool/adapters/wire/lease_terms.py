"""A lease's terms on the wire: the pod's `gpupool.io/lease-ttl` (a duration such as `2h`,
`90m`, `1h30m` or `45s`) and `gpupool.io/renew` (any new value renews), and the tenant's
GpuQuota `spec.leaseTTLSeconds` (the default TTL) and `reclaimGracePeriodSeconds` (the grace
between the expiry notice and the eviction) ⇄ `state.lease_terms`."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from gpupool.adapters.wire import names
from gpupool.domain.errors import GpupoolError
from gpupool.state.lease_terms import TenantLeaseTerms

_PART = re.compile(r"(\d+(?:\.\d+)?)(h|m|s)")
_SECONDS = {"h": 3600.0, "m": 60.0, "s": 1.0}
DEFAULT_GRACE_S = 30.0  # the CRD's default reclaimGracePeriodSeconds


class InvalidLeaseTtl(GpupoolError):
    """A pod's gpupool.io/lease-ttl is not a positive duration."""


def parse_ttl(text: str) -> float:
    """Seconds of a duration such as `2h`, `90m`, `1h30m`, `45s`; InvalidLeaseTtl otherwise."""
    value = text.strip()
    parts = _PART.findall(value)
    total = sum(float(n) * _SECONDS[unit] for n, unit in parts)
    if not parts or "".join(n + u for n, u in parts) != value or not total > 0:
        raise InvalidLeaseTtl(
            f"annotation {names.ANN_LEASE_TTL} must be a positive duration such as 2h, 90m, "
            f"1h30m or 45s; got {text!r}"
        )
    return total


def pod_ttl(annotations: Mapping[str, str]) -> float | None:
    """The pod's own TTL; None without the annotation; InvalidLeaseTtl when it does not parse."""
    text = annotations.get(names.ANN_LEASE_TTL)
    return None if text is None else parse_ttl(str(text))


def read_tenant_terms(quota: Mapping[str, Any]) -> tuple[str, TenantLeaseTerms]:
    """(tenant, terms) of a GpuQuota object (named after its tenant); the CRD's schema has
    already refused a TTL below 1 and a negative grace period."""
    name = str((quota.get("metadata") or {}).get("name") or "")
    spec = quota.get("spec") or {}
    ttl = spec.get("leaseTTLSeconds")
    grace = spec.get("reclaimGracePeriodSeconds")
    return name, TenantLeaseTerms(
        default_ttl_s=float(ttl) if isinstance(ttl, int) and ttl > 0 else None,
        grace_s=float(grace) if isinstance(grace, int) and grace >= 0 else DEFAULT_GRACE_S,
    )
