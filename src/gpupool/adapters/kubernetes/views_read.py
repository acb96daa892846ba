"""One read of the cluster for the terminal views (`state.views.status.ViewInputs`): Nodes,
GpuNodes, GpuLeases, GpuQuotas and the tenants' pods, decoded once with the same readers the
extender and the controller use.

The read is as wide as the caller's RBAC allows. An operator lists everything. A tenant may not
list cluster-wide (403): its leases and pods are then read in its namespaces (`--namespace`, else
the kubeconfig context's namespace) and its quota by name (the tenants those pods and leases
name); what it could not see becomes a note the views print, never an error. A 401 (a token
expired or revoked) and an unreachable API server are errors that say what to do.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Any, cast

import httpx2
from lightkube import AsyncClient, operators
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Node, Pod

from gpupool.adapters.kubernetes.decoded import (
    lease_from_json,
    read_gpu_node,
    read_node,
    read_pod,
    read_quota,
)
from gpupool.adapters.kubernetes.resources import GpuLease, GpuNode, GpuQuota, to_dict
from gpupool.adapters.kubernetes.watch_cache import WatchCache
from gpupool.adapters.wire import names
from gpupool.domain.errors import GpupoolError
from gpupool.quota.spec import TenantQuota
from gpupool.state.lease import LeaseRecord
from gpupool.state.pods import PodView
from gpupool.state.views.inputs import QueueEntry, QuotaStatus
from gpupool.state.views.status import ViewInputs

log = logging.getLogger("gpupool.views")

Json = dict[str, Any]


class ClusterUnreachable(GpupoolError):
    """The API server could not be reached, or refused the caller's credentials."""


def quota_status(status: object) -> QuotaStatus | None:
    """A GpuQuota's `status` as the admission controller writes it; None when it has none."""
    if not isinstance(status, dict) or not status:
        return None

    def num(key: str) -> int:
        value = status.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    queue = tuple(
        QueueEntry(
            str(q.get("namespace") or ""),
            str(q.get("name") or ""),
            int(q.get("position") or 0),
            str(q.get("reason") or ""),
        )
        for q in status.get("queue") or ()
        if isinstance(q, dict)
    )
    hours = status.get("hoursUsed")
    return QuotaStatus(
        used=num("usedAmount"),
        borrowed=num("borrowedAmount"),
        lent=num("lentAmount"),
        pods=num("pods"),
        queued=num("queued"),
        queue=queue,
        hours_used=float(hours) if isinstance(hours, int | float) else None,
    )


class _Denied(Exception):
    def __init__(self, what: str) -> None:
        self.what = what


async def _list(what: str, call: Callable[[], Awaitable[list[Json]]]) -> list[Json]:
    try:
        return await call()
    except ApiError as err:
        code = err.status.code
        if code == 401:
            raise ClusterUnreachable(
                "the API server refused your credentials (401 Unauthorized): the token or "
                "certificate in your kubeconfig has expired or been revoked; log in again"
            ) from None
        if code in (403, 404):
            raise _Denied(what) from None
        raise ClusterUnreachable(f"listing {what} failed: {err.status.message}") from None
    except (httpx2.HTTPError, OSError) as err:
        raise ClusterUnreachable(
            f"cannot reach the API server ({err.__class__.__name__}: {err}); check the "
            "kubeconfig's server and that the cluster is up"
        ) from None


def _decode(objects: Sequence[Json], read: Callable[[Json], Any], notes: list[str]) -> list[Any]:
    out = []
    for obj in objects:
        try:
            out.append(read(obj))
        except GpupoolError as err:
            notes.append(f"left out an unreadable object: {err}")
    return out


CACHED = {
    Node: "nodes",
    GpuNode: "gpunodes",
    GpuLease: "gpuleases",
    Pod: "pods",
    GpuQuota: "gpuquotas",
}


