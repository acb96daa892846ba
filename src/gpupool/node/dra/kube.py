"""The DRA driver's two API server surfaces (lightkube, generic resources of resource.k8s.io/v1):
reading the ResourceClaims the kubelet names, and publishing the node's ResourceSlice.

The agent's RBAC needs `get` on resourceclaims and `get, create, update, delete` on
resourceslices (not in the chart yet: the agent does not run the driver yet, docs/dra.md).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.generic_resource import create_global_resource, create_namespaced_resource
from lightkube.resources.core_v1 import Node

from gpupool.adapters.kubernetes.resources import to_dict
from gpupool.adapters.wire.names import DRA_DRIVER
from gpupool.domain.devices import Gpu
from gpupool.node.dra.errors import ClaimNotServable
from gpupool.node.dra.prepare import ClaimSourceUnavailable
from gpupool.node.dra.slices import (
    SliceSettings,
    next_generation,
    resource_slice,
    resource_slice_spec,
    slice_name,
)

log = logging.getLogger(__name__)

GROUP = "resource.k8s.io"
VERSION = "v1"
ResourceClaim: Any = create_namespaced_resource(GROUP, VERSION, "ResourceClaim", "resourceclaims")
ResourceSlice: Any = create_global_resource(GROUP, VERSION, "ResourceSlice", "resourceslices")


class KubernetesClaimSource:
    """prepare.ClaimSource over the API server."""

    def __init__(self, client: AsyncClient) -> None:
        self.client = client

    async def get_claim(self, namespace: str, name: str) -> Mapping[str, Any]:
        try:
            found = await self.client.get(ResourceClaim, name, namespace=namespace)
        except ApiError as err:
            if err.status.code == 404:
                raise ClaimNotServable(
                    f"claim {namespace}/{name} does not exist (any more); nothing to prepare"
                ) from None
            raise ClaimSourceUnavailable(
                f"cannot read claim {namespace}/{name}: {err.status.message}"
            ) from err
        except Exception as err:  # unreachable, TLS: the kubelet retries
            raise ClaimSourceUnavailable(f"cannot read claim {namespace}/{name}: {err}") from err
        return to_dict(found)


class ResourceSlicePublisher:
    """Keeps the node's one ResourceSlice equal to its cards, moving the pool's generation only
    when the devices change.

    It remembers what it last wrote: an API server without consumable capacity drops
    `allowMultipleAllocations` and the request policies, so its copy never equals what was sent,
    and comparing with it alone would move the generation at every publish.
    """

    def __init__(self, client: AsyncClient, settings: SliceSettings) -> None:
        self.client = client
        self.settings = settings
        self._sent: tuple[dict[str, Any], int] | None = None  # spec without generation, generation
        self.consumable: bool | None = None  # whether the server kept allowMultipleAllocations

    async def _published(self) -> dict[str, Any] | None:
        try:
            return to_dict(await self.client.get(ResourceSlice, slice_name(self.settings.node)))
        except ApiError as err:
            if err.status.code == 404:
                return None
            raise

    async def publish(self, gpus: Sequence[Gpu]) -> int:
        """Create or replace the slice if it differs; the pool generation now published."""
        spec = resource_slice_spec(gpus, self.settings)
        published = await self._published()
        if published is not None and self._sent is not None:
            generation = int(published["spec"]["pool"].get("generation", 0))
            if self._sent == (spec, generation):
                return generation
        generation = next_generation(published, spec)
        if published is not None and generation == published["spec"]["pool"]["generation"]:
            self._sent = (spec, generation)
            return generation
        wanted = resource_slice(gpus, self.settings, generation)
        if published is None:
            stored = await self.client.create(ResourceSlice(wanted))
        else:
            wanted["metadata"]["resourceVersion"] = published["metadata"]["resourceVersion"]
            stored = await self.client.replace(ResourceSlice(wanted))
        self._sent = (spec, generation)
        self._note_consumable(to_dict(stored))
        return generation

    def _note_consumable(self, stored: Mapping[str, Any]) -> None:
        devices = stored.get("spec", {}).get("devices") or []
        kept = all(d.get("allowMultipleAllocations") for d in devices)
        if devices and not kept and self.consumable is not False:
            log.warning(
                "the API server dropped allowMultipleAllocations from ResourceSlice %s: it runs "
                "without DRAConsumableCapacity (on by default from Kubernetes 1.36), so every "
                "claim on %s takes a whole card",
                slice_name(self.settings.node),
                DRA_DRIVER,
            )
        self.consumable = kept if devices else self.consumable

    async def withdraw(self) -> None:
        """Delete the slice (the driver stops on this node): the scheduler places nothing here."""
        try:
            await self.client.delete(ResourceSlice, slice_name(self.settings.node))
        except ApiError as err:
            if err.status.code != 404:
                raise


async def container_runtime(client: AsyncClient, node: str) -> str:
    """The node's container runtime as its kubelet reports it (`containerd://2.0.5`); "" when
    it reports none."""
    found: Any = await client.get(Node, node)
    info = (to_dict(found).get("status") or {}).get("nodeInfo") or {}
    return str(info.get("containerRuntimeVersion") or "")
