"""An in-memory `ports.ClusterApi` for the reconcilers' unit tests, and builders of the objects it
holds (pods, GpuQuotas, GpuLeases, GpuNodes as the API server serves them).

It keeps JSON objects, hands them decoded through the adapter's own decoding
(`adapters.kubernetes.decoded`: the same `Listed` values, an object that does not decode as
`Unreadable`), applies the writes as the API server would (JSON patch `test`/`add`/
`remove`, merge patches, deletions, evictions) and records each write in `writes`, so a test says
what a reconciler wrote for a given cluster state and what the cluster then holds. `fail_next`
makes the next call of a write raise `ApiDown` (as an unreachable or erroring API server makes the
real one raise), to show that a failed write is retried by the next round.
"""

from __future__ import annotations

import copy
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from gpupool.adapters.kubernetes.decoded import (
    budgets_listed,
    gpu_nodes_listed,
    leases_listed,
    nodes_listed,
    pod_read,
    pods_listed,
    pools_listed,
    quotas_listed,
)
from gpupool.adapters.kubernetes.lease import lease_to_json
from gpupool.adapters.kubernetes.lease_writes import (
    ROOM_HOLD_ENDED,
    eviction_mark,
    expiry_spec,
    lease_status,
)
from gpupool.adapters.kubernetes.node import lease_renewals
from gpupool.adapters.kubernetes.pod_patches import admit_patch, annotate_merge, annotate_patch
from gpupool.adapters.kubernetes.status_writes import (
    gpu_node_health_json,
    pool_status_json,
    quota_status_json,
)
from gpupool.adapters.wire.times import format_time
from gpupool.ports import Json
from gpupool.state.defrag import DisruptionBudget
from gpupool.state.lease import LeaseRecord
from gpupool.state.lease_writes import EvictionMark, LeaseStatusWrite
from gpupool.state.listed import Listed, ObjectReference, Unreadable
from gpupool.state.nodes import GpuNodeObject, NodeObject
from gpupool.state.pods import PodView
from gpupool.state.pool import PoolObject
from gpupool.state.quota_object import QuotaObject
from gpupool.state.status_writes import GpuNodeHealthWrite, PoolStatusWrite, QuotaStatusWrite


class ApiDown(Exception):
    """What a write raises when told to fail (a 500 or a broken connection in the real one)."""


class PatchTestFailed(Exception):
    """A JSON patch `test` op did not hold (the API server answers 422: the object changed)."""


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def _json_patch(obj: Json, ops: list[Json]) -> None:
    for op in ops:
        *parents, last = [_unescape(t) for t in str(op["path"]).split("/")[1:]]
        target: Any = obj
        for token in parents:
            target = target[int(token)] if isinstance(target, list) else target[token]
        key: Any = int(last) if isinstance(target, list) else last
        if op["op"] == "test":
            if isinstance(target, list):
                found = target[key] if key < len(target) else None
            else:
                found = target.get(key)
            if found != op["value"]:
                raise PatchTestFailed(f"{op['path']}: {found!r} != {op['value']!r}")
        elif op["op"] == "add":
            if isinstance(target, list):
                target.insert(key, op["value"])
            else:
                target[key] = copy.deepcopy(op["value"])
        elif op["op"] == "remove":
            del target[key]
        else:
            raise AssertionError(f"the fake knows no JSON patch op {op['op']!r}")


def _merge(into: Json, patch: Mapping[str, Any]) -> None:
    for key, value in patch.items():
        if value is None:
            into.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = copy.deepcopy(value)


