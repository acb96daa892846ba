"""The autoscaler's reconciler: reads the annotated Deployments and StatefulSets, their pods and
GpuLeases, asks the utilisation source for the pods' figures, plans each workload
(`autoscale.plan`) and applies the plan: the record on the object first (so a step is never
taken twice, even if the controller stops between the two writes), then the scale subresource,
then the event.

It runs at most every `interval_s` (the controller's rounds follow every pod change; scraping
the agents that often would gain nothing). The interval is only a throttle: every decision is
made again from the API server's objects, and the cooldown is read from the workload's record.

One workload's failure fails only that workload (`controllers.contain`): its reading, planning
or writes raising set it aside with a ReconcileFailed event on it, retried with backoff; the
other workloads go on, as do pods and GpuLeases that read when one does not.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from functools import partial

from gpupool.adapters.wire import names
from gpupool.adapters.wire.autoscale import record_annotation
from gpupool.controllers.autoscale.plan import (
    WorkloadPlan,
    plan_workload,
    quota_ceiling,
    wanted,
    within_quota,
)
from gpupool.controllers.contain import Containment
from gpupool.controllers.due import soonest
from gpupool.controllers.reads import decode_leases, decode_pods
from gpupool.placement.autoscale import Direction
from gpupool.placement.snapshot import ClusterSnapshot
from gpupool.placement.whatif import room_for
from gpupool.ports import Clock, ClusterApi, PodPlace, UtilisationSource, WorkloadApi
from gpupool.quota.spec import TenantQuota
from gpupool.rfc3339 import format_time
from gpupool.state.cluster import ClusterCache
from gpupool.state.lease import LeaseRecord
from gpupool.state.listed import ObjectReference, Unreadable
from gpupool.state.nodes import NodeObject
from gpupool.state.pods import PodView
from gpupool.state.workload import ScalableWorkload

log = logging.getLogger("gpupool.controller.autoscale")

INTERVAL_S = 15.0
LOOP = "autoscale"


class AutoscaleReconciler:
    def __init__(
        self,
        api: ClusterApi,
        workloads: WorkloadApi,
        source: UtilisationSource,
        clock: Clock,
        *,
        interval_s: float = INTERVAL_S,
        contain: Containment | None = None,
    ) -> None:
        self.api = api
        self.contain = contain if contain is not None else Containment(LOOP, api)
        self.workloads = workloads
        self.source = source
        self.clock = clock
        self.interval_s = interval_s
        self._last_round: float | None = None
        self._workloads = False  # the last round found autoscaled workloads

    async def reconcile(self) -> list[WorkloadPlan]:
        now = self.clock()
        if self._last_round is not None and now - self._last_round < self.interval_s:
            return []
        self._last_round = now
        try:
            return await self._reconcile(now)
        finally:
            await self.contain.report(now)

    def due_at(self) -> float | None:
        """The next scrape (`interval_s` after the last) while autoscaled workloads exist, or
        an object set aside retried; none else (a Deployment or StatefulSet change wakes the
        loop)."""
        scrape = None
        if self._workloads and self._last_round is not None:
            scrape = self._last_round + self.interval_s
        return soonest(scrape, self.contain.next_retry(self._last_round or 0.0))

    async def _reconcile(self, now: float) -> list[WorkloadPlan]:
        found = await self.workloads.workloads()
        self._workloads = bool(found.read or found.unreadable)
        if not self._workloads:
            return []
        pods = [
            (v, v.labels) for v, _ in decode_pods(self.contain, await self.api.tenant_pods(), now)
        ]
        leases = decode_leases(self.contain, await self.api.leases(), now)
        nodes = (await self.api.nodes()).values
        addresses = {n.name: n.address for n in nodes}
        reads = _RoundReads(self.api, nodes, leases)
        plans: list[WorkloadPlan] = []

        async def one(w: ScalableWorkload, ref: ObjectReference) -> None:
            mine = [
                v
                for v, labels in pods
                if w.selects(v.namespace, labels) and not v.terminal and not v.deleting
            ]
            plan = await self._plan(w, mine, reads, addresses, now)
            await self._apply(ref, plan, now)
            plans.append(plan)

        for bad in found.unreadable:  # its decoding raised: set aside, as its writes would be
            await self.contain.handle("workload", bad.ref, partial(_raise, bad), now)
        for w, ref in found:
            await self.contain.handle("workload", ref, partial(one, w, ref), now)
        return plans

    async def _plan(
        self,
        w: ScalableWorkload,
        mine: Sequence[PodView],
        reads: _RoundReads,
        addresses: Mapping[str, str | None],
        now: float,
    ) -> WorkloadPlan:
        held = reads.leased
        running = [
            PodPlace(v.namespace, v.name, v.node, addresses.get(v.node))
            for v in mine
            if v.node is not None and v.phase == "Running" and v.key in held
        ]
        figures_by_pod = await self.source.pod_utilisation(running) if running and w.policy else {}
        figures = [figures_by_pod[p.key] for p in running if p.key in figures_by_pod]
        step = wanted(w, figures, now)
        room = 0
        if step is not None and step.direction is Direction.UP:
            asker = next((v for v in mine if v.request is not None), None)
            request = asker.request if asker is not None else None
            if asker is not None and request is not None:  # no more than its quota could admit
                ceiling = quota_ceiling(asker.tenant, request, await reads.quotas())
                step = within_quota(step, w.replicas, ceiling)
            room = step.replicas - w.replicas  # a workload without GPU pods needs no card
            if request is not None:
                waiting = sum(1 for v in mine if v.key not in held)  # they need room first
                snap = await reads.snapshot()
                room = max(0, room_for(snap, request, room + waiting) - waiting)
        return plan_workload(w, step, figures, now, room)

    async def _apply(self, ref: ObjectReference, plan: WorkloadPlan, now: float) -> None:
        w = plan.workload
        if plan.record is not None:
            written = await self.workloads.annotate(
                w.kind,
                w.namespace,
                w.name,
                names.ANN_AUTOSCALE_STATUS,
                record_annotation(plan.record),
            )
            if not written:
                return  # gone under us
        if plan.scale_to is not None:
            log.info(
                "%s %s/%s: %d → %d replicas (%s)",
                w.kind, w.namespace, w.name, w.replicas, plan.scale_to,
                plan.step.reason if plan.step else "",
            )  # fmt: skip
            if not await self.workloads.scale(w.kind, w.namespace, w.name, plan.scale_to):
                return
        if plan.event is not None:
            if plan.event.warning:
                log.warning("%s: %s", w.key, plan.event.message)
            await self.workloads.workload_event(
                ref,
                plan.event.reason,
                plan.event.message,
                warning=plan.event.warning,
                now_rfc3339=format_time(now),
            )


class _RoundReads:
    """What one round reads once for every workload: the leased pods, and the placement
    snapshot (built only when a workload asks to scale up)."""

    def __init__(self, api: ClusterApi, nodes: list[NodeObject], leases: list[LeaseRecord]) -> None:
        self.api = api
        self.nodes = nodes
        self.leases = leases
        self.leased = {le.pod.key for le in leases if le.holds_capacity}
        self._snap: ClusterSnapshot | None = None
        self._quotas: list[TenantQuota] | None = None

    async def quotas(self) -> list[TenantQuota]:
        """The readable GpuQuotas (an unreadable one is the admission loop's to report)."""
        if self._quotas is None:
            listed = await self.api.quotas()
            self._quotas = [q.quota for q in listed.values if q.quota is not None]
        return self._quotas

    async def snapshot(self) -> ClusterSnapshot:
        if self._snap is None:
            cache = ClusterCache()
            cache.rebuild(self.nodes, (await self.api.gpu_nodes()).values, self.leases)
            self._snap = cache.snapshot()
        return self._snap


async def _raise(bad: Unreadable) -> None:
    raise bad.error
