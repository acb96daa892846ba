"""`ports.ClusterApi` on the API server: what gpupool's controllers read and write (lightkube,
generic resources for the CRDs). Reads cross this boundary decoded (`state.listed.Listed`: each
object decoded here, once, with the memoised readers of `adapters.kubernetes.decoded`; one that
does not decode is handed as `Unreadable` for the loop's containment to set aside); Events take
an `ObjectReference`, a new GpuLease its `LeaseRecord`. Writes take values encoded here (pod
intents: `pod_patches`; GpuLease: `lease_writes`; the statuses of GpuQuota, GpuNode and GpuPool:
`status_writes`; a ResourceClaim's allocation: `claim_writes`); the autoscaler's workloads
are read decoded too (`decoded.workloads_listed`).

With `may_write` (the controller's leader election), every write asks it first and raises
NotLeader instead of writing when it says no: a round that outlives its replica's term stops at
its next write, before it can act beside the new leader's. Reads always pass.

With `cache` (the process's `WatchCache`), the reads of the kinds it keeps come from it: a round
costs no LIST; a kind it does not keep is listed from the API server."""

from __future__ import annotations

import logging
import secrets
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping
from typing import Any, TypeVar, cast

from lightkube import AsyncClient, codecs
from lightkube.core.exceptions import ApiError
from lightkube.generic_resource import create_global_resource, create_namespaced_resource
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.apps_v1 import Deployment, StatefulSet
from lightkube.resources.core_v1 import Pod
from lightkube.types import PatchType

from gpupool.adapters.kubernetes.claim_writes import allocation_status
from gpupool.adapters.kubernetes.decoded import (
    budgets_listed,
    gpu_nodes_listed,
    leases_listed,
    nodes_listed,
    pod_read,
    pods_listed,
    pools_listed,
    quotas_listed,
    workloads_listed,
)
from gpupool.adapters.kubernetes.decoded_kind import DecodedKind
from gpupool.adapters.kubernetes.dra_objects import publishing_nodes, read_claim
from gpupool.adapters.kubernetes.leader import NotLeader
from gpupool.adapters.kubernetes.lease import lease_to_json
from gpupool.adapters.kubernetes.lease_writes import (
    ROOM_HOLD_ENDED,
    eviction_mark,
    expiry_spec,
    lease_status,
)
from gpupool.adapters.kubernetes.node import lease_renewals
from gpupool.adapters.kubernetes.node_lease import NODE_LEASE_NAMESPACE
from gpupool.adapters.kubernetes.pod_patches import admit_patch, annotate_merge, annotate_patch
from gpupool.adapters.kubernetes.status_writes import (
    gpu_node_health_json,
    pool_status_json,
    quota_status_json,
)
from gpupool.adapters.kubernetes.watch_cache import (
    DEPLOYMENTS,
    GPULEASES,
    GPUNODES,
    GPUPOOLS,
    GPUQUOTAS,
    NODE_LEASES,
    NODES,
    PDBS,
    STATEFULSETS,
    TENANT_PODS,
    WatchCache,
    Watched,
)
from gpupool.adapters.wire import names
from gpupool.ports import Json
from gpupool.state.claim_ask import ClaimObject
from gpupool.state.claim_writes import ClaimAllocationWrite
from gpupool.state.defrag import DisruptionBudget
from gpupool.state.lease import LeaseRecord
from gpupool.state.lease_writes import EvictionMark, LeaseStatusWrite
from gpupool.state.listed import Listed, ObjectReference, Unreadable
from gpupool.state.nodes import GpuNodeObject, NodeObject
from gpupool.state.objects import key_of
from gpupool.state.pods import PodView
from gpupool.state.pool import PoolObject
from gpupool.state.quota_object import QuotaObject
from gpupool.state.status_writes import GpuNodeHealthWrite, PoolStatusWrite, QuotaStatusWrite
from gpupool.state.workload import ScalableWorkload

T = TypeVar("T")

log = logging.getLogger("gpupool.controller")

