"""The readers the controller's loops, the web view and the extender use, each remembering what
it decoded by object uid and resourceVersion: a round over the watch cache decodes only the
objects that changed since the last one, and the extender decodes a pod version once whether
kube-scheduler sends it to filter and prioritize, bind fetches it or a gang lists it (an object
with the same uid and version is the same bytes; the decoded values are frozen). Objects without
both (hand-made ones in tests) are decoded each time.

A reader that raises remembers nothing: the same bad object fails again, as it must (the loops'
containment counts and retries it).

The `*_listed` functions are the typed reads of `ports.ClusterApi` (`adapters.cluster` and the
unit tests' fake both decode through them): each object read alone with its reader, the values
with their `ObjectReference`, an object whose reader raises kept as `Unreadable` (the loop's
containment sets it aside and writes its Event).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from gpupool.adapters.kubernetes import lease, node, pdb, pod_view, pool
from gpupool.adapters.kubernetes.status_writes import stored_status
from gpupool.adapters.kubernetes.workload import read_workload
from gpupool.adapters.wire import names, quotas
from gpupool.adapters.wire.autoscale import autoscaled
from gpupool.adapters.wire.lease_terms import read_tenant_terms
from gpupool.domain.errors import GpupoolError
from gpupool.quota.spec import TenantQuota
from gpupool.state.defrag import DisruptionBudget
from gpupool.state.lease import LeaseRecord
from gpupool.state.listed import Listed, ObjectReference, Unreadable
from gpupool.state.nodes import GpuNodeObject, NodeObject
from gpupool.state.pods import PodView
from gpupool.state.pool import PoolObject
from gpupool.state.quota_object import QuotaObject
from gpupool.state.status_writes import StoredStatus
from gpupool.state.workload import ScalableWorkload

T = TypeVar("T")

MAX_KEPT = 50_000  # per reader: 5,000 nodes and tens of thousands of pods and leases


def by_version(read: Callable[[Mapping[str, Any]], T]) -> Callable[[Mapping[str, Any]], T]:
    kept: dict[tuple[str, str], T] = {}

    def remembered(obj: Mapping[str, Any]) -> T:
        meta = obj.get("metadata")
        uid = meta.get("uid") if isinstance(meta, Mapping) else None
        version = meta.get("resourceVersion") if isinstance(meta, Mapping) else None
        if not uid or not version:
            return read(obj)
        key = (str(uid), str(version))
        hit = kept.get(key)
        if hit is not None:
            return hit
        value = read(obj)
        if len(kept) >= MAX_KEPT:  # old versions pile up: start afresh rather than grow
            kept.clear()
        kept[key] = value
        return value

    remembered.__doc__ = read.__doc__
    remembered.__name__ = getattr(read, "__name__", "read")
    return remembered


read_pod = by_version(pod_view.read_pod)
read_node = by_version(node.read_node)
read_gpu_node = by_version(node.read_gpu_node)
lease_from_json = by_version(lease.lease_from_json)
read_quota = by_version(quotas.read_quota)
read_pool = by_version(pool.read_pool)
read_budget = by_version(pdb.read_budget)

# the apiVersion of the kinds the controllers read whose list items may lack it (an Event's
# involvedObject names it); gpupool's own kinds are gpupool.io/v1
API_VERSIONS = {
    "Pod": "v1",
    "Node": "v1",
    "Deployment": "apps/v1",
    "StatefulSet": "apps/v1",
    "PodDisruptionBudget": "policy/v1",
}
STATUS_KINDS = ("GpuQuota", "GpuNode", "GpuPool")  # the controller writes their status


def reference(
    kind: str, name: str, namespace: str | None = None, uid: str | None = None
) -> ObjectReference:
    """An object the controllers name without having read it (a tenant's GpuQuota, a lease)."""
    return ObjectReference(kind, API_VERSIONS.get(kind, names.API_VERSION), name, namespace, uid)


def reference_of(kind: str, obj: Mapping[str, Any]) -> ObjectReference:
    """The reference of an object as listed (a list's items may lack their kind and apiVersion)."""
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    namespace, uid, version = meta.get("namespace"), meta.get("uid"), meta.get("resourceVersion")
    return ObjectReference(
        kind,
        str(obj.get("apiVersion") or API_VERSIONS.get(kind, names.API_VERSION)),
        str(meta.get("name") or ""),
        str(namespace) if namespace else None,
        str(uid) if uid else None,
        str(version) if version else None,
    )


_kept_pairs: dict[
    tuple[object, str, str], tuple[tuple[Any, ObjectReference], StoredStatus | None]
] = {}


def listed(
    kind: str, objects: Iterable[Mapping[str, Any]], read: Callable[[Mapping[str, Any]], T]
) -> Listed[T]:
    """Each object read alone: a reader that raises makes that object `Unreadable`, not the
    list. Each (value, reference, stored status) is remembered by reader, uid and
    resourceVersion, as the readers remember their values: a round over the watch cache makes
    them only for the objects that changed."""
    good: list[tuple[T, ObjectReference]] = []
    bad: list[Unreadable] = []
    stored: dict[str, StoredStatus] = {}
    keeps_status = kind in STATUS_KINDS
    for obj in objects:
        meta = obj.get("metadata")
        uid = meta.get("uid") if isinstance(meta, Mapping) else None
        version = meta.get("resourceVersion") if isinstance(meta, Mapping) else None
        key = (read, str(uid), str(version)) if uid and version else None
        kept = _kept_pairs.get(key) if key is not None else None
        if kept is None:
            ref = reference_of(kind, obj)
            try:
                value = read(obj)
            except Exception as err:
                bad.append(Unreadable(ref, err))
                continue
            decoded = stored_status(kind, obj.get("status")) if keeps_status else None
            kept = ((value, ref), decoded)
            if key is not None:
                if len(_kept_pairs) >= MAX_KEPT:  # old versions pile up: start afresh
                    _kept_pairs.clear()
                _kept_pairs[key] = kept
        pair, status = kept
        good.append(pair)
        if status is not None:
            stored[pair[1].key] = status
    return Listed(tuple(good), tuple(bad), stored)


def one(
    kind: str, obj: Mapping[str, Any], read: Callable[[Mapping[str, Any]], T]
) -> T | Unreadable:
    """One object read (a GET): its value, or why it does not decode."""
    try:
        return read(obj)
    except Exception as err:
        return Unreadable(reference_of(kind, obj), err)


def _quota_object(obj: Mapping[str, Any]) -> QuotaObject:
    """The quota, or the GpupoolError that says why its spec is invalid (any other error makes
    the object unreadable), and its lease terms."""
    spec: TenantQuota | None = None
    invalid: GpupoolError | None = None
    try:
        spec = read_quota(obj)
    except GpupoolError as err:
        invalid = err
    name, terms = read_tenant_terms(obj)
    meta = obj.get("metadata") or {}
    generation = meta.get("generation")
    return QuotaObject(name, generation if isinstance(generation, int) else None, spec, invalid,
                       terms)  # fmt: skip


def pods_listed(objects: Iterable[Mapping[str, Any]]) -> Listed[PodView]:
    return listed("Pod", objects, read_pod)


def leases_listed(objects: Iterable[Mapping[str, Any]]) -> Listed[LeaseRecord]:
    return listed("GpuLease", objects, lease_from_json)


def quotas_listed(objects: Iterable[Mapping[str, Any]]) -> Listed[QuotaObject]:
    return listed("GpuQuota", objects, _quota_object)


def nodes_listed(objects: Iterable[Mapping[str, Any]]) -> Listed[NodeObject]:
    return listed("Node", objects, read_node)


def gpu_nodes_listed(objects: Iterable[Mapping[str, Any]]) -> Listed[GpuNodeObject]:
    return listed("GpuNode", objects, read_gpu_node)


def pools_listed(objects: Iterable[Mapping[str, Any]]) -> Listed[PoolObject]:
    return listed("GpuPool", objects, read_pool)


def budgets_listed(objects: Iterable[Mapping[str, Any]]) -> Listed[DisruptionBudget]:
    return listed("PodDisruptionBudget", objects, read_budget)


def _deployment(obj: Mapping[str, Any]) -> ScalableWorkload:
    return read_workload(obj, "Deployment")


def _stateful_set(obj: Mapping[str, Any]) -> ScalableWorkload:
    return read_workload(obj, "StatefulSet")


WORKLOAD_READERS = {"Deployment": _deployment, "StatefulSet": _stateful_set}


def workloads_listed(kind: str, objects: Iterable[Mapping[str, Any]]) -> Listed[ScalableWorkload]:
    """The Deployments or StatefulSets (`kind`) that ask to be autoscaled, decoded (the others
    are not read: the autoscaler leaves them alone)."""
    asking = [o for o in objects if autoscaled((o.get("metadata") or {}).get("annotations") or {})]
    return listed(kind, asking, WORKLOAD_READERS[kind])


def pod_read(obj: Mapping[str, Any]) -> PodView | Unreadable:
    return one("Pod", obj, read_pod)
