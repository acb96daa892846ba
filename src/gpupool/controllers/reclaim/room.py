"""Reclaim for room in the live controller, pure: which borrowed pods to notice so that a lender's
pod that the quota admitted, but no node can take, fits on one node.

A pod *waits for room* when it is admitted (`gpupool.io/admitted`, no quota gate), not bound, not
finished or being deleted, asks for a GPU, and kube-scheduler marked it Unschedulable
(PodScheduled=False, reason Unschedulable: the extender found no card). Freeing quota does not help
it; room on one node does. For each such pod whose tenant is within its nominal quota (its own
usage, this pod included, at most nominal), whose tenant is in a cohort, and which fits nowhere
now, `plan_room_reclaim` asks the shared `state.room_reclaim.room_plan` (the replay's decision,
over `quota.reclaim_sites.plan_site_reclaim`):
- victims only among reclaimable leases (borrowed or preemptible, never exclusive) of other
  tenants of the cohort that are borrowing now, never taking a tenant below its guaranteed quota
  (leases already under notice count as taken), preferred as `plan_reclaim` prefers them;
- on the one node where the fewest such victims let the pod fit (exact what-if: the victims'
  placements are forgotten on the extender's own snapshot of nodes, GpuNodes and GpuLeases,
  `ClusterCache`, the placement filters are asked, and the placements are assumed back);
- leases already under notice are never chosen again, nor counted as room: what they free is
  promised to whoever claimed it;
- only nodes the pod may run on by its own constraints (`state.pods.NodeConstraints`:
  nodeSelector, required node affinity, taints), so nobody is evicted from a node the pod could
  not use;
- a node where room is already being made for another pod (`held`) is not used again, and a pod
  with room already being made for it (`held` names it) gets nothing more: a notice is not doubled.
Several pods may claim room in one round, highest priority first, then the earliest admitted;
each takes its node out of the running for the next.

Nothing here reads a clock or the API server; the reclaim round (`reclaim.reconcile`) passes
the snapshot and `now`, turns each claim into notices with the same annotation, grace period and
Eviction API path as a quota reclaim, and withdraws them when the claimant is gone or placed.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from gpupool.placement.filters import Reason, feasibility
from gpupool.placement.snapshot import ClusterSnapshot, Decision
from gpupool.placement.whatif import UsableNodes
from gpupool.quota.ledger import Ledger
from gpupool.quota.reclaim import NoReclaim, Notice
from gpupool.quota.reclaim_sites import SitePlan
from gpupool.state.cluster import ClusterCache
from gpupool.state.lease import LeaseRecord
from gpupool.state.nodes import GpuNodeObject, NodeObject
from gpupool.state.pods import PodView
from gpupool.state.room_reclaim import room_plan


@dataclass(frozen=True, slots=True)
class Placement:
    """The extender's view of where capacity is: a snapshot and each lease's placement on it,
    keyed by the pod uid (the quota ledger's lease id)."""

    snap: ClusterSnapshot
    decisions: Mapping[str, Decision]
    nodes: Mapping[str, NodeObject]  # by name (labels, taints)

    def decision_of(self, lease_id: str) -> Decision | None:
        return self.decisions.get(lease_id)


def build_placement(
    nodes: Iterable[NodeObject],
    gpunodes: Iterable[GpuNodeObject],
    leases: Iterable[LeaseRecord],
    holders: Collection[str] | None = None,
) -> Placement:
    """The snapshot as the extender builds it (`ClusterCache`): the same node reading, the same
    conditions (cordoned, not ready, unhealthy), the same lease accounting.

    `holders`: uids of the pods that still hold their capacity (admitted, not finished); a lease
    of any other pod is counted as ended, since the lease controller releases it shortly. Room an
    evicted victim leaves is then seen as room at once, so nobody else is evicted for it while its
    lease is being released. (A lease of a pod gpupool does not list is left out too: that errs
    towards evicting less.)"""
    records = [le for le in leases if holders is None or le.pod.uid in holders]
    node_list = list(nodes)
    cache = ClusterCache()
    cache.rebuild(node_list, gpunodes, records)
    snap = cache.snapshot()
    decisions: dict[str, Decision] = {}
    for lease in records:
        decision = cache.applied(lease.key)
        if decision is not None and lease.pod.uid:
            decisions[lease.pod.uid] = decision
    return Placement(snap, decisions, {n.name: n for n in node_list})


@dataclass(frozen=True, slots=True)
class RoomClaim:
    pod: PodView  # the pod that waits for room
    node: str  # where it fits once the victims are gone
    notices: tuple[Notice, ...]  # lease ids are the victims' pod uids (or keys)


@dataclass(frozen=True, slots=True)
class NoRoom:
    pod: PodView
    reason: str


@dataclass(frozen=True, slots=True)
class RoomPlan:
    claims: tuple[RoomClaim, ...]
    no_room: tuple[NoRoom, ...]


def waits_for_room(pod: PodView) -> bool:
    """Admitted by quota, unbound, and refused by kube-scheduler (see the module docstring)."""
    return (
        pod.admitted is not None
        and not pod.gated
        and pod.node is None
        and not pod.terminal
        and not pod.deleting
        and pod.unschedulable
        and pod.request is not None
        and pod.request.wants_gpu
    )


def may_claim_room(pod: PodView, cohorts: Mapping[str, str | None]) -> bool:
    """A pod room reclaim could act for: it waits for room and its tenant is in a cohort (room is
    taken only from the claimant's cohort; `plan_room_reclaim` skips the others). `cohorts`:
    each tenant's cohort. The reclaim round builds its snapshot of every lease only for these."""
    return waits_for_room(pod) and cohorts.get(pod.tenant) is not None


def plan_room_reclaim(
    pods: Sequence[PodView],
    ledger: Ledger,
    placement: Placement,
    now: float,
    *,
    pending: Collection[str] = (),
    held: Mapping[str, str] | None = None,
) -> RoomPlan:
    """This round's room claims (pure; see the module docstring).

    `ledger`: the quota ledger of admitted pods (each lease's id the pod uid, else its key);
    `pending`: lease ids already under notice (any reclaim); `held`: pod key -> node of the
    claimants that room is already being made for."""
    held = dict(held or {})
    book = ledger.book
    snap = placement.snap
    usable_nodes = UsableNodes()
    taken: set[str] = set(pending)
    claims: list[RoomClaim] = []
    no_room: list[NoRoom] = []
    waiting = sorted(
        (p for p in pods if waits_for_room(p) and p.key not in held),
        key=lambda p: (-p.priority, p.admitted.at if p.admitted else 0.0, p.key),
    )
    for pod in waiting:
        assert pod.request is not None
        quota = book.get(pod.tenant)
        if quota is None or quota.cohort is None:
            continue  # nobody to take room from
        if ledger.used(pod.tenant) > quota.nominal:
            continue  # runs on borrowed quota itself: it has no claim on anyone's room
        req = pod.request
        allowed = np.fromiter(
            (
                pod.constraints.allows(placement.nodes.get(name) or NodeObject(name))
                for name in snap.names
            ),
            dtype=np.bool_,
            count=len(snap.names),
        )
        if bool(((feasibility(snap, req).reason == Reason.FITS) & allowed).any()):
            continue  # fits somewhere already: kube-scheduler places it on its next try
        held_nodes = {snap.index[n] for n in held.values() if n in snap.index}
        plan = room_plan(
            snap,
            ledger,
            placement.decision_of,
            held_nodes,
            req,
            pod.tenant,
            now,
            0,
            pending=taken,
            usable=usable_nodes(snap, req) & allowed,
        )
        if isinstance(plan, NoReclaim):
            no_room.append(NoRoom(pod, plan.reason))
            continue
        assert isinstance(plan, SitePlan)
        if not plan.plan.notices:
            continue
        node = snap.names[plan.site]
        claims.append(RoomClaim(pod, node, plan.plan.notices))
        taken.update(n.lease_id for n in plan.plan.notices)
        held[pod.key] = node
    return RoomPlan(tuple(claims), tuple(no_room))