GpuQuota = create_global_resource(names.GROUP, names.VERSION, "GpuQuota", "gpuquotas")
GpuNode = create_global_resource(names.GROUP, names.VERSION, "GpuNode", "gpunodes")
GpuLease = create_namespaced_resource(names.GROUP, names.VERSION, "GpuLease", "gpuleases")
GpuPool = create_global_resource(names.GROUP, names.VERSION, "GpuPool", "gpupools")
ResourceClaim = create_namespaced_resource(
    "resource.k8s.io", "v1", "ResourceClaim", "resourceclaims"
)
ResourceSlice = create_global_resource("resource.k8s.io", "v1", "ResourceSlice", "resourceslices")

COMPONENT = "gpupool-controller"
WORKLOAD_KINDS: dict[str, Any] = {"Deployment": Deployment, "StatefulSet": StatefulSet}


def _dict(obj: Any) -> Json:
    data: Json = obj.to_dict()
    return data


async def _landed(write: Awaitable[object], *, absent: int = 404) -> bool:
    """True when the write landed; False when the API server answers `absent` (404: the object
    is gone; 409 for a create: it exists already). Any other error is the caller's to see."""
    try:
        await write
    except ApiError as err:
        if err.status.code == absent:
            return False
        raise
    return True


def gone(err: ApiError) -> bool:
    """The object is gone or changed under us (404 Not Found, 409 Conflict, 422 failed test)."""
    return err.status.code in (404, 409, 422)