async def read_views(
    client: AsyncClient,
    namespaces: Sequence[str] = (),
    tenants: Sequence[str] = (),
    cache: WatchCache | None = None,
) -> ViewInputs:
    """Everything the views need that the caller may read (see the module's docstring).
    `namespaces`: read only these (a tenant's view); empty: cluster-wide when allowed.
    `tenants`: quotas to read by name when the caller may not list them all, beside those its
    leases and pods name (a tenant whose pods all wait has no lease yet). `cache`: a watch
    cache of the cluster-wide reads; they then cost no LIST (the web view folds the cache's
    changes into its kept views instead: adapters/web/feed.py)."""

    async def items(resource: Any, **kw: Any) -> list[Json]:
        kind = CACHED.get(resource)
        if cache is not None and kind in cache.stores and kw.get("namespace", "*") == "*":
            return cast(list[Json], await cache.values(kind))
        return [to_dict(x) async for x in client.list(resource, **kw)]

    notes: list[str] = []
    nodes: list[Json] = []
    gpunodes: list[Json] = []
    try:
        nodes = await _list("nodes", lambda: items(Node))
        gpunodes = await _list("gpunodes", lambda: items(GpuNode))
    except _Denied as denied:
        nodes, gpunodes = [], []
        notes.append(
            f"the pool map is hidden: you may not list {denied.what} (RBAC); showing your "
            "namespaces' leases and queue"
        )
    scope: tuple[str, ...] | None = tuple(namespaces) or None
    tenant_pods = {"labels": {names.LABEL_TENANT: operators.exists()}}
    lease_objs: list[Json] = []
    pod_objs: list[Json] = []
    if scope is None:
        try:
            lease_objs = await _list("gpuleases", lambda: items(GpuLease, namespace="*"))
            pod_objs = await _list("pods", lambda: items(Pod, namespace="*", **tenant_pods))
        except _Denied:
            scope = (client.namespace,)
            notes.append(
                f"you may not list pods and leases in every namespace; showing namespace "
                f"{client.namespace} (--namespace to choose)"
            )
    pods_visible = True
    if scope is not None:
        lease_objs, pod_objs = [], []
        for ns in scope:
            try:
                lease_objs += await _list(
                    f"gpuleases in {ns}", partial(items, GpuLease, namespace=ns)
                )
            except _Denied as denied:
                notes.append(f"you may not list {denied.what}; left out")
            try:
                pod_objs += await _list(
                    f"pods in {ns}", partial(items, Pod, namespace=ns, **tenant_pods)
                )
            except _Denied as denied:
                pods_visible = False
                notes.append(
                    f"you may not list {denied.what}: the queue shows your quota's record of it"
                )
    leases: list[LeaseRecord] = _decode(lease_objs, lease_from_json, notes)
    pods: list[PodView] = _decode(pod_objs, read_pod, notes)
    quota_objs: list[Json] = []
    try:
        quota_objs = await _list("gpuquotas", lambda: items(GpuQuota))
    except _Denied:
        wanted = sorted({x.tenant for x in leases} | {p.tenant for p in pods} | set(tenants))
        for tenant in wanted:
            try:
                got = await _list(f"gpuquota {tenant}", partial(_get_quota, client, tenant))
                quota_objs += got
            except _Denied:
                notes.append(f"you may not read the GpuQuota of tenant {tenant}")
    quotas: list[TenantQuota] = _decode(quota_objs, read_quota, notes)
    statuses = {}
    for obj in quota_objs:
        status = quota_status(obj.get("status"))
        if status is not None:
            statuses[str((obj.get("metadata") or {}).get("name") or "")] = status
    return ViewInputs(
        nodes=_decode(nodes, read_node, notes),
        gpunodes=_decode(gpunodes, read_gpu_node, notes),
        leases=leases,
        quotas=quotas,
        statuses=statuses,
        pods=pods,
        pods_visible=pods_visible,
        namespaces=scope,
        notes=tuple(notes),
    )


async def _get_quota(client: AsyncClient, name: str) -> list[Json]:
    return [to_dict(await client.get(GpuQuota, name=name))]