def _key(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace")
    return f"{namespace}/{meta['name']}" if namespace else str(meta["name"])


class FakeCluster:
    """The objects of one cluster; every write recorded as (method, object key, payload)."""

    def __init__(
        self,
        *,
        pods: Sequence[Json] = (),
        quotas: Sequence[Json] = (),
        leases: Sequence[Json] = (),
        nodes: Sequence[Json] = (),
        gpu_nodes: Sequence[Json] = (),
        node_leases: Sequence[Json] = (),
        pools: Sequence[Json] = (),
        budgets: Sequence[Json] = (),
    ) -> None:
        self.pods = {_key(o): copy.deepcopy(o) for o in pods}
        self.quota_objects = {_key(o): copy.deepcopy(o) for o in quotas}
        self.lease_objects = {_key(o): copy.deepcopy(o) for o in leases}
        self.node_objects = {_key(o): copy.deepcopy(o) for o in nodes}
        self.gpu_node_objects = {_key(o): copy.deepcopy(o) for o in gpu_nodes}
        self.node_lease_objects = {_key(o): copy.deepcopy(o) for o in node_leases}
        self.pool_objects = {_key(o): copy.deepcopy(o) for o in pools}
        self.budget_objects = {_key(o): copy.deepcopy(o) for o in budgets}
        self.writes: list[tuple[str, str, Any]] = []
        self.events: list[tuple[str, str, str]] = []  # (pod key, reason, message)
        self.refuse_eviction: dict[str, str] = {}  # pod key -> the 429's message
        self._failing: dict[str, int] = {}

    def fail_next(self, method: str, times: int = 1) -> None:
        self._failing[method] = self._failing.get(method, 0) + times

    def _write(self, method: str, key: str, payload: Any = None) -> None:
        if self._failing.get(method):
            self._failing[method] -= 1
            raise ApiDown(f"{method} {key}: 500 Internal Server Error")
        self.writes.append((method, key, payload))

    def written(self, method: str) -> list[tuple[str, Any]]:
        return [(key, payload) for m, key, payload in self.writes if m == method]

    # -- reads ---------------------------------------------------------------------------------
    async def tenant_pods(
        self, *, fresh: bool = False, keys: Collection[str] | None = None
    ) -> Listed[PodView]:
        return pods_listed(
            copy.deepcopy(p)
            for key, p in self.pods.items()
            if "gpupool.io/tenant" in ((p.get("metadata") or {}).get("labels") or {})
            and (keys is None or key in keys)
        )

    async def quotas(self) -> Listed[QuotaObject]:
        return quotas_listed(copy.deepcopy(q) for q in self.quota_objects.values())

    async def leases(
        self, *, fresh: bool = False, keys: Collection[str] | None = None
    ) -> Listed[LeaseRecord]:
        return leases_listed(
            copy.deepcopy(le)
            for key, le in self.lease_objects.items()
            if keys is None or key in keys
        )

    async def nodes(self) -> Listed[NodeObject]:
        return nodes_listed(copy.deepcopy(n) for n in self.node_objects.values())

    async def gpu_nodes(self, names: Collection[str] | None = None) -> Listed[GpuNodeObject]:
        return gpu_nodes_listed(
            copy.deepcopy(n)
            for key, n in self.gpu_node_objects.items()
            if names is None or key in names
        )

    async def node_renewals(self, names: Collection[str] | None = None) -> dict[str, float]:
        return lease_renewals(
            le
            for le in self.node_lease_objects.values()
            if names is None or le["metadata"]["name"] in names
        )

    async def gpu_pools(self) -> Listed[PoolObject]:
        return pools_listed(copy.deepcopy(p) for p in self.pool_objects.values())

    async def disruption_budgets(self) -> Listed[DisruptionBudget]:
        return budgets_listed(copy.deepcopy(b) for b in self.budget_objects.values())

    async def pod(self, namespace: str, name: str) -> PodView | Unreadable | None:
        found = self.pods.get(f"{namespace}/{name}")
        return pod_read(copy.deepcopy(found)) if found is not None else None

    # -- writes --------------------------------------------------------------------------------
    async def patch_pod(
        self, namespace: str, name: str, patch: list[Json] | Json, *, json_patch: bool
    ) -> bool:
        key = f"{namespace}/{name}"
        self._write("patch_pod", key, patch)
        pod = self.pods.get(key)
        if pod is None:
            return False
        changed = copy.deepcopy(pod)
        try:
            if json_patch:
                assert isinstance(patch, list)
                _json_patch(changed, patch)
            else:
                assert isinstance(patch, dict)
                _merge(changed, patch)
        except (PatchTestFailed, KeyError, IndexError):
            return False  # 422/409: changed under us
        self.pods[key] = changed
        return True

    async def admit_pod(self, pod: PodView, admitted: str) -> bool:
        # the real adapter's patch, applied as the API server would
        return await self.patch_pod(
            pod.namespace, pod.name, admit_patch(pod, admitted), json_patch=True
        )

    async def annotate_pod(
        self, pod: PodView, annotations: Mapping[str, str | None], *, same_uid: bool
    ) -> bool:
        if same_uid:
            return await self.patch_pod(
                pod.namespace, pod.name, annotate_patch(pod, annotations), json_patch=True
            )
        merge = annotate_merge(annotations)
        return await self.patch_pod(pod.namespace, pod.name, merge, json_patch=False)

    async def delete_pod(self, namespace: str, name: str, *, grace_s: int | None = None) -> bool:
        key = f"{namespace}/{name}"
        self._write("delete_pod", key, grace_s)
        return self.pods.pop(key, None) is not None

    async def evict_pod(self, namespace: str, name: str) -> str | None:
        key = f"{namespace}/{name}"
        self._write("evict_pod", key)
        if key in self.refuse_eviction:
            return self.refuse_eviction[key]
        self.pods.pop(key, None)
        return None

    async def event(
        self,
        about: ObjectReference,
        reason: str,
        message: str,
        *,
        warning: bool = False,
        now_rfc3339: str,
    ) -> None:
        self.events.append((about.key, reason, message))

    async def _patch_status(self, store: dict[str, Json], method: str, key: str, s: Json) -> bool:
        self._write(method, key, s)
        obj = store.get(key)
        if obj is None:
            return False
        _merge(obj.setdefault("status", {}), s)
        return True

    # the status writes: the real adapter's encoding, recorded as the patch it sends
    async def patch_quota_status(self, name: str, status: QuotaStatusWrite) -> bool:
        return await self._patch_status(
            self.quota_objects, "patch_quota_status", name, quota_status_json(status)
        )

    async def patch_lease_status(self, namespace: str, name: str, status: Json) -> bool:
        key = f"{namespace}/{name}"
        return await self._patch_status(self.lease_objects, "patch_lease_status", key, status)

    async def patch_lease_spec(self, namespace: str, name: str, spec: Json) -> bool:
        key = f"{namespace}/{name}"
        self._write("patch_lease_spec", key, spec)
        obj = self.lease_objects.get(key)
        if obj is None:
            return False
        _merge(obj.setdefault("spec", {}), spec)
        return True

    # the lease writes: the real adapter's encoding, recorded as the patch it sends
    async def move_lease(self, namespace: str, name: str, move: LeaseStatusWrite) -> bool:
        return await self.patch_lease_status(namespace, name, lease_status(move))

    async def mark_lease_evicted(self, namespace: str, name: str, mark: EvictionMark) -> bool:
        return await self.patch_lease_status(namespace, name, {"reclaim": eviction_mark(mark)})

    async def end_room_hold(self, namespace: str, name: str) -> bool:
        return await self.patch_lease_status(namespace, name, copy.deepcopy(ROOM_HOLD_ENDED))

    async def set_lease_expiry(
        self, namespace: str, name: str, ttl_s: float, expiry: float, renewal: str | None
    ) -> bool:
        return await self.patch_lease_spec(namespace, name, expiry_spec(ttl_s, expiry, renewal))

    async def delete_lease(self, namespace: str, name: str) -> bool:
        key = f"{namespace}/{name}"
        self._write("delete_lease", key)
        return self.lease_objects.pop(key, None) is not None

    async def create_lease(self, lease: LeaseRecord) -> bool:
        obj = lease_to_json(lease)  # what the real adapter sends
        key = _key(obj)
        self._write("create_lease", key, copy.deepcopy(obj))
        if key in self.lease_objects:
            return False  # 409 AlreadyExists
        self.lease_objects[key] = obj
        return True

    async def patch_gpu_node_status(self, name: str, status: GpuNodeHealthWrite) -> bool:
        return await self._patch_status(
            self.gpu_node_objects, "patch_gpu_node_status", name, gpu_node_health_json(status)
        )

    async def annotate_gpu_node(self, name: str, key: str, value: str | None) -> bool:
        self._write("annotate_gpu_node", name, {key: value})
        obj = self.gpu_node_objects.get(name)
        if obj is None:
            return False
        _merge(obj.setdefault("metadata", {}).setdefault("annotations", {}), {key: value})
        return True

    async def patch_gpu_pool_status(self, name: str, status: PoolStatusWrite) -> bool:
        return await self._patch_status(
            self.pool_objects, "patch_gpu_pool_status", name, pool_status_json(status)
        )


# -- objects as the API server serves them -----------------------------------------------------
GiB = 2**30


def pod_json(
    name: str,
    tenant: str,
    gib: int = 12,
    *,
    gated: bool = False,
    admitted_at: float | None = None,
    borrowed_gib: int = 0,
    node: str | None = None,
    phase: str = "Pending",
    namespace: str = "ns",
    created: float = 0.0,
    annotations: Mapping[str, str] | None = None,
) -> Json:
    """A tenant's pod asking for `gib` GiB of one card; `admitted_at`: the admission record."""
    notes: dict[str, str] = dict(annotations or {})
    if admitted_at is not None:
        notes["gpupool.io/admitted"] = (
            f'{{"at":"{format_time(admitted_at)}","borrowed":{borrowed_gib * GiB},'
            f'"preemptible":false}}'
        )
    spec: Json = {
        "containers": [
            {"name": "main", "resources": {"limits": {"gpupool.io/gpu-memory": f"{gib}Gi"}}}
        ],
        "schedulingGates": [{"name": "gpupool.io/quota"}] if gated else [],
    }
    if node is not None:
        spec["nodeName"] = node
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{name}",
            "labels": {"gpupool.io/tenant": tenant},
            "annotations": notes,
            "creationTimestamp": format_time(created),
        },
        "spec": spec,
        "status": {"phase": phase},
    }


