"""Lease expiry and renewal, applied: `apply_expiry` writes what `leases.expiry.plan_expiry`
decided: the lease's expiry terms (`spec.expiry`, `ttlSeconds`, `renewal`), the expiry notices
and the evictions, the last two through the one notices writer (`notices.write`). The lease
reconciler calls it each round after the lifecycle's moves. Given the loop's `Containment`, a
write that fails sets that lease or pod aside (an Event, a retry with backoff) and the others go
on; without one it raises. Either way the next round plans it again (the deadline is on the pod,
the terms on the lease)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from functools import partial

from gpupool.adapters.wire import names
from gpupool.controllers.contain import Containment, lease_ref, run_one
from gpupool.controllers.leases.expiry import ExpiryPlan, SetTerms
from gpupool.controllers.notices.write import NoticeKind, outcome_tally, write_notices
from gpupool.ports import ClusterApi, Outcomes
from gpupool.state.listed import ObjectReference

log = logging.getLogger("gpupool.controller.expiry")


# Lease expiry's notices: the annotation `gpupool.io/expiry-notice`; the lease of an evicted pod
# is left as it is (`leases.plan` ends it Expired once the pod is gone); an expiry notice is never
# withdrawn (a renewal after the expiry is too late).
EXPIRY = NoticeKind(
    step="expiry",
    annotation=names.ANN_EXPIRY_NOTICE,
    noticed="LeaseExpired",
    evicted="LeaseEvicted",
    purpose=lambda eviction: f"the GPU lease of {eviction.pod.key} expired",
)


async def apply_expiry(
    api: ClusterApi,
    plan: ExpiryPlan,
    refs: Mapping[str, ObjectReference],
    now: float,
    outcomes: Outcomes | None = None,
    contain: Containment | None = None,
) -> None:
    """`refs`: the pods' references by namespace/name, as listed (an event names the pod);
    `outcomes` hears of each notice given and each eviction done; `contain`: each lease's and
    pod's writes fail only that object."""
    for item in plan.terms:
        lease = item.lease
        ref = lease_ref(lease.name, lease.namespace)
        await run_one(contain, EXPIRY.step, ref, partial(_terms, api, item), now)
    await write_notices(
        api,
        EXPIRY,
        refs,
        now,
        notices=plan.notices,
        evictions=plan.evictions,
        tally=outcome_tally(outcomes, lambda _notice: "LeaseExpired"),
        contain=contain,
    )


async def _terms(api: ClusterApi, item: SetTerms) -> None:
    lease = item.lease
    if await api.set_lease_expiry(lease.namespace, lease.name, item.ttl_s, item.expiry,
                                  item.renewal):  # fmt: skip
        log.info("lease %s %s", lease.key, item.message)
