"""The webhook's reads from the API server, with lightkube: namespace labels, GpuQuotas, gang
members and the cards the GpuNodes report.

Every read is tried twice when the connection fails (`httpx2.TransportError`: a kept-alive
connection the API server closed, a connect refused while it restarts): the reads are
idempotent, and a denial the user must retry costs far more than a second request."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

import httpx2
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

T = TypeVar("T")


async def _twice(read: Callable[[], Awaitable[T]]) -> T:
    try:
        return await read()
    except httpx2.TransportError as err:
        log.info("retrying a read after a connection failure: %s", err)
        return await read()


class KubeLookups:
    def __init__(self, client: AsyncClient) -> None:
        self.client = client

    async def namespace_labels(self, namespace: str) -> Mapping[str, str]:
        ns: Any = await _twice(lambda: self.client.get(Namespace, namespace))
        return dict(ns.metadata.labels or {})

    async def quotas(self) -> list[TenantQuota]:
        return await _twice(self._quotas)

    async def gang_members(self, namespace: str, gang: str) -> list[Mapping[str, Any]]:
        return await _twice(lambda: self._gang_members(namespace, gang))

    async def cards(self) -> tuple[tuple[str, int], ...]:
        return await _twice(self._cards)

    async def _quotas(self) -> list[TenantQuota]:
        out: list[TenantQuota] = []
        async for item in self.client.list(GpuQuota):
            obj: Any = item
            try:
                out.append(read_quota(obj.to_dict()))
            except GpupoolError as err:  # an older, invalid quota: say so, judge the new one
                log.warning("ignoring unreadable GpuQuota: %s", err)
        return out

    async def _gang_members(self, namespace: str, gang: str) -> list[Mapping[str, Any]]:
        out: list[Mapping[str, Any]] = []
        async for item in self.client.list(
            Pod, namespace=namespace, labels={names.LABEL_GANG: gang}
        ):
            obj: Any = item
            out.append(obj.to_dict())
        return out

    async def _cards(self) -> tuple[tuple[str, int], ...]:
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
