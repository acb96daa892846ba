"""ExtenderApi over lightkube: the handful of API calls bind makes."""

from __future__ import annotations

from typing import Any

import msgspec
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.models.core_v1 import ObjectReference
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Binding, Pod

from gpupool.adapters.extender_http.service import LeaseExists
from gpupool.adapters.kubernetes.lease import LeaseRecord, lease_from_json, lease_to_json
from gpupool.adapters.kubernetes.resources import GpuLease, to_dict


class LightkubeExtenderApi:
    def __init__(self, client: AsyncClient) -> None:
        self.client = client

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
        """POST an object and hand back the raw reply (lightkube's model decoding, at a few
        hundred binds a second, cost the extender's one event loop more than the reply is
        worth). Errors are lightkube's ApiError."""
        inner: Any = self.client._client  # lightkube's GenericAsyncClient
        request = inner.prepare_request("post", obj=obj, namespace=namespace)
        request.response_type = None
        response = await inner.send(inner.build_adapter_request(request))
        inner.raise_for_status(response)
        return response

    async def create_lease(self, lease: LeaseRecord) -> LeaseRecord:
        body = GpuLease(**lease_to_json(lease))
        try:
            response = await self._post(body, lease.namespace)
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
        binding = Binding(
            metadata=ObjectMeta(name=name, namespace=namespace, uid=uid, annotations=annotations),
            target=ObjectReference(apiVersion="v1", kind="Node", name=node),
        )
        # POST .../bindings answers a Status, not a Binding: sent without decoding the reply
        # (lightkube would try to read the Status as a Binding and fail after the bind happened).
        await self._post(binding, namespace)
