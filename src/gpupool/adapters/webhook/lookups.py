"""The webhook's reads from the API server, with lightkube: namespace labels, GpuQuotas (all of
them, or one tenant's lease TTL), gang members and the cards the GpuNodes report.

GpuNodes and GpuQuotas, read for nearly every pod, come from the process's watch cache once it
has listed them (`cache`): a burst of pods costs no LIST of every GpuNode per pod, and the cards
are decoded again only when a GpuNode changed (the store's generation). Before the first list is
in, and without a cache, they are read from the API server as before.

Every read is tried up to three times when it fails in a way that passes: the connection
(`httpx2.TransportError`: a kept-alive connection the API server closed, a connect refused while
it restarts) or an answer the API server means as "later" (429 while a watch cache initialises,
504 "Too large resource version" while it catches up with etcd, 500/503), after the Retry-After
it gives (at most `MAX_WAIT_S`), as client-go does. The reads are idempotent, and a denial the
user must retry costs far more than a second request; the waits stay well inside the API
server's 10 s timeout for the webhook."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

import httpx2
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.generic_resource import create_global_resource, create_namespaced_resource
from lightkube.resources.core_v1 import Namespace, Pod

from gpupool.adapters.kubernetes.node import gpus_from_gpunode
from gpupool.adapters.kubernetes.resources import to_dict
from gpupool.adapters.kubernetes.watch_cache import GPUNODES, GPUQUOTAS, WatchCache
from gpupool.adapters.webhook.cards import Card
from gpupool.adapters.webhook.claims import TEMPLATE
from gpupool.adapters.wire import names
from gpupool.adapters.wire.lease_terms import read_tenant_terms
from gpupool.adapters.wire.quotas import read_quota
from gpupool.domain.errors import GpupoolError
from gpupool.quota.spec import TenantQuota

log = logging.getLogger("gpupool.webhook")

GpuQuota = create_global_resource(names.GROUP, names.VERSION, "GpuQuota", "gpuquotas")
GpuNode = create_global_resource(names.GROUP, names.VERSION, "GpuNode", "gpunodes")
# resource.k8s.io/v1 (GA in Kubernetes 1.34), read as plain objects: lightkube's models may lag
ClaimTemplate = create_namespaced_resource(
    "resource.k8s.io", "v1", "ResourceClaimTemplate", "resourceclaimtemplates"
)
ResourceClaim = create_namespaced_resource(
    "resource.k8s.io", "v1", "ResourceClaim", "resourceclaims"
)

T = TypeVar("T")


ATTEMPTS = 3
MAX_WAIT_S = 2.0
# The answers the API server gives for "not now": too many requests, internal error while etcd
# is slow, unavailable, timeout (the watch cache behind etcd).
TRANSIENT = frozenset({429, 500, 503, 504})


def _wait_s(err: ApiError) -> float:
    try:
        return min(MAX_WAIT_S, max(0.0, float(err.response.headers.get("Retry-After", "0.5"))))
    except ValueError:
        return 0.5


def _code(err: ApiError) -> int:
    return err.response.status_code if err.response is not None else int(err.status.code or 0)


def _transient(err: Exception) -> float | None:
    """The seconds to wait before retrying `err`, or None when retrying cannot help."""
    if isinstance(err, httpx2.TransportError):
        return 0.0
    if isinstance(err, ApiError) and _code(err) in TRANSIENT:
        return _wait_s(err)
    return None


async def _read(read: Callable[[], Awaitable[T]]) -> T:
    for attempt in range(1, ATTEMPTS):
        try:
            return await read()
        except (httpx2.TransportError, ApiError) as err:
            wait_s = _transient(err)
            if wait_s is None:
                raise
            log.info("retrying a read in %.1f s (attempt %d): %s", wait_s, attempt, err)
            await asyncio.sleep(wait_s)
    return await read()  # the last try: whatever it raises is the caller's


def why(err: BaseException) -> str:
    """What the API server said, for a denial's message: its status and message, or that it did
    not answer (the connection error itself is for the log, not the user)."""
    if isinstance(err, ApiError):
        return f"the API server answered {_code(err)}: {err.status.message}"
    return "the API server did not answer"


WEBHOOK_KINDS = (GPUNODES, GPUQUOTAS)  # what the webhook keeps in its watch cache


class KubeLookups:
    def __init__(self, client: AsyncClient, cache: WatchCache | None = None) -> None:
        self.client = client
        self.cache = cache
        self._cards_memo: tuple[int, tuple[Card, ...]] | None = None  # (generation, cards)

    def _synced(self, kind: str) -> bool:
        return self.cache is not None and self.cache.reflectors[kind].synced.is_set()

    async def namespace_labels(self, namespace: str) -> Mapping[str, str]:
        ns: Any = await _read(lambda: self.client.get(Namespace, namespace))
        return dict(ns.metadata.labels or {})

    async def quotas(self) -> list[TenantQuota]:
        if self.cache is not None and self._synced(GPUQUOTAS.kind):
            return _readable_quotas(self.cache.stores[GPUQUOTAS.kind].values())
        return await _read(self._quotas)

    async def gang_members(self, namespace: str, gang: str) -> list[Mapping[str, Any]]:
        return await _read(lambda: self._gang_members(namespace, gang))

    async def lease_ttl(self, tenant: str) -> float | None:
        """The tenant's GpuQuota `leaseTTLSeconds`; None without a quota or a TTL."""
        return await _read(lambda: self._lease_ttl(tenant))

    async def _lease_ttl(self, tenant: str) -> float | None:
        if self.cache is not None and self._synced(GPUQUOTAS.kind):
            quota = self.cache.stores[GPUQUOTAS.kind].get(tenant)
            return None if quota is None else read_tenant_terms(quota)[1].default_ttl_s
        try:
            item: Any = await self.client.get(GpuQuota, tenant)
        except ApiError as err:
            if _code(err) == 404:
                return None
            raise
        return read_tenant_terms(item.to_dict())[1].default_ttl_s

    async def cards(self) -> tuple[Card, ...]:
        if self.cache is not None and self._synced(GPUNODES.kind):
            store = self.cache.stores[GPUNODES.kind]
            if self._cards_memo is None or self._cards_memo[0] != store.generation:
                self._cards_memo = (store.generation, _node_cards(store.values()))
            return self._cards_memo[1]
        return await _read(self._cards)

    async def claim_spec(self, namespace: str, kind: str, name: str) -> Mapping[str, Any] | None:
        """A ResourceClaimTemplate's `spec.spec` or a ResourceClaim's `spec`; None: not found."""
        resource = ClaimTemplate if kind == TEMPLATE else ResourceClaim
        try:
            item: Any = await _read(lambda: self.client.get(resource, name, namespace=namespace))
        except ApiError as err:
            if _code(err) == 404:
                return None
            raise
        spec = item.to_dict().get("spec") or {}
        inner = spec.get("spec") if kind == TEMPLATE else spec
        return dict(inner or {})

    async def _quotas(self) -> list[TenantQuota]:
        return _readable_quotas([to_dict(item) async for item in self.client.list(GpuQuota)])

    async def _gang_members(self, namespace: str, gang: str) -> list[Mapping[str, Any]]:
        out: list[Mapping[str, Any]] = []
        async for item in self.client.list(
            Pod, namespace=namespace, labels={names.LABEL_GANG: gang}
        ):
            obj: Any = item
            out.append(obj.to_dict())
        return out

    async def _cards(self) -> tuple[Card, ...]:
        return _node_cards([to_dict(item) async for item in self.client.list(GpuNode)])


