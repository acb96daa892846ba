"""The webhook's reads from the API server, with lightkube: namespace labels, GpuQuotas and the
cards the GpuNodes report."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from lightkube import AsyncClient
from lightkube.generic_resource import create_global_resource
from lightkube.resources.core_v1 import Namespace, Pod

from gpupool.adapters.kubernetes.node import gpus_from_gpunode
from gpupool.adapters.wire import names
from gpupool.adapters.wire.quotas import read_quota
from gpupool.domain.errors import GpupoolError
from gpupool.quota.spec import TenantQuota

log = logging.getLogger("gpupool.webhook")

GpuQuota = create_global_resource(names.GROUP, names.VERSION, "GpuQuota", "gpuquotas")
GpuNode = create_global_resource(names.GROUP, names.VERSION, "GpuNode", "gpunodes")


class KubeLookups:
    def __init__(self, client: AsyncClient) -> None:
        self.client = client

    async def namespace_labels(self, namespace: str) -> Mapping[str, str]:
        ns: Any = await self.client.get(Namespace, namespace)
        return dict(ns.metadata.labels or {})

    async def quotas(self) -> list[TenantQuota]:
        out: list[TenantQuota] = []
        async for item in self.client.list(GpuQuota):
            obj: Any = item
            try:
                out.append(read_quota(obj.to_dict()))
            except GpupoolError as err:  # an older, invalid quota: say so, judge the new one
                log.warning("ignoring unreadable GpuQuota: %s", err)
        return out

    async def gang_members(self, namespace: str, gang: str) -> list[Mapping[str, Any]]:
        out: list[Mapping[str, Any]] = []
        async for item in self.client.list(
            Pod, namespace=namespace, labels={names.LABEL_GANG: gang}
        ):
            obj: Any = item
            out.append(obj.to_dict())
        return out

    async def cards(self) -> tuple[tuple[str, int], ...]:
        out: list[tuple[str, int]] = []
        async for item in self.client.list(GpuNode):
            obj: Any = item
            try:
                gpus = gpus_from_gpunode(obj.to_dict())
            except GpupoolError as err:  # the extender says the same; judge by the others
                log.warning("ignoring unreadable GpuNode: %s", err)
                continue
            out.extend((g.model, g.memory_bytes) for g in gpus if g.memory_bytes is not None)
        return tuple(out)
