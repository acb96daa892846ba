"""Lease expiry and renewal, applied: `apply_expiry` writes what `leases.expiry.plan_expiry`
decided: the lease's expiry terms (`spec.expiry`, `ttlSeconds`, `renewal`), the expiry notices
and the evictions, the last two through the writes reclaim uses (`reclaim.notices`). The lease
reconciler calls it each round after the lifecycle's moves; a write that fails raises and the
next round plans it again (the deadline is on the pod, the terms on the lease)."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from gpupool.adapters.wire import names
from gpupool.adapters.wire.lease_terms import read_tenant_terms
from gpupool.controllers.leases.expiry import ExpiryPlan
from gpupool.controllers.reclaim.notices import evict_noticed, give_notice
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
) -> None:
    """`raw`: the pods' JSON by namespace/name (a notice patch and an event need the object);
    `outcomes` hears of each notice given and each eviction done."""
    stamp = format_time(now)
    for item in plan.terms:
        lease = item.lease
        patch = terms_patch(item.ttl_s, item.expiry, item.renewal)
        if await api.patch_lease_spec(lease.namespace, lease.name, patch):
            log.info("lease %s %s", lease.key, item.message)
    for notice in plan.notices:
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
    for eviction in plan.evictions:
        pod = raw[eviction.pod.key]
        why = f"the GPU lease of {eviction.pod.key} expired"
        if await evict_noticed(api, pod, eviction.pod, eviction.notice, stamp,
                               annotation=names.ANN_EXPIRY_NOTICE, blocked_why=why):  # fmt: skip
            log.warning("evicted %s: %s", eviction.pod.key, eviction.message)
            await api.event(pod, "LeaseEvicted", eviction.message, warning=True, now_rfc3339=stamp)
            if outcomes is not None:
                outcomes.evicted("LeaseExpired")
