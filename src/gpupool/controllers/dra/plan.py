"""gpupool's allocation of a claim on `gpu.gpupool.io`, pure: the node and cards its placement
core picks (which the ResourceClaim's `status.allocation` records for kube-scheduler and the
kubelet: `state.claim_writes`, encoded by the adapter), and the GpuLease that records them for
quota, metering, expiry and reclaim.

kube-scheduler's DRA plugin honours an allocated claim as it is (Kubernetes 1.34,
`pkg/scheduler/framework/plugins/dynamicresources`: PreFilter takes an allocated claim's
`nodeSelector` as the nodes the pod may use, Filter checks only that, PreBind adds the pod to
`reservedFor`), so the card gpupool chose is the card the pod gets. The cards are chosen by the
same `Planner` over the same `ClusterSnapshot` the extender uses, restricted to the nodes the
pod's own spec allows and that publish gpupool's ResourceSlice (a node without the DRA driver
cannot prepare the claim).

The consumed capacity is what the slice holds: its bytes (down to the driver's 1 MiB step, the
policy the node publishes), the compute asked (0: no hard cap) and one share, as
`node.dra.slices` declares the device. The lease is the one the extender's bind would write
for the same pod on the same cards, so everything downstream reads it alike.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass

import numpy as np

from gpupool.domain import dra_capacity
from gpupool.domain.allocations import Slice
from gpupool.domain.errors import GpupoolError
from gpupool.domain.requests import Request
from gpupool.placement import Planner
from gpupool.placement.snapshot import ClusterSnapshot, Decision
from gpupool.quota.resource import Resource, held_amount
from gpupool.state.admitted import Admitted
from gpupool.state.claim_writes import ClaimTarget
from gpupool.state.lease import LeaseRecord, PodRef
from gpupool.state.nodes import NodeObject
from gpupool.state.pods import PodView


@dataclass(frozen=True, slots=True)
class ClaimAllocation:
    decision: Decision
    lease: LeaseRecord


class NoRoom(GpupoolError):
    """No node the pod may use has room for its claim now; the message says why."""


def pick(
    planner: Planner,
    snap: ClusterSnapshot,
    request: Request,
    allowed: Set[str],
) -> Decision:
    """The planner's choice among the nodes in `allowed` (the pod's spec allows them and they
    publish gpupool's devices): its scores, ties to the planner's rank. NoRoom says why not."""
    feas, rows, scores = planner.scores(snap, request)
    names = [snap.nodes[int(i)].name for i in rows]
    keep = np.array([n in allowed for n in names], dtype=bool)
    if not keep.any():
        if len(rows):
            raise NoRoom(
                f"the nodes with room ({', '.join(sorted(names)[:5])}) are not ones the pod may "
                f"use or do not publish gpupool's DRA devices (run the agent with --dra there)"
            )
        why = planner.unschedulable(snap, request, feas)
        raise NoRoom(f"no node has room for the claim now: {why.message}")
    rows, scores = rows[keep], scores[keep]
    best = scores.max()
    tied = np.flatnonzero(scores == best)
    choice = int(tied[np.argmin(planner.rank(snap)[rows[tied]])])
    return planner.decide(snap, request, feas, int(rows[choice]), float(best))


def allowed_nodes(
    pod: PodView, nodes: Sequence[NodeObject], publishing: Set[str]
) -> frozenset[str]:
    """The nodes the pod's own spec allows (nodeSelector, required affinity, taints) that
    publish gpupool's ResourceSlice."""
    return frozenset(n.name for n in nodes if n.name in publishing and pod.constraints.allows(n))


def consumed_memory(piece: Slice) -> int:
    """The bytes the claim consumes of the card: the slice's, down to the driver's step."""
    return dra_capacity.consumed_memory(piece.size_bytes)


def claim_lease(
    pod: PodView, node: str, slices: Sequence[Slice], card_bytes: Mapping[str, int],
    compute_mode: str | None,
) -> LeaseRecord:  # fmt: skip
    """The GpuLease for the claim pod: its slices, charged what they hold in the unit the
    admission queue counted the pod in (`gpupool.io/admitted`), borrowed as admitted."""
    mark = pod.admitted or Admitted(0.0)
    request = pod.request
    if request is None:
        raise GpupoolError(f"pod {pod.key} has no GPU request to lease")
    resource = Resource.parse(mark.resource) if mark.resource else Resource.GPU_MEMORY
    held = held_amount(slices, resource, card_bytes)
    amount = held if held is not None else (mark.amount or 0)
    mps = None
    if compute_mode == "mps":
        mps = request.compute_pct or 100
    return LeaseRecord(
        name=pod.uid,
        namespace=pod.namespace,
        tenant=pod.tenant,
        pod=PodRef(pod.namespace, pod.name, pod.uid),
        node=node,
        slices=tuple(slices),
        amount=amount,
        resource=resource.value,
        borrowed=min(mark.borrowed, amount),
        priority=request.priority,
        preemptible=mark.preemptible,
        compute_mode=compute_mode,
        mps_percentage=mps,
    )


def plan_claim(
    planner: Planner,
    snap: ClusterSnapshot,
    pod: PodView,
    target: ClaimTarget,
    allowed: Set[str],
) -> ClaimAllocation:
    """Where the claim goes and what records it; NoRoom when nowhere fits now."""
    if pod.request is None:
        raise GpupoolError(f"pod {pod.key} has no GPU request to allocate")
    decision = pick(planner, snap, pod.request, allowed)
    slices = decision.allocation(snap).slices
    node = snap.nodes[decision.node_index]
    card_bytes = {g.uuid: g.memory_bytes for g in node.gpus if g.memory_bytes is not None}
    lease = claim_lease(pod, decision.node, slices, card_bytes, target.compute_mode)
    return ClaimAllocation(decision, lease)
