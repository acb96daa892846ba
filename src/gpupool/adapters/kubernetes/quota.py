"""GpuQuota objects → the quota core's `TenantQuota` (cluster-scoped, named after the tenant)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpupool.adapters.kubernetes.errors import InvalidObject
from gpupool.adapters.wire.names import API_VERSION
from gpupool.domain.errors import GpupoolError
from gpupool.domain.quantity import quantity_int
from gpupool.domain.requests import MILLI
from gpupool.quota.resource import Resource
from gpupool.quota.spec import Budget, OnExhaustion, TenantQuota

KIND = "GpuQuota"


def _amount(value: object, resource: Resource, what: str) -> int:
    """Bytes for gpu-memory; milli-GPU for gpu ("4" → 4000, "500m" → 500)."""
    scale = 1 if resource is Resource.GPU_MEMORY else MILLI
    return quantity_int(value, what=what, scale=scale)


def quota_from_json(obj: Mapping[str, Any]) -> TenantQuota:
    """Read a GpuQuota; InvalidObject (naming the quota) if it is malformed or inconsistent."""
    name = str((obj.get("metadata") or {}).get("name", ""))
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        raise InvalidObject(KIND, name, "missing spec")
    try:
        resource = Resource.parse(str(spec.get("resource", "gpu-memory")))

        def opt(key: str) -> int | None:
            return None if spec.get(key) is None else _amount(spec[key], resource, key)

        budget = None
        if spec.get("budget"):
            b = spec["budget"]
            budget = Budget(
                limit=float(b["limitHours"]),
                window_s=float(b["windowSeconds"]),
                on_exhaustion=OnExhaustion.parse(str(b.get("onExhaustion", "block"))),
            )
        compute = spec.get("computeLimit")
        return TenantQuota(
            name=name,
            nominal=_amount(spec.get("nominal"), resource, "nominal"),
            guaranteed=opt("guaranteed") or 0,
            resource=resource,
            borrow_limit=opt("borrowLimit"),
            lend_limit=opt("lendLimit"),
            compute_limit_milli=None
            if compute is None
            else quantity_int(compute, what="computeLimit", scale=MILLI),
            max_pods=None if spec.get("maxPods") is None else int(spec["maxPods"]),
            budget=budget,
            priority=int(spec.get("priority", 0)),
            cohort=spec.get("cohort") or None,
            reclaim_grace_s=float(spec.get("reclaimGracePeriodSeconds", 30)),
            lend_after_idle_s=float(spec.get("lendAfterIdleSeconds", 0)),
        )
    except GpupoolError as err:
        raise InvalidObject(KIND, name, str(err)) from None
    except (KeyError, TypeError, ValueError) as err:
        raise InvalidObject(KIND, name, f"malformed: {err!r}") from None


def quota_to_json(quota: TenantQuota) -> dict[str, Any]:
    """A GpuQuota object for a TenantQuota (amounts as plain integers in the resource's unit,
    except gpu quotas, written in milli: "4000m")."""

    def fmt(value: int) -> int | str:
        return value if quota.resource is Resource.GPU_MEMORY else f"{value}m"

    spec: dict[str, Any] = {
        "resource": quota.resource.value,
        "nominal": fmt(quota.nominal),
        "guaranteed": fmt(quota.guaranteed),
        "priority": quota.priority,
        "reclaimGracePeriodSeconds": int(quota.reclaim_grace_s),
    }
    for key, value in (("borrowLimit", quota.borrow_limit), ("lendLimit", quota.lend_limit)):
        if value is not None:
            spec[key] = fmt(value)
    if quota.compute_limit_milli is not None:
        spec["computeLimit"] = f"{quota.compute_limit_milli}m"
    if quota.max_pods is not None:
        spec["maxPods"] = quota.max_pods
    if quota.cohort:
        spec["cohort"] = quota.cohort
    if quota.lend_after_idle_s:
        spec["lendAfterIdleSeconds"] = int(quota.lend_after_idle_s)
    if quota.budget is not None:
        spec["budget"] = {
            "limitHours": quota.budget.limit,
            "windowSeconds": int(quota.budget.window_s),
            "onExhaustion": quota.budget.on_exhaustion.value,
        }
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": quota.name},
        "spec": spec,
    }