def _readable_quotas(objects: list[Mapping[str, Any]]) -> list[TenantQuota]:
    out: list[TenantQuota] = []
    for obj in objects:
        try:
            out.append(read_quota(dict(obj)))
        except GpupoolError as err:  # an older, invalid quota: say so, judge the new one
            log.warning("ignoring unreadable GpuQuota: %s", err)
    return out


def _node_cards(gpunodes: list[Mapping[str, Any]]) -> tuple[Card, ...]:
    out: list[Card] = []
    for gpunode in gpunodes:
        try:
            gpus = gpus_from_gpunode(dict(gpunode))
        except GpupoolError as err:  # the extender says the same; judge by the others
            log.warning("ignoring unreadable GpuNode: %s", err)
            continue
        totals = _totals(gpunode)
        out.extend(
            Card(g.model, g.memory_bytes, totals.get(g.index))
            for g in gpus
            if g.memory_bytes is not None
        )
    return tuple(out)


def _totals(gpunode: Mapping[str, Any]) -> dict[int, int]:
    """Each card's whole memory (`memoryBytes`) by index, as the GpuNode reports it (the cards
    `gpus_from_gpunode` has read, so every device has both)."""
    out: dict[int, int] = {}
    for d in (gpunode.get("status") or {}).get("devices") or ():
        try:
            out[int(d["index"])] = int(d["memoryBytes"])
        except (KeyError, TypeError, ValueError):
            continue
    return out