def quota_json(name: str, nominal_gib: int, *, cohort: str | None = None, **spec: Any) -> Json:
    body: Json = {"nominal": f"{nominal_gib}Gi", **spec}
    if cohort is not None:
        body["cohort"] = cohort
    return {"metadata": {"name": name, "generation": 1}, "spec": body, "status": {}}


def lease_json(
    pod: Json,
    *,
    phase: str | None = None,
    start: float = 0.0,
    borrowed_gib: int = 0,
    gib: int = 12,
    node: str = "n1",
    end: float | None = None,
) -> Json:
    """The GpuLease bind writes for `pod` (named after its uid, in its namespace); `end`: when
    it ended (give the terminal `phase` with it)."""
    meta = pod["metadata"]
    status: Json = {"start": format_time(start)}
    if phase is not None:
        status["phase"] = phase
    if end is not None:
        status["end"] = format_time(end)
    return {
        "metadata": {"name": meta["uid"], "namespace": meta["namespace"]},
        "spec": {
            "tenant": meta["labels"]["gpupool.io/tenant"],
            "podRef": {"namespace": meta["namespace"], "name": meta["name"], "uid": meta["uid"]},
            "node": node,
            "devices": [
                {
                    "index": 0,
                    "uuid": f"GPU-{node}-0",
                    "model": "A100-80GB",
                    "offsetBytes": 0,
                    "sizeBytes": gib * GiB,
                }
            ],
            "amount": gib * GiB,
            "borrowed": borrowed_gib * GiB,
        },
        "status": status,
    }


def gpu_node_json(name: str, *, health: str = "Healthy") -> Json:
    return {"metadata": {"name": name}, "status": {"health": health}}


def node_lease_json(node: str, *, renewed: float) -> Json:
    """A node's heartbeat Lease (coordination.k8s.io/v1) as the API server serves it."""
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": node, "namespace": "gpupool-node-lease"},
        "spec": {"holderIdentity": "gpupool-agent", "leaseDurationSeconds": 90,
                 "renewTime": format_time(renewed)},
    }  # fmt: skip
