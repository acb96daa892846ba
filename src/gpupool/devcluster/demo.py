"""The built-in demo on the dev cluster: its tenants as namespaces and GpuQuotas, its tasks as
pods (`simulator.demo_scenario` holds the data; `cli/demo.py` runs it)."""

from __future__ import annotations

from typing import Any

from gpupool.adapters.wire import names
from gpupool.devcluster.apiclient import KubeApi
from gpupool.domain.requests import Request
from gpupool.domain.units import MiB
from gpupool.quota.resource import Resource
from gpupool.quota.spec import TenantQuota

IMAGE = "registry.example/gpupool-demo:1"  # kwok nodes run no container: any name does


def quota_objects(quota: TenantQuota) -> list[dict[str, Any]]:
    """The tenant's namespace (named after it, labelled with it) and its GpuQuota."""

    def amount(value: int) -> int | str:
        return f"{value}m" if quota.resource is Resource.GPU else value  # milli-GPU | bytes

    spec: dict[str, Any] = {
        "resource": quota.resource.value,
        "nominal": amount(quota.nominal),
        "guaranteed": amount(quota.guaranteed),
        "priority": quota.priority,
        "reclaimGracePeriodSeconds": int(quota.reclaim_grace_s),
    }
    if quota.cohort is not None:
        spec["cohort"] = quota.cohort
    if quota.borrow_limit is not None:
        spec["borrowLimit"] = amount(quota.borrow_limit)
    if quota.lend_limit is not None:
        spec["lendLimit"] = amount(quota.lend_limit)
    namespace = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": quota.name, "labels": {names.LABEL_TENANT: quota.name}},
    }
    gpuquota = {
        "apiVersion": names.API_VERSION,
        "kind": "GpuQuota",
        "metadata": {"name": quota.name},
        "spec": spec,
    }
    return [namespace, gpuquota]


def pod_object(req: Request) -> dict[str, Any]:
    """A task as a pod in its tenant's namespace, asking for what the task asks."""
    limits: dict[str, str] = {}
    if req.gpu_memory_bytes:
        limits[names.RES_GPU_MEMORY] = f"{req.gpu_memory_bytes // MiB}Mi"
        if req.gpu_count > 1:
            limits[names.RES_GPU] = str(req.gpu_count)
    else:
        limits[names.RES_GPU] = str(req.gpu_count)
    if req.compute_pct:
        limits[names.RES_GPU_COMPUTE] = str(req.compute_pct)
    requests = {"cpu": f"{req.cpu_milli}m", "memory": f"{req.memory_mib}Mi"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": req.name, "namespace": req.tenant, "labels": {"app": req.name}},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": IMAGE,
                    "resources": {"limits": {**limits, **requests}, "requests": requests},
                }
            ]
        },
    }


def apply_tenants(api: KubeApi, quotas: list[TenantQuota]) -> None:
    """On the demo's fresh cluster: nothing of these exists yet."""
    for quota in quotas:
        namespace, gpuquota = quota_objects(quota)
        api.create("/api/v1/namespaces", namespace)
        api.create(f"/apis/{names.API_VERSION}/gpuquotas", gpuquota)


def start_pod(api: KubeApi, req: Request) -> None:
    api.create(f"/api/v1/namespaces/{req.tenant}/pods", pod_object(req))