class KubeClusterApi:
    def __init__(
        self,
        client: AsyncClient,
        *,
        instance: str = "",
        may_write: Callable[[], bool] | None = None,
        cache: WatchCache | None = None,
    ) -> None:
        self.client = client
        self.instance = instance or f"{COMPONENT}-{secrets.token_hex(3)}"
        self.may_write = may_write
        self.cache = cache
        # kind -> its objects decoded, brought up to date from the store's changes (`_decoded_of`)
        self._decoded: dict[str, DecodedKind[Any]] = {}

    async def _decoded_of(
        self,
        watched: Watched,
        decode: Callable[[Iterable[Json]], Listed[T]],
        *,
        fresh: bool = False,
        keys: Collection[str] | None = None,
    ) -> Listed[T]:
        """`watched`'s objects decoded. A whole kind read from the watch cache is brought up to
        date with only the objects its store changed since the last read (`DecodedKind`): at
        5,000 nodes every admission, lease and metrics round reads every Node and GpuNode, and at
        7,500 pods a pass over every pod's version was a third of an admission round."""
        if self.cache is None or watched.kind not in self.cache.stores or fresh or keys is not None:
            return decode(await self._read(watched, fresh=fresh, keys=keys))
        store = await self.cache.synced_store(watched.kind)
        kept = self._decoded.get(watched.kind)
        if kept is None:
            kept = self._decoded[watched.kind] = DecodedKind(decode)
        return cast(Listed[T], kept.listed(store))

    async def _read(
        self, watched: Watched, *, fresh: bool = False, keys: Collection[str] | None = None
    ) -> list[Json]:
        """`watched`'s objects: the watch cache's when this process keeps that kind (unless
        `fresh`), else one LIST; `keys` (namespace/name, or name): only those, looked up one by
        one in the cache."""
        if not fresh and self.cache is not None and watched.kind in self.cache.stores:
            if keys is None:
                return cast(list[Json], await self.cache.values(watched.kind))
            found = [await self.cache.get(watched.kind, key) for key in keys]
            return [cast(Json, obj) for obj in found if obj is not None]
        listed = [_dict(o) async for o in self.client.list(watched.resource, **watched.scope())]
        if keys is None:
            return listed
        wanted = set(keys)
        return [o for o in listed if key_of(o) in wanted]

    def _writing(self, what: str) -> None:
        if self.may_write is not None and not self.may_write():
            raise NotLeader(f"{what} refused: this {COMPONENT} replica is not leader")

    # -- reading -------------------------------------------------------------------------------
    async def tenant_pods(
        self, *, fresh: bool = False, keys: Collection[str] | None = None
    ) -> Listed[PodView]:
        """Every pod the webhook stamped with a tenant, in all namespaces (`keys`: these)."""
        return await self._decoded_of(TENANT_PODS, pods_listed, fresh=fresh, keys=keys)

    async def quotas(self) -> Listed[QuotaObject]:
        return await self._decoded_of(GPUQUOTAS, quotas_listed)

    async def leases(
        self, *, fresh: bool = False, keys: Collection[str] | None = None
    ) -> Listed[LeaseRecord]:
        return await self._decoded_of(GPULEASES, leases_listed, fresh=fresh, keys=keys)

    async def nodes(self) -> Listed[NodeObject]:
        return await self._decoded_of(NODES, nodes_listed)

    async def gpu_nodes(self, names: Collection[str] | None = None) -> Listed[GpuNodeObject]:
        return await self._decoded_of(GPUNODES, gpu_nodes_listed, keys=names)

    async def gpu_pools(self) -> Listed[PoolObject]:
        return await self._decoded_of(GPUPOOLS, pools_listed)

    async def disruption_budgets(self) -> Listed[DisruptionBudget]:
        return await self._decoded_of(PDBS, budgets_listed)

    async def pod(self, namespace: str, name: str) -> PodView | Unreadable | None:
        try:
            return pod_read(_dict(await self.client.get(Pod, name, namespace=namespace)))
        except ApiError as err:
            if err.status.code == 404:
                return None
            raise

    async def node_renewals(self, names: Collection[str] | None = None) -> dict[str, float]:
        """The GPU nodes' heartbeat Leases (`node_lease`), decoded here: from the watch cache
        when it keeps them (a renewal wakes no loop: none waits on that kind), else listed."""
        keys = None if names is None else [f"{NODE_LEASE_NAMESPACE}/{n}" for n in names]
        return lease_renewals(await self._read(NODE_LEASES, keys=keys))

    # -- writing -------------------------------------------------------------------------------
    async def patch_pod(
        self, namespace: str, name: str, patch: list[Json] | Json, *, json_patch: bool
    ) -> bool:
        """Apply a JSON patch (list) or merge patch (dict); False if the pod is gone/changed
        (the pod intents' one writer)."""
        self._writing(f"patch of pod {namespace}/{name}")
        try:
            await self.client.patch(
                Pod,
                name,
                patch,
                namespace=namespace,
                patch_type=PatchType.JSON if json_patch else PatchType.MERGE,
            )
        except ApiError as err:
            if gone(err):
                log.info("pod %s/%s changed or went away: %s", namespace, name, err)
                return False
            raise
        return True

    async def admit_pod(self, pod: PodView, admitted: str) -> bool:
        return await self.patch_pod(
            pod.namespace, pod.name, admit_patch(pod, admitted), json_patch=True
        )

    async def annotate_pod(
        self, pod: PodView, annotations: Mapping[str, str | None], *, same_uid: bool
    ) -> bool:
        if same_uid:
            patch: list[Json] | Json = annotate_patch(pod, annotations)
        else:
            patch = annotate_merge(annotations)
        return await self.patch_pod(pod.namespace, pod.name, patch, json_patch=same_uid)

    async def delete_pod(self, namespace: str, name: str, *, grace_s: int | None = None) -> bool:
        self._writing(f"deletion of pod {namespace}/{name}")
        return await _landed(
            self.client.delete(Pod, name, namespace=namespace, grace_period=grace_s)
        )

    async def evict_pod(self, namespace: str, name: str) -> str | None:
        """Evict through the Eviction API (PodDisruptionBudgets apply); None when done or gone,
        else why not (a budget forbids it now: 429)."""
        self._writing(f"eviction of pod {namespace}/{name}")
        eviction = Pod.Eviction(metadata=ObjectMeta(name=name, namespace=namespace))
        try:
            await self.client.create(eviction, name=name, namespace=namespace)
        except ApiError as err:
            if err.status.code == 404:
                return None
            if err.status.code == 429:
                return err.status.message or "a PodDisruptionBudget forbids the eviction now"
            raise
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
        kind = about.kind
        namespace = about.namespace or "default"  # a cluster-scoped object's events: default
        self._writing(f"event {reason} on {kind.lower()} {namespace}/{about.name}")
        event: Any = codecs.from_dict(
            {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"generateName": f"{about.name or 'pod'}.", "namespace": namespace},
                "involvedObject": {
                    "apiVersion": about.api_version,
                    "kind": kind,
                    "name": about.name or None,
                    # a cluster-scoped object (a GpuPool) has none
                    "namespace": namespace if kind == "Pod" or about.namespace else None,
                    "uid": about.uid,
                },
                "reason": reason,
                "message": message[:1024],
                "type": "Warning" if warning else "Normal",
                "source": {"component": COMPONENT},
                "reportingComponent": f"{names.GROUP}/controller",
                "reportingInstance": self.instance,
                "firstTimestamp": now_rfc3339,
                "lastTimestamp": now_rfc3339,
                "count": 1,
            }
        )
        try:
            await self.client.create(event)
        except ApiError as err:  # an event is best effort: never fail a reconcile for one
            log.warning("could not record event %s on %s: %s", reason, about.name, err)

    async def patch_quota_status(self, name: str, status: QuotaStatusWrite) -> bool:
        self._writing(f"status of GpuQuota {name}")
        patch = {"status": quota_status_json(status)}
        return await _landed(
            self.client.patch(GpuQuota.Status, name, patch, patch_type=PatchType.MERGE)
        )

    async def patch_lease_status(self, namespace: str, name: str, status: Json) -> bool:
        self._writing(f"status of GpuLease {namespace}/{name}")
        try:
            await self.client.patch(
                GpuLease.Status,
                name,
                {"status": status},
                namespace=namespace,
                patch_type=PatchType.MERGE,
            )
        except ApiError as err:
            if gone(err):
                return False
            raise
        return True

    async def patch_lease_spec(self, namespace: str, name: str, spec: Json) -> bool:
        self._writing(f"spec of GpuLease {namespace}/{name}")
        try:
            await self.client.patch(
                GpuLease, name, {"spec": spec}, namespace=namespace, patch_type=PatchType.MERGE
            )
        except ApiError as err:
            if gone(err):
                return False
            raise
        return True

    async def move_lease(self, namespace: str, name: str, move: LeaseStatusWrite) -> bool:
        return await self.patch_lease_status(namespace, name, lease_status(move))

    async def mark_lease_evicted(self, namespace: str, name: str, mark: EvictionMark) -> bool:
        return await self.patch_lease_status(namespace, name, {"reclaim": eviction_mark(mark)})

    async def end_room_hold(self, namespace: str, name: str) -> bool:
        return await self.patch_lease_status(namespace, name, ROOM_HOLD_ENDED)

    async def set_lease_expiry(
        self, namespace: str, name: str, ttl_s: float, expiry: float, renewal: str | None
    ) -> bool:
        return await self.patch_lease_spec(namespace, name, expiry_spec(ttl_s, expiry, renewal))

    async def delete_lease(self, namespace: str, name: str) -> bool:
        self._writing(f"deletion of GpuLease {namespace}/{name}")
        return await _landed(self.client.delete(GpuLease, name, namespace=namespace))

    async def create_lease(self, lease: LeaseRecord) -> bool:
        self._writing(f"creation of GpuLease {lease.key}")
        # the namespace is in its metadata; 409: it exists already
        return await _landed(self.client.create(GpuLease(**lease_to_json(lease))), absent=409)

    async def patch_gpu_node_status(self, name: str, status: GpuNodeHealthWrite) -> bool:
        self._writing(f"status of GpuNode {name}")
        patch = {"status": gpu_node_health_json(status)}
        return await _landed(
            self.client.patch(GpuNode.Status, name, patch, patch_type=PatchType.MERGE)
        )

    # -- the autoscaler's workloads (ports.WorkloadApi) ----------------------------------------
    async def workloads(self) -> Listed[ScalableWorkload]:
        deployments = workloads_listed("Deployment", await self._read(DEPLOYMENTS))
        stateful_sets = workloads_listed("StatefulSet", await self._read(STATEFULSETS))
        return Listed(
            deployments.read + stateful_sets.read,
            deployments.unreadable + stateful_sets.unreadable,
        )

    async def scale(self, kind: str, namespace: str, name: str, replicas: int) -> bool:
        """Through the scale subresource (as HorizontalPodAutoscaler does)."""
        self._writing(f"scale of {kind} {namespace}/{name}")
        return await _landed(
            self.client.patch(
                WORKLOAD_KINDS[kind].Scale,
                name,
                {"spec": {"replicas": replicas}},
                namespace=namespace,
                patch_type=PatchType.MERGE,
            )
        )

    async def annotate(self, kind: str, namespace: str, name: str, key: str, value: str) -> bool:
        self._writing(f"annotation {key} of {kind} {namespace}/{name}")
        return await _landed(
            self.client.patch(
                WORKLOAD_KINDS[kind],
                name,
                {"metadata": {"annotations": {key: value}}},
                namespace=namespace,
                patch_type=PatchType.MERGE,
            )
        )

    async def workload_event(
        self,
        about: ObjectReference,
        reason: str,
        message: str,
        *,
        warning: bool = False,
        now_rfc3339: str,
    ) -> None:
        await self.event(about, reason, message, warning=warning, now_rfc3339=now_rfc3339)

    async def annotate_gpu_node(self, name: str, key: str, value: str | None) -> bool:
        self._writing(f"annotation {key} of GpuNode {name}")
        patch = {"metadata": {"annotations": {key: value}}}
        return await _landed(self.client.patch(GpuNode, name, patch, patch_type=PatchType.MERGE))

    async def patch_gpu_pool_status(self, name: str, status: PoolStatusWrite) -> bool:
        self._writing(f"status of GpuPool {name}")
        patch = {"status": pool_status_json(status)}
        return await _landed(
            self.client.patch(GpuPool.Status, name, patch, patch_type=PatchType.MERGE)
        )

    # -- the claim allocator's claims (ports.ClaimApi) -----------------------------------------
    async def resource_claim(self, namespace: str, name: str) -> ClaimObject | None:
        try:
            return read_claim(
                _dict(await self.client.get(ResourceClaim, name, namespace=namespace))
            )
        except ApiError as err:
            if err.status.code == 404:
                return None
            raise

    async def patch_claim_status(self, allocation: ClaimAllocationWrite) -> bool:
        target = allocation.target
        namespace, name = target.namespace, target.name
        self._writing(f"status of ResourceClaim {namespace}/{name}")
        # the uid precondition: a claim deleted and made again under the same name is not ours
        body = {"metadata": {"uid": target.uid}, "status": allocation_status(allocation)}
        try:
            await self.client.patch(
                ResourceClaim.Status, name, body, namespace=namespace, patch_type=PatchType.MERGE
            )
        except ApiError as err:
            if err.status.code == 422:  # refused as invalid: say why, it is not "gone"
                log.warning("ResourceClaim %s/%s: allocation refused: %s", namespace, name,
                            err.status.message)  # fmt: skip
            if gone(err):
                return False
            raise
        return True

    async def leases_on_node(self, node: str) -> Listed[LeaseRecord]:
        # no resourceVersion: a consistent (quorum) read; spec.node is a selectable field
        return leases_listed([_dict(x) async for x in self.client.list(
            GpuLease, namespace="*", fields={"spec.node": node})])  # fmt: skip

    async def publishing_nodes(self) -> frozenset[str]:
        return publishing_nodes([_dict(s) async for s in self.client.list(ResourceSlice)])
