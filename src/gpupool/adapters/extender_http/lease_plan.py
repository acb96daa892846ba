"""The GpuLease bind creates for a pod on its node (pure over the snapshot and the leases just
listed): the planner's slices, re-checked against those leases and laid out in free byte ranges,
charged what they hold in its tenant quota's unit (never more than the admission queue counted),
and its compute mode (`domain.compute_modes.decide_compute` over the operators' defaults for the
card model the slices landed on)."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

from gpupool.adapters.extender_http.fit import check_fit, lay_out_slices
from gpupool.adapters.extender_http.refusal import Refusal, Why
from gpupool.adapters.extender_http.scheduled_pod import ScheduledPod
from gpupool.domain.allocations import Slice
from gpupool.domain.compute_modes import BUILT_IN, ComputeModes, decide_compute
from gpupool.domain.devices import Node
from gpupool.domain.errors import GpupoolError
from gpupool.domain.models import get_model
from gpupool.placement import Planner
from gpupool.placement.filters import Feasibility, Reason, explain, feasibility
from gpupool.quota.resource import Resource, held_amount
from gpupool.state.cluster import ClusterCache
from gpupool.state.lease import LeaseRecord, PodRef


def plan_lease(
    cache: ClusterCache,
    planner: Planner,
    pod: ScheduledPod,
    node: str,
    leases: Sequence[LeaseRecord],
    modes: ComputeModes = BUILT_IN,
    feas: Feasibility | None = None,
) -> LeaseRecord | Refusal:
    """`feas`: the pod's feasibility over the cache's current snapshot, when filter's plan
    still holds it (PlanMemo.current); else computed here."""
    snap = cache.snapshot()
    i = snap.index.get(node)
    if i is None:
        return Refusal(Why.UNKNOWN_NODE, f"node {node}: {cache.why_unknown(node)}")
    req = pod.request
    if feas is None:
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
    charge = _charge(pod, domain, laid)
    if isinstance(charge, Refusal):
        return Refusal(charge.why, f"node {node}: {charge.message}")
    resource, amount = charge
    mark = pod.admitted
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


def _charge(pod: ScheduledPod, node: Node, laid: Sequence[Slice]) -> tuple[str, int] | Refusal:
    """What the lease is charged: what its slices hold on this node's cards, in the unit of the
    tenant quota the admission queue counted the pod in (`gpupool.io/admitted`; bytes without a
    record). A lease is charged for what it holds; admission counted the most the pod may take
    (the largest card for a share, the smallest for bytes counted in milli-GPU), so a holding
    above that count means the cards changed since (a bigger card joined): refused, the pod is
    counted again rather than holding more than its quota allowed. Reclaim finds borrowed (and
    preemptible) leases by the record's fields; CEL keeps borrowed within amount."""
    mark = pod.admitted
    sizes = {g.uuid: g.memory_bytes for g in node.gpus if g.memory_bytes is not None}
    resource = Resource.GPU_MEMORY
    if mark.resource is not None:
        try:
            resource = Resource.parse(mark.resource)
        except GpupoolError:
            return Refusal(Why.BAD_REQUEST, f"unknown quota resource {mark.resource!r} admitted")
    held = held_amount(laid, resource, sizes)
    if held is None:  # a card of unknown size: only a share counted in milli-GPU gets here
        held = mark.amount if mark.amount is not None else 0
    if mark.amount is not None and held > mark.amount:
        return Refusal(
            Why.OVER_CHARGE,
            f"its slices would hold {resource.format(held)}, more than the "
            f"{resource.format(mark.amount)} its tenant's quota admitted it for (the cards "
            f"changed since admission); another node, or admission again, will do",
        )
    return resource.value, held
