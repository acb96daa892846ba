"""`ports.ClusterApi` on the API server: what gpupool's controllers read and write (lightkube,
generic resources for the CRDs). Objects cross this boundary as plain JSON dicts; the
reconcilers decode them once with the adapters' readers and hand typed values to the plans.

With `may_write` (the controller's leader election), every write asks it first and raises
NotLeader instead of writing when it says no: a round that outlives its replica's term stops at
its next write, before it can act beside the new leader's. Reads always pass.

With `cache` (the process's `WatchCache`), the reads of the kinds it keeps come from it: a round
costs no LIST; a kind it does not keep is listed from the API server."""

from __future__ import annotations

import logging
import secrets
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, cast

from lightkube import AsyncClient, codecs
from lightkube.core.exceptions import ApiError
from lightkube.generic_resource import create_global_resource, create_namespaced_resource
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.apps_v1 import Deployment, StatefulSet
from lightkube.resources.core_v1 import Pod
from lightkube.types import PatchType

from gpupool.adapters.kubernetes.leader import NotLeader
from gpupool.adapters.kubernetes.node import lease_renewals
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

    async def _read(self, watched: Watched, *, fresh: bool = False) -> list[Json]:
        """`watched`'s objects: the watch cache's when this process keeps that kind (unless
        `fresh`), else one LIST."""
        if not fresh and self.cache is not None and watched.kind in self.cache.stores:
            return cast(list[Json], await self.cache.values(watched.kind))
        return [_dict(o) async for o in self.client.list(watched.resource, **watched.scope())]

    def _writing(self, what: str) -> None:
        if self.may_write is not None and not self.may_write():
            raise NotLeader(f"{what} refused: this {COMPONENT} replica is not leader")

    # -- reading -------------------------------------------------------------------------------
    async def tenant_pods(self, *, fresh: bool = False) -> list[Json]:
        """Every pod the webhook stamped with a tenant, in all namespaces."""
        return await self._read(TENANT_PODS, fresh=fresh)

    async def quotas(self) -> list[Json]:
        return await self._read(GPUQUOTAS)

    async def leases(self, *, fresh: bool = False) -> list[Json]:
        return await self._read(GPULEASES, fresh=fresh)

    async def nodes(self) -> list[Json]:
        return await self._read(NODES)

    async def gpu_nodes(self) -> list[Json]:
        return await self._read(GPUNODES)

    async def gpu_pools(self) -> list[Json]:
        return await self._read(GPUPOOLS)

    async def disruption_budgets(self) -> list[Json]:
        return await self._read(PDBS)

    async def pod(self, namespace: str, name: str) -> Json | None:
        try:
            return _dict(await self.client.get(Pod, name, namespace=namespace))
        except ApiError as err:
            if err.status.code == 404:
                return None
            raise

    async def node_renewals(self) -> dict[str, float]:
        """The GPU nodes' heartbeat Leases (`node_lease`), decoded here: from the watch cache when
        it keeps them (a renewal wakes no loop: none waits on that kind), else listed."""
        return lease_renewals(await self._read(NODE_LEASES))

    # -- writing -------------------------------------------------------------------------------
    async def patch_pod(
        self, namespace: str, name: str, patch: list[Json] | Json, *, json_patch: bool
    ) -> bool:
        """Apply a JSON patch (list) or merge patch (dict); False if the pod is gone/changed."""
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
        pod: Mapping[str, Any],
        reason: str,
        message: str,
        *,
        warning: bool = False,
        now_rfc3339: str,
    ) -> None:
        meta = pod.get("metadata") or {}
        namespace = str(meta.get("namespace") or "default")
        kind = str(pod.get("kind") or "Pod")  # a GpuPool's events name it (cluster-scoped)
        self._writing(f"event {reason} on {kind.lower()} {namespace}/{meta.get('name')}")
        event: Any = codecs.from_dict(
            {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"generateName": f"{meta.get('name', 'pod')}.", "namespace": namespace},
                "involvedObject": {
                    "apiVersion": str(pod.get("apiVersion") or "v1"),
                    "kind": kind,
                    "name": meta.get("name"),
                    # a cluster-scoped object (a GpuPool) has none
                    "namespace": namespace if kind == "Pod" or meta.get("namespace") else None,
                    "uid": meta.get("uid"),
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
            log.warning("could not record event %s on %s: %s", reason, meta.get("name"), err)

    async def patch_quota_status(self, name: str, status: Json) -> bool:
        self._writing(f"status of GpuQuota {name}")
        return await _landed(
            self.client.patch(GpuQuota.Status, name, {"status": status}, patch_type=PatchType.MERGE)
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

    async def delete_lease(self, namespace: str, name: str) -> bool:
        self._writing(f"deletion of GpuLease {namespace}/{name}")
        return await _landed(self.client.delete(GpuLease, name, namespace=namespace))

    async def create_lease(self, lease: Json) -> bool:
        meta = lease.get("metadata") or {}
        namespace, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
        self._writing(f"creation of GpuLease {namespace}/{name}")
        # the namespace is in its metadata; 409: it exists already
        return await _landed(self.client.create(GpuLease(**lease)), absent=409)

    async def patch_gpu_node_status(self, name: str, status: Json) -> bool:
        self._writing(f"status of GpuNode {name}")
        return await _landed(
            self.client.patch(GpuNode.Status, name, {"status": status}, patch_type=PatchType.MERGE)
        )

    # -- the autoscaler's workloads (ports.WorkloadApi) ----------------------------------------
    async def workloads(self) -> list[tuple[str, Json]]:
        out: list[tuple[str, Json]] = []
        for kind, watched in (("Deployment", DEPLOYMENTS), ("StatefulSet", STATEFULSETS)):
            out += [(kind, o) for o in await self._read(watched)]
        return out

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
        kind: str,
        obj: Mapping[str, Any],
        reason: str,
        message: str,
        *,
        warning: bool = False,
        now_rfc3339: str,
    ) -> None:
        # the one event writer; a workload's JSON may lack its kind and apiVersion
        as_object = {**obj, "kind": kind, "apiVersion": obj.get("apiVersion") or "apps/v1"}
        await self.event(as_object, reason, message, warning=warning, now_rfc3339=now_rfc3339)

    async def annotate_gpu_node(self, name: str, key: str, value: str | None) -> bool:
        self._writing(f"annotation {key} of GpuNode {name}")
        patch = {"metadata": {"annotations": {key: value}}}
        return await _landed(self.client.patch(GpuNode, name, patch, patch_type=PatchType.MERGE))

    async def patch_gpu_pool_status(self, name: str, status: Json) -> bool:
        self._writing(f"status of GpuPool {name}")
        return await _landed(
            self.client.patch(GpuPool.Status, name, {"status": status}, patch_type=PatchType.MERGE)
        )

    # -- the claim allocator's claims (ports.ClaimApi) -----------------------------------------
    async def resource_claim(self, namespace: str, name: str) -> Json | None:
        try:
            return _dict(await self.client.get(ResourceClaim, name, namespace=namespace))
        except ApiError as err:
            if err.status.code == 404:
                return None
            raise

    async def patch_claim_status(self, namespace: str, name: str, uid: str, status: Json) -> bool:
        self._writing(f"status of ResourceClaim {namespace}/{name}")
        # the uid precondition: a claim deleted and made again under the same name is not ours
        body = {"metadata": {"uid": uid}, "status": status}
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

    async def leases_on_node(self, node: str) -> list[Json]:
        # no resourceVersion: a consistent (quorum) read; spec.node is a selectable field
        return [_dict(x) async for x in self.client.list(GpuLease, namespace="*",
                                                          fields={"spec.node": node})]  # fmt: skip

    async def resource_slices(self) -> list[Json]:
        return [_dict(s) async for s in self.client.list(ResourceSlice)]
