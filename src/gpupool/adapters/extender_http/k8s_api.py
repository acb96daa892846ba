"""ExtenderApi over lightkube (and FastPoster for the hot writes): the API calls bind makes."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import msgspec
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.models.core_v1 import ObjectReference
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Binding, Pod

from gpupool.adapters.extender_http.service import LeaseExists
from gpupool.adapters.kubernetes import API_VERSION
from gpupool.adapters.kubernetes.fast_post import ApiStatusError, FastPoster
from gpupool.adapters.kubernetes.lease import lease_from_json, lease_to_json
from gpupool.adapters.kubernetes.resources import GpuLease, to_dict
from gpupool.state.lease import LeaseRecord


class LightkubeExtenderApi:
    """Reads through lightkube; the two writes of every bind (the GpuLease, the Binding) through
    `poster` when one is given (see fast_post.py for why), else through lightkube too."""

    def __init__(
        self,
        client: AsyncClient,
        poster: FastPoster | None = None,
        field_manager: str = "gpupool-extender",
    ) -> None:
        self.client = client
        self.poster = poster
        self._manager = f"?fieldManager={quote(field_manager)}"

    async def get_pod(self, namespace: str, name: str) -> dict[str, Any]:
        return to_dict(await self.client.get(Pod, name, namespace=namespace))

    async def leases_on_node(self, node: str) -> list[LeaseRecord]:
        # A list without resourceVersion is a consistent (quorum) read.
        items = self.client.list(GpuLease, namespace="*", fields={"spec.node": node})
        return [lease_from_json(to_dict(x)) async for x in items]

    async def get_lease(self, namespace: str, name: str) -> LeaseRecord | None:
        try:
            return lease_from_json(
                to_dict(await self.client.get(GpuLease, name, namespace=namespace))
            )
        except ApiError as err:
            if err.status.code == 404:
                return None
            raise

    async def _post(self, obj: Any, namespace: str) -> Any:
        """POST an object through lightkube and hand back the raw reply, undecoded."""
        inner: Any = self.client._client  # lightkube's GenericAsyncClient
        request = inner.prepare_request("post", obj=obj, namespace=namespace)
        request.response_type = None
        response = await inner.send(inner.build_adapter_request(request))
        inner.raise_for_status(response)
        return response

    async def create_lease(self, lease: LeaseRecord) -> LeaseRecord:
        body = lease_to_json(lease)
        if self.poster is not None:
            try:
                reply = await self.poster.post(
                    f"/apis/{API_VERSION}/namespaces/{lease.namespace}/gpuleases{self._manager}",
                    body,
                )
            except ApiStatusError as err:
                if err.code == 409:
                    raise LeaseExists(lease.key) from None
                raise
            return lease_from_json(msgspec.json.decode(reply))
        try:
            response = await self._post(GpuLease(**body), lease.namespace)
        except ApiError as err:
            if err.status.code == 409:
                raise LeaseExists(lease.key) from None
            raise
        return lease_from_json(msgspec.json.decode(response.content))

    async def delete_lease(self, namespace: str, name: str) -> None:
        try:
            await self.client.delete(GpuLease, name, namespace=namespace)
        except ApiError as err:
            if err.status.code != 404:
                raise

    async def annotate_pod(self, namespace: str, name: str, annotations: dict[str, str]) -> None:
        await self.client.patch(
            Pod, name, {"metadata": {"annotations": annotations}}, namespace=namespace
        )

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
        if self.poster is not None:
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
            return
        binding = Binding(
            metadata=ObjectMeta(name=name, namespace=namespace, uid=uid, annotations=annotations),
            target=ObjectReference(apiVersion="v1", kind="Node", name=node),
        )
        # POST .../bindings answers a Status, not a Binding: sent without decoding the reply
        # (lightkube would try to read the Status as a Binding and fail after the bind happened).
        await self._post(binding, namespace)
