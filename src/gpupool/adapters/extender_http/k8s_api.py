"""ExtenderApi over lightkube for the reads and deletes, and the bind writer (`fast_post`) for
the two writes of every bind (the GpuLease, the Binding): one write path whichever writer the
credentials allow. lightkube's errors become the adapter's typed `ApiServerError` kinds here."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Awaitable
from typing import Any, TypeVar
from urllib.parse import quote

import msgspec
from lightkube import AsyncClient, codecs, operators
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Pod

from gpupool.adapters.extender_http.scheduled_pod import ScheduledPod
from gpupool.adapters.kubernetes.decoded import read_pod
from gpupool.adapters.kubernetes.errors import ApiServerError, NotFound, api_error
from gpupool.adapters.kubernetes.fast_post import Poster
from gpupool.adapters.kubernetes.lease import lease_from_json, lease_to_json
from gpupool.adapters.kubernetes.resources import GpuLease, to_dict
from gpupool.adapters.wire.names import API_VERSION, GROUP, LABEL_GANG, LABEL_TENANT
from gpupool.rfc3339 import format_time
from gpupool.state.lease import LeaseRecord
from gpupool.state.pod_hold import held_by

T = TypeVar("T")


def _typed_error(err: ApiError) -> ApiServerError:
    return api_error(int(err.status.code or 0), str(err.status.message or ""))


async def _typed(call: Awaitable[T]) -> T:
    """`call`, with lightkube's ApiError raised as the typed ApiServerError of its status."""
    try:
        return await call
    except ApiError as err:
        raise _typed_error(err) from None


class LightkubeExtenderApi:
    def __init__(
        self, client: AsyncClient, poster: Poster, field_manager: str = "gpupool-extender"
    ) -> None:
        self.client = client
        self.poster = poster
        self._manager = f"?fieldManager={quote(field_manager)}"

    async def get_pod(self, namespace: str, name: str) -> ScheduledPod:
        pod = await _typed(self.client.get(Pod, name, namespace=namespace))
        return ScheduledPod.from_json(to_dict(pod))

    async def leases_on_node(self, node: str) -> list[LeaseRecord]:
        # A list without resourceVersion is a consistent (quorum) read.
        items = self.client.list(GpuLease, namespace="*", fields={"spec.node": node})
        try:
            return [lease_from_json(to_dict(x)) async for x in items]
        except ApiError as err:
            raise _typed_error(err) from None

    async def held_by_bound_pods(self) -> list[LeaseRecord]:
        # A list without resourceVersion is a consistent (quorum) read, as the leases' list;
        # the pods the informer's sync lists (GPU pods carry their tenant's label).
        items = self.client.list(
            Pod,
            namespace="*",
            labels={LABEL_TENANT: operators.exists()},
            fields={"spec.nodeName": operators.not_equal("")},
        )
        try:
            pods = [read_pod(to_dict(x)) async for x in items]
        except ApiError as err:
            raise _typed_error(err) from None
        return [h for h in map(held_by, pods) if h is not None]

    async def get_lease(self, namespace: str, name: str) -> LeaseRecord | None:
        try:
            lease = await _typed(self.client.get(GpuLease, name, namespace=namespace))
        except NotFound:
            return None
        return lease_from_json(to_dict(lease))

    async def create_lease(self, lease: LeaseRecord) -> LeaseRecord:
        """The API server's copy of the lease; `Conflict` when one of that name exists."""
        path = f"/apis/{API_VERSION}/namespaces/{lease.namespace}/gpuleases{self._manager}"
        reply = await self.poster.post(path, lease_to_json(lease))
        return lease_from_json(msgspec.json.decode(reply))

    async def delete_lease(self, namespace: str, name: str) -> None:
        with contextlib.suppress(NotFound):  # gone already: what delete wanted
            await _typed(self.client.delete(GpuLease, name, namespace=namespace))

    async def annotate_pod(self, namespace: str, name: str, annotations: dict[str, str]) -> None:
        patch = {"metadata": {"annotations": annotations}}
        await _typed(self.client.patch(Pod, name, patch, namespace=namespace))

    async def gang_pods(self, namespace: str, gang: str) -> list[ScheduledPod]:
        items = self.client.list(Pod, namespace=namespace, labels={LABEL_GANG: gang})
        try:
            return [ScheduledPod.from_json(to_dict(x)) async for x in items]
        except ApiError as err:
            raise _typed_error(err) from None

    async def pod_event(self, pod: ScheduledPod, reason: str, message: str) -> None:
        stamp = format_time(time.time())
        event: Any = codecs.from_dict(
            {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"generateName": f"{pod.name}.", "namespace": pod.namespace},
                "involvedObject": {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": pod.name,
                    "namespace": pod.namespace,
                    "uid": pod.uid,
                },
                "reason": reason,
                "message": message[:1024],
                "type": "Warning",
                "source": {"component": "gpupool-extender"},
                "reportingComponent": f"{GROUP}/extender",
                "reportingInstance": "gpupool-extender",
                "firstTimestamp": stamp,
                "lastTimestamp": stamp,
                "count": 1,
            }
        )
        await _typed(self.client.create(event))

    async def bind_pod(
        self,
        namespace: str,
        name: str,
        uid: str,
        node: str,
        annotations: dict[str, str] | None = None,
    ) -> None:
        # The API server copies a Binding's annotations onto the pod in the same write that sets
        # its nodeName: the allocation and the placement land together or not at all.
        meta: dict[str, Any] = {"name": name, "namespace": namespace, "uid": uid}
        if annotations:
            meta["annotations"] = annotations
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": meta,
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        await self.poster.post(
            f"/api/v1/namespaces/{namespace}/pods/{name}/binding{self._manager}", body
        )
