"""Lease expiry and renewal, applied: `apply_expiry` writes what `leases.expiry.plan_expiry`
decided: the lease's expiry terms (`spec.expiry`, `ttlSeconds`, `renewal`), the expiry notices
and the evictions, the last two through the writes reclaim uses (`reclaim.notices`). The lease
reconciler calls it each round after the lifecycle's moves. Given the loop's `Containment`, a
write that fails sets that lease or pod aside (an Event, a retry with backoff) and the others go
on; without one it raises. Either way the next round plans it again (the deadline is on the pod,
the terms on the lease)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from functools import partial

from gpupool.adapters.wire import names
from gpupool.adapters.wire.lease_terms import read_tenant_terms
from gpupool.controllers.contain import Containment
from gpupool.controllers.leases.expiry import ExpiryPlan, SetTerms
from gpupool.controllers.reclaim.notices import evict_noticed, give_notice
from gpupool.controllers.reclaim.plan import EvictPod, NoticePod
from gpupool.ports import ClusterApi, Json, Outcomes
from gpupool.rfc3339 import format_time
from gpupool.state.lease_terms import TenantLeaseTerms

log = logging.getLogger("gpupool.controller.expiry")


def tenant_terms(quotas: list[Json]) -> dict[str, TenantLeaseTerms]:
    return dict(read_tenant_terms(q) for q in quotas)


def terms_patch(ttl_s: float, expiry: float, renewal: str | None) -> Json:
    return {"expiry": format_time(expiry), "ttlSeconds": ttl_s, "renewal": renewal}


async def apply_expiry(
    api: ClusterApi,
    plan: ExpiryPlan,
    raw: Mapping[str, Json],
    now: float,
    outcomes: Outcomes | None = None,
    contain: Containment | None = None,
) -> None:
    """`raw`: the pods' JSON by namespace/name (a notice patch and an event need the object);
    `outcomes` hears of each notice given and each eviction done; `contain`: each lease's and
    pod's writes fail only that object."""
    stamp = format_time(now)

    async def each(kind: str, obj: Json, work: Callable[[], Awaitable[None]]) -> None:
        if contain is None:
            await work()
        else:
            await contain.handle("expiry", kind, obj, work, now)

    for item in plan.terms:
        lease = item.lease
        ref = {"metadata": {"name": lease.name, "namespace": lease.namespace}}
        await each("GpuLease", ref, partial(_terms, api, item))
    for notice in plan.notices:
        await each("Pod", raw[notice.pod.key],
                   partial(_notice, api, notice, raw, stamp, outcomes))  # fmt: skip
    for eviction in plan.evictions:
        await each("Pod", raw[eviction.pod.key],
                   partial(_evict, api, eviction, raw, stamp, outcomes))  # fmt: skip


async def _terms(api: ClusterApi, item: SetTerms) -> None:
    lease = item.lease
    patch = terms_patch(item.ttl_s, item.expiry, item.renewal)
    if await api.patch_lease_spec(lease.namespace, lease.name, patch):
        log.info("lease %s %s", lease.key, item.message)


async def _notice(
    api: ClusterApi,
    notice: NoticePod,
    raw: Mapping[str, Json],
    stamp: str,
    outcomes: Outcomes | None,
) -> None:
    given = await give_notice(
        api,
        raw[notice.pod.key],
        notice.pod,
        notice.notice,
        notice.message,
        stamp,
        annotation=names.ANN_EXPIRY_NOTICE,
        reason="LeaseExpired",
    )
    if given and outcomes is not None:
        outcomes.noticed("LeaseExpired")


async def _evict(
    api: ClusterApi,
    eviction: EvictPod,
    raw: Mapping[str, Json],
    stamp: str,
    outcomes: Outcomes | None,
) -> None:
    pod = raw[eviction.pod.key]
    why = f"the GPU lease of {eviction.pod.key} expired"
    if await evict_noticed(api, pod, eviction.pod, eviction.notice, stamp,
                           annotation=names.ANN_EXPIRY_NOTICE, blocked_why=why):  # fmt: skip
        log.warning("evicted %s: %s", eviction.pod.key, eviction.message)
        await api.event(pod, "LeaseEvicted", eviction.message, warning=True, now_rfc3339=stamp)
        if outcomes is not None:
            outcomes.evicted("LeaseExpired")
