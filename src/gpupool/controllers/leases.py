"""The lease lifecycle reconciler: moves GpuLeases through their phases from their pods' state,
releases and meters them when their pod finishes or is gone, expires them, and collects ended
ones after a retention period, and sweeps stale reservations (`lease_plan` decides; this applies
it)."""

from __future__ import annotations

import logging
from collections.abc import Callable

from gpupool.adapters.cluster import ClusterApi, Json
from gpupool.adapters.wire.times import format_time
from gpupool.controllers.lease_plan import (
    RESERVED_TIMEOUT_S,
    LeasePlan,
    LeaseView,
    Move,
    plan_leases,
    read_lease,
)
from gpupool.controllers.snapshot import PodView, read_pod

log = logging.getLogger("gpupool.controller.leases")


def move_status(move: Move, now: float) -> Json:
    stamp = format_time(now)
    status: Json = {
        "phase": move.phase,
        "conditions": [
            {
                "type": move.phase,
                "status": "True",
                "reason": move.reason,
                "message": move.message,
                "lastTransitionTime": stamp,
            }
        ],
    }
    if move.phase == "Bound":
        status["boundAt"] = stamp
    if move.phase == "Active":
        status["activeAt"] = stamp
    if move.end is not None:
        status["end"] = format_time(move.end)
    if move.gib_hours is not None:
        status["gibHours"] = round(move.gib_hours, 6)
    return status


class LeaseReconciler:
    def __init__(
        self,
        api: ClusterApi,
        clock: Callable[[], float],
        *,
        retention_s: float = 3600.0,
        reserved_timeout_s: float | None = RESERVED_TIMEOUT_S,
    ) -> None:
        self.api = api
        self.clock = clock
        self.retention_s = retention_s
        self.reserved_timeout_s = reserved_timeout_s

    def _plan(self, leases: list[LeaseView], by_uid: dict[str, PodView], now: float,
              gone: frozenset[str] = frozenset()) -> LeasePlan:  # fmt: skip
        return plan_leases(
            leases,
            by_uid,
            now,
            retention_s=self.retention_s,
            reserved_timeout_s=self.reserved_timeout_s,
            known_gone=gone,
        )

    async def reconcile(self) -> LeasePlan:
        leases = [read_lease(obj) for obj in await self.api.leases()]
        pods = [read_pod(p) for p in await self.api.tenant_pods()]
        by_uid = {p.uid: p for p in pods}
        now = self.clock()
        plan = self._plan(leases, by_uid, now)
        if plan.unsure:  # pods outside the tenant list: look each up before declaring it gone
            gone: set[str] = set()
            for lease in plan.unsure:
                pod = await self.api.pod(lease.pod_namespace, lease.pod_name)
                if pod is None or (pod.get("metadata") or {}).get("uid") != lease.pod_uid:
                    gone.add(lease.pod_uid)
                else:
                    by_uid[lease.pod_uid] = read_pod(pod)
            plan = self._plan(leases, by_uid, now, frozenset(gone))
        for move in plan.moves:
            lease = move.lease
            if await self.api.patch_lease_status(
                lease.namespace, lease.name, move_status(move, now)
            ):
                log.info("lease %s: %s (%s)", lease.key, move.phase, move.message)
        for item in plan.collect:
            if await self.api.delete_lease(item.lease.namespace, item.lease.name):
                log.info("lease %s collected", item.lease.key)
        for lease in plan.sweep:
            # The snapshot may predate the pod's Binding: read it again; bound, it keeps the
            # lease (the next pass moves it to Bound).
            pod = await self.api.pod(lease.pod_namespace, lease.pod_name)
            meta = (pod or {}).get("metadata") or {}
            if pod is None or meta.get("uid") != lease.pod_uid:
                continue  # gone: released and metered by the next pass, as any lease
            if ((pod.get("spec") or {}).get("nodeName")) or meta.get("deletionTimestamp"):
                continue
            if await self.api.delete_lease(lease.namespace, lease.name):
                log.warning(
                    "lease %s swept: Reserved since %s for pod %s/%s, which is bound to no node",
                    lease.key, format_time(lease.start), lease.pod_namespace, lease.pod_name,
                )  # fmt: skip
        return plan
