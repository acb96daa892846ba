"""GpuQuota objects (cluster-scoped, named after their tenant) to quota `TenantQuota` values.

Quantities are in the quota's resource: bytes for `gpu-memory` (`80Gi`), GPUs for `gpu` (`4`,
`500m`, counted in milli-GPU). `read_quota` raises InvalidQuota (or InvalidQuantity) with the
field named; `TenantQuota` itself checks how the fields relate (guaranteed <= nominal, ...).
Every quantity, count and duration is bounded (`domain.bounds`: 1Ei of GPU memory, a million
GPUs or pods, 366 days), and a value beyond its bound is refused with the bound named: the
webhook refuses such a quota, and the controller reports one that got in anyway on its tenant
alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gpupool.domain.bounds import (
    MAX_BUDGET_HOURS,
    MAX_DURATION_S,
    MAX_DURATION_TEXT,
    MAX_QUOTA_BYTES,
    MAX_QUOTA_GPUS,
    MAX_QUOTA_MEMORY_TEXT,
    MAX_QUOTA_PODS,
    MAX_SETTING_CHARS,
)
from gpupool.domain.errors import InvalidQuantity, InvalidQuota, QuantityOutOfRange
from gpupool.domain.quantity import parse_quantity
from gpupool.quota.book import QuotaBook
from gpupool.quota.resource import Resource
from gpupool.quota.spec import Budget, OnExhaustion, TenantQuota

# A `gpu` quota counts whole GPUs; more than this many is a memory size written by mistake.
_MAX_GPUS = MAX_QUOTA_GPUS


def _amount(spec: Mapping[str, Any], field: str, resource: Resource, who: str) -> int | None:
    value = spec.get(field)
    if value is None:
        return None
    example = "80Gi" if resource is Resource.GPU_MEMORY else "4 or 500m"
    try:
        amount = parse_quantity(value, what=f"{who}: spec.{field}")
    except QuantityOutOfRange as err:
        raise InvalidQuota(str(err)) from None
    except InvalidQuantity:
        raise InvalidQuota(
            f'{who}: spec.{field} must be a quantity such as {example}; got "{value}"'
        ) from None
    if amount < 0:
        raise InvalidQuota(f'{who}: spec.{field} must be 0 or more; got "{value}"')
    if resource is Resource.GPU_MEMORY:
        if amount.denominator != 1:
            raise InvalidQuota(
                f'{who}: spec.{field} must be a whole number of bytes such as 80Gi; got "{value}"'
            )
        if amount > MAX_QUOTA_BYTES:
            raise InvalidQuota(
                f'{who}: spec.{field} is "{value}", above the most GPU memory a quota may name '
                f"({MAX_QUOTA_MEMORY_TEXT}, far beyond any cluster); write what the tenant may "
                f"hold, such as 80Gi"
            )
        return int(amount)
    if amount > _MAX_GPUS:
        raise InvalidQuota(
            f'{who}: spec.{field} is "{value}" GPUs, which looks like a memory size; a quota '
            f"with resource gpu counts GPUs (4, 500m); for memory set resource: gpu-memory"
        )
    milli = amount * 1000
    if milli.denominator != 1:
        raise InvalidQuota(
            f'{who}: spec.{field} must be a whole number of milli-GPU; got "{value}"'
        )
    return int(milli)


def _milli_gpus(spec: Mapping[str, Any], field: str, who: str) -> int | None:
    value = spec.get(field)
    if value is None:
        return None
    try:
        amount = parse_quantity(value, what=f"{who}: spec.{field}") * 1000
    except QuantityOutOfRange as err:
        raise InvalidQuota(str(err)) from None
    except InvalidQuantity:
        raise InvalidQuota(
            f'{who}: spec.{field} must be a number of GPUs such as 2 or 1500m; got "{value}"'
        ) from None
    if amount < 0 or amount.denominator != 1:
        raise InvalidQuota(
            f"{who}: spec.{field} must be a number of GPUs of 0 or more such as 2 or 1500m; "
            f'got "{value}"'
        )
    if amount > _MAX_GPUS * 1000:
        raise InvalidQuota(
            f'{who}: spec.{field} is "{value}" GPUs, above the most a quota may name '
            f"({_MAX_GPUS:,} GPUs, far beyond any cluster); write a number of GPUs such as 2"
        )
    return int(amount)


def _integer(spec: Mapping[str, Any], field: str, who: str) -> int | None:
    value = spec.get(field)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidQuota(f"{who}: spec.{field} must be a whole number; got {value!r}")
    return value


# The int32 range of the CRD's integer fields that are not counts or durations (priority).
_INT32 = 2**31


def _bounded(spec: Mapping[str, Any], field: str, who: str, low: int, high: int) -> int | None:
    """A whole number in [low, high]; the message names the bound."""
    value = _integer(spec, field, who)
    if value is not None and value < low:
        raise InvalidQuota(f"{who}: spec.{field} must be {low} or more; got {value}")
    if value is not None and value > high:
        raise InvalidQuota(
            f"{who}: spec.{field} is {value:,}, above the most gpupool accepts ({high:,}); "
            f"write at most that"
        )
    return value


def _duration(spec: Mapping[str, Any], field: str, who: str, low: int) -> int | None:
    """Whole seconds in [low, MAX_DURATION_S]; the message names the bound."""
    value = _integer(spec, field, who)
    if value is not None and value < low:
        raise InvalidQuota(f"{who}: spec.{field} must be {low} or more; got {value}")
    if value is not None and value > MAX_DURATION_S:
        raise InvalidQuota(
            f"{who}: spec.{field} is {value} seconds, above the longest gpupool accepts: "
            f"{MAX_DURATION_S} seconds ({MAX_DURATION_TEXT}, 366 days); write at most that"
        )
    return value


def _number(raw: Mapping[str, Any], field: str) -> float:
    value = raw[field]
    if isinstance(value, bool) or (isinstance(value, str) and len(value) > MAX_SETTING_CHARS):
        raise TypeError(field)
    return float(value)


def _budget(raw: object, who: str) -> Budget | None:
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise InvalidQuota(f"{who}: spec.budget must be an object")
    try:
        limit = _number(raw, "limitHours")
        window = _number(raw, "windowSeconds")
    except (KeyError, TypeError, ValueError):
        raise InvalidQuota(
            f"{who}: spec.budget needs limitHours (a number) and windowSeconds (an integer)"
        ) from None
    if not limit <= MAX_BUDGET_HOURS:  # NaN and infinities too; Budget checks the floor
        raise InvalidQuota(
            f"{who}: spec.budget.limitHours must be from 0 to {MAX_BUDGET_HOURS:.0e} hours; "
            f"got {raw['limitHours']!r}"
        )
    if window > MAX_DURATION_S:
        raise InvalidQuota(
            f"{who}: spec.budget.windowSeconds must be from 1 to {MAX_DURATION_S} seconds "
            f"({MAX_DURATION_TEXT}, 366 days); got {raw['windowSeconds']!r}"
        )
    try:
        return Budget(limit, window, OnExhaustion.parse(str(raw.get("onExhaustion", "block"))))
    except InvalidQuota as err:
        raise InvalidQuota(f"{who}: spec.budget: {err}") from None


def read_quota(obj: Mapping[str, Any]) -> TenantQuota:
    """The TenantQuota a GpuQuota object describes (its name is the tenant's)."""
    meta = obj.get("metadata") or {}
    name = str(meta.get("name") or "")
    who = f"GpuQuota {name!r}"
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        raise InvalidQuota(f"{who}: has no spec; give at least spec.nominal")
    try:
        resource = Resource.parse(str(spec.get("resource", Resource.GPU_MEMORY.value)))
    except ValueError as err:
        raise InvalidQuota(f"{who}: spec.resource: {err}") from None
    nominal = _amount(spec, "nominal", resource, who)
    if nominal is None:
        raise InvalidQuota(f"{who}: spec.nominal is required (what the tenant may hold)")
    budget = _budget(spec.get("budget"), who)
    cohort = spec.get("cohort")
    grace = _duration(spec, "reclaimGracePeriodSeconds", who, 0)
    idle = _duration(spec, "lendAfterIdleSeconds", who, 0)
    _duration(spec, "leaseTTLSeconds", who, 1)  # read by `wire.lease_terms`; checked here too
    max_pods = _bounded(spec, "maxPods", who, 0, MAX_QUOTA_PODS)
    priority = _bounded(spec, "priority", who, -_INT32, _INT32 - 1)
    return TenantQuota(
        name=name,
        nominal=nominal,
        guaranteed=_amount(spec, "guaranteed", resource, who) or 0,
        resource=resource,
        borrow_limit=_amount(spec, "borrowLimit", resource, who),
        lend_limit=_amount(spec, "lendLimit", resource, who),
        compute_limit_milli=_milli_gpus(spec, "computeLimit", who),
        max_pods=max_pods,
        budget=budget,
        priority=priority or 0,
        cohort=str(cohort) if cohort else None,
        reclaim_grace_s=30.0 if grace is None else float(grace),
        lend_after_idle_s=0.0 if idle is None else float(idle),
    )


def check_with_others(quota: TenantQuota, others: Iterable[TenantQuota]) -> QuotaBook:
    """The book the quota makes with the other tenants' quotas (raises when they clash)."""
    rest = [q for q in others if q.name != quota.name]
    return QuotaBook([*rest, quota])
