"""The GpuLease bind creates for a pod on its node (pure over the snapshot and the leases just
listed): the planner's slices, re-checked against those leases and laid out in free byte ranges,
with the admission queue's record of what the pod holds in its tenant quota's unit, and its
compute mode (`domain.compute_modes.decide_compute` over the operators' defaults for the card
model the slices landed on)."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

from gpupool.adapters.extender_http.fit import check_fit, lay_out_slices
from gpupool.adapters.extender_http.refusal import Refusal, Why
from gpupool.adapters.extender_http.scheduled_pod import ScheduledPod
from gpupool.domain.compute_modes import BUILT_IN, ComputeModes, decide_compute
from gpupool.domain.errors import GpupoolError
from gpupool.domain.models import get_model
from gpupool.placement import Planner
from gpupool.placement.filters import Reason, explain, feasibility
from gpupool.state.cluster import ClusterCache
from gpupool.state.lease import LeaseRecord, PodRef


def plan_lease(
    cache: ClusterCache,
    planner: Planner,
    pod: ScheduledPod,
    node: str,
    leases: Sequence[LeaseRecord],
    modes: ComputeModes = BUILT_IN,
) -> LeaseRecord | Refusal:
    snap = cache.snapshot()
    i = snap.index.get(node)
    if i is None:
        return Refusal(Why.UNKNOWN_NODE, f"node {node}: {cache.why_unknown(node)}")
    req = pod.request
    feas = feasibility(snap, req)
    if int(feas.reason[i]) != Reason.FITS:
        why = explain(snap, req, feas, i)
        return Refusal(Why.NO_LONGER_FITS, f"node {node} can no longer take the pod: {why}")
    allocation = planner.decide(snap, req, feas, i, 0.0).allocation(snap)
    domain = snap.nodes[i]
    laid = check_fit(domain, leases, allocation.slices) or lay_out_slices(
        domain, leases, allocation.slices
    )
    if isinstance(laid, Refusal):
        return Refusal(laid.why, f"node {node} changed under the plan: {laid.message}")
    # What the admission queue recorded when it ungated the pod: reclaim finds borrowed (and
    # preemptible) leases by these fields. The lease's amount and borrowed share the tenant
    # quota's unit (milli-GPU for a `gpu` quota); without a record, bytes. CEL keeps borrowed
    # within amount.
    mark = pod.admitted
    resource, amount = "gpu-memory", sum(s.size_bytes for s in laid)
    if mark.resource is not None and mark.amount is not None:
        resource, amount = mark.resource, mark.amount
    model = laid[0].model if laid else ""
    with contextlib.suppress(GpupoolError):  # outside the catalogue: only class defaults apply
        model = get_model(model).name
    compute = decide_compute(
        pod_mode=pod.compute_mode,
        workload=pod.workload,
        whole_or_exclusive=req.exclusive or req.whole_cards,
        model=model,
        compute_pct=req.compute_pct,
        modes=modes,
    )
    return LeaseRecord(
        name=pod.uid,
        namespace=pod.namespace,
        tenant=req.tenant,
        pod=PodRef(pod.namespace, pod.name, pod.uid),
        node=node,
        slices=laid,
        amount=amount,
        resource=resource,
        priority=req.priority,
        exclusive=req.exclusive,
        borrowed=min(mark.borrowed, amount),
        preemptible=mark.preemptible,
        compute_mode=compute.mode,
        mps_percentage=compute.percentage,
    )
