"""GpuQuota objects (cluster-scoped, named after their tenant) to quota `TenantQuota` values.

Quantities are in the quota's resource: bytes for `gpu-memory` (`80Gi`), GPUs for `gpu` (`4`,
`500m`, counted in milli-GPU). `read_quota` raises InvalidQuota (or InvalidQuantity) with the
field named; `TenantQuota` itself checks how the fields relate (guaranteed <= nominal, ...).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gpupool.domain.errors import InvalidQuantity, InvalidQuota
from gpupool.domain.quantity import parse_quantity
from gpupool.quota.book import QuotaBook
from gpupool.quota.resource import Resource
from gpupool.quota.spec import Budget, OnExhaustion, TenantQuota

# A `gpu` quota counts whole GPUs; more than this many is a memory size written by mistake.
_MAX_GPUS = 1_000_000


def _amount(spec: Mapping[str, Any], field: str, resource: Resource, who: str) -> int | None:
    value = spec.get(field)
    if value is None:
        return None
    example = "80Gi" if resource is Resource.GPU_MEMORY else "4 or 500m"
    try:
        amount = parse_quantity(value, what=f"{who}: spec.{field}")
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
    except InvalidQuantity:
        raise InvalidQuota(
            f'{who}: spec.{field} must be a number of GPUs such as 2 or 1500m; got "{value}"'
        ) from None
    if amount < 0 or amount.denominator != 1:
        raise InvalidQuota(
            f"{who}: spec.{field} must be a number of GPUs of 0 or more such as 2 or 1500m; "
            f'got "{value}"'
        )
    return int(amount)


def _integer(spec: Mapping[str, Any], field: str, who: str) -> int | None:
    value = spec.get(field)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidQuota(f"{who}: spec.{field} must be a whole number; got {value!r}")
    return value


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
    budget = None
    raw_budget = spec.get("budget")
    if raw_budget is not None:
        if not isinstance(raw_budget, Mapping):
            raise InvalidQuota(f"{who}: spec.budget must be an object")
        try:
            limit = float(raw_budget["limitHours"])
            window = float(raw_budget["windowSeconds"])
        except (KeyError, TypeError, ValueError):
            raise InvalidQuota(
                f"{who}: spec.budget needs limitHours (a number) and windowSeconds (an integer)"
            ) from None
        try:
            budget = Budget(
                limit, window, OnExhaustion.parse(str(raw_budget.get("onExhaustion", "block")))
            )
        except InvalidQuota as err:
            raise InvalidQuota(f"{who}: spec.budget: {err}") from None
    cohort = spec.get("cohort")
    grace = _integer(spec, "reclaimGracePeriodSeconds", who)
    idle = _integer(spec, "lendAfterIdleSeconds", who)
    if idle is not None and idle < 0:
        raise InvalidQuota(f"{who}: spec.lendAfterIdleSeconds must be 0 or more; got {idle}")
    return TenantQuota(
        name=name,
        nominal=nominal,
        guaranteed=_amount(spec, "guaranteed", resource, who) or 0,
        resource=resource,
        borrow_limit=_amount(spec, "borrowLimit", resource, who),
        lend_limit=_amount(spec, "lendLimit", resource, who),
        compute_limit_milli=_milli_gpus(spec, "computeLimit", who),
        max_pods=_integer(spec, "maxPods", who),
        budget=budget,
        priority=_integer(spec, "priority", who) or 0,
        cohort=str(cohort) if cohort else None,
        reclaim_grace_s=30.0 if grace is None else float(grace),
        lend_after_idle_s=0.0 if idle is None else float(idle),
    )


def check_with_others(quota: TenantQuota, others: Iterable[TenantQuota]) -> QuotaBook:
    """The book the quota makes with the other tenants' quotas (raises when they clash)."""
    rest = [q for q in others if q.name != quota.name]
    return QuotaBook([*rest, quota])
