"""A lease's terms on the wire: the pod's `gpupool.io/lease-ttl` (a duration such as `2h`,
`90m`, `1h30m` or `45s`) and `gpupool.io/renew` (any new value renews), and the tenant's
GpuQuota `spec.leaseTTLSeconds` (the default TTL) and `reclaimGracePeriodSeconds` (the grace
between the expiry notice and the eviction) ⇄ `state.lease_terms`.

A TTL is at most `bounds.MAX_DURATION_S` (366 days, written `8784h`), and a pod's is no longer
than its tenant's `leaseTTLSeconds` when the quota sets one: the webhook refuses a pod that asks
for more (`LeaseTtlTooLong`), and the controller, which may meet a pod created while the webhook
was away, reads the longest it may have instead (`capped_pod_ttl`, and the expiry plan's
`min` with the tenant's TTL)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from gpupool.adapters.wire import names
from gpupool.domain.bounds import MAX_DURATION_S, MAX_DURATION_TEXT, MAX_SETTING_CHARS
from gpupool.domain.errors import GpupoolError
from gpupool.state.lease_terms import TenantLeaseTerms

_PART = re.compile(r"(\d+(?:\.\d+)?)(h|m|s)")
_SECONDS = {"h": 3600.0, "m": 60.0, "s": 1.0}
DEFAULT_GRACE_S = 30.0  # the CRD's default reclaimGracePeriodSeconds


class InvalidLeaseTtl(GpupoolError):
    """A pod's gpupool.io/lease-ttl is not a positive duration."""


class LeaseTtlTooLong(InvalidLeaseTtl):
    """A pod's gpupool.io/lease-ttl is longer than gpupool grants, or than its tenant's
    GpuQuota `leaseTTLSeconds`."""


def _format_s(seconds: float) -> str:
    return f"{seconds:g}s"


def parse_ttl(text: str) -> float:
    """Seconds of a duration such as `2h`, `90m`, `1h30m`, `45s`; InvalidLeaseTtl otherwise, and
    LeaseTtlTooLong beyond `MAX_DURATION_S`."""
    if len(text) > MAX_SETTING_CHARS:
        raise InvalidLeaseTtl(
            f"annotation {names.ANN_LEASE_TTL} is {len(text)} characters long; a duration has "
            f"at most {MAX_SETTING_CHARS}, such as 2h, 90m, 1h30m or 45s"
        )
    value = text.strip()
    parts = _PART.findall(value)
    total = sum(float(n) * _SECONDS[unit] for n, unit in parts)
    if not parts or "".join(n + u for n, u in parts) != value or not total > 0:
        raise InvalidLeaseTtl(
            f"annotation {names.ANN_LEASE_TTL} must be a positive duration such as 2h, 90m, "
            f"1h30m or 45s; got {text!r}"
        )
    if total > MAX_DURATION_S:
        raise LeaseTtlTooLong(
            f"annotation {names.ANN_LEASE_TTL} is {text!r}, longer than the longest lease "
            f"gpupool grants ({MAX_DURATION_TEXT}, 366 days); ask for at most {MAX_DURATION_TEXT} "
            f"and renew the lease before it ends (annotation {names.ANN_RENEW})"
        )
    return total


def pod_ttl(annotations: Mapping[str, str]) -> float | None:
    """The pod's own TTL; None without the annotation; InvalidLeaseTtl when it does not parse or
    is beyond the bound."""
    text = annotations.get(names.ANN_LEASE_TTL)
    return None if text is None else parse_ttl(str(text))


def check_within_tenant(ttl_s: float, tenant: str, tenant_ttl_s: float | None) -> None:
    """LeaseTtlTooLong when the pod's TTL is longer than its tenant's `leaseTTLSeconds`."""
    if tenant_ttl_s is not None and ttl_s > tenant_ttl_s:
        raise LeaseTtlTooLong(
            f"annotation {names.ANN_LEASE_TTL} asks for {_format_s(ttl_s)}, longer than tenant "
            f"{tenant}'s leases may live (its GpuQuota's leaseTTLSeconds: "
            f"{_format_s(tenant_ttl_s)}); ask for at most {_format_s(tenant_ttl_s)} and renew "
            f"the lease (annotation {names.ANN_RENEW}), or leave the annotation out"
        )


def capped_pod_ttl(annotations: Mapping[str, str]) -> float | None:
    """The controller's read of the pod's TTL: one beyond the bound reads as the bound (the pod
    asked for a long lease; it gets the longest there is, not none), an unreadable one (the
    webhook refuses it at create) as none."""
    try:
        return pod_ttl(annotations)
    except LeaseTtlTooLong:
        return float(MAX_DURATION_S)
    except InvalidLeaseTtl:
        return None


def read_tenant_terms(quota: Mapping[str, Any]) -> tuple[str, TenantLeaseTerms]:
    """(tenant, terms) of a GpuQuota object (named after its tenant); the CRD's schema has
    already refused a TTL below 1 and a negative grace period, and one above the bound (a quota
    older than the bound) reads as the bound."""
    name = str((quota.get("metadata") or {}).get("name") or "")
    spec = quota.get("spec") or {}
    ttl = spec.get("leaseTTLSeconds")
    grace = spec.get("reclaimGracePeriodSeconds")
    return name, TenantLeaseTerms(
        default_ttl_s=float(min(ttl, MAX_DURATION_S)) if isinstance(ttl, int) and ttl > 0 else None,
        grace_s=(
            float(min(grace, MAX_DURATION_S))
            if isinstance(grace, int) and grace >= 0
            else DEFAULT_GRACE_S
        ),
    )
