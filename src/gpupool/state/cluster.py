"""The cluster as gpupool sees it: nodes, GpuNodes and GpuLeases, kept as a placement snapshot
that the extender's filter and prioritize read and the reclaim controller asks what-ifs of.

Pure: typed events come in (`state.nodes` and `state.lease` values, decoded from JSON at the
edge: `adapters.kubernetes.node` and `.lease`); an informer (`extender_http.informer`) feeds
them; `rebuild` replaces everything from a fresh list (start-up and periodic resync) and reports
drift. A lease is applied to the snapshot as
the Decision that would have produced it (`assume`); removing it is the exact inverse (`forget`).
A lease that does not fit where it says it is (a card shrank, two leases overlap) is kept and its
node is fenced off with a condition that says so, never silently dropped. The snapshot is rebuilt
(lazily, on the next read) only when the node set or a node's cards change; a node whose readiness,
cordon or health changes gets a condition instead.

A lease deleted while its pod is bound (Bound or Active: an operator's `kubectl delete gl`, not
gpupool's own release, which ends a lease before collecting it) is an orphan: its bytes stay held
(`lose_lease`), since the pod still uses them, until the controller makes the lease again (the
same key arrives: `set_lease`) or a rebuild no longer finds the pod bound. A rebuild also takes
the holds of bound pods that have no lease (`held`: `state.pod_hold.held_by`, from their
allocation annotations), so an extender that starts while a lease is missing counts them too:
the cache's view of a card is the union of its leases and its bound pods' allocations.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

from gpupool.domain.devices import Node
from gpupool.domain.errors import GpupoolError
from gpupool.domain.requests import MILLI, Request
from gpupool.placement.snapshot import ClusterSnapshot, Decision
from gpupool.quota.lease import LeasePhase
from gpupool.state.lease import LeaseRecord, RoomHold
from gpupool.state.nodes import (
    PREFER_NO_SCHEDULE,
    GpuNodeObject,
    NodeObject,
    condition_of,
    node_of,
)

log = logging.getLogger(__name__)


def lease_request(lease: LeaseRecord) -> Request:
    """The Request a lease's slices amount to (for assume/forget; no cpu or memory)."""
    n = len(lease.slices)
    compute = max((s.compute_milli for s in lease.slices), default=0)
    whole = n > 1 or compute >= MILLI
    return Request(
        name=lease.key,
        gpu_count=n,
        gpu_memory_bytes=None if whole and n > 1 else max(s.size_bytes for s in lease.slices),
        compute_pct=None if whole else (compute // 10 or None),
    )


def lease_decision(snap: ClusterSnapshot, lease: LeaseRecord) -> Decision | None:
    """The Decision a lease stands for on `snap`; None if its node or a card is not there."""
    i = snap.index.get(lease.node)
    if i is None or not lease.slices:
        return None
    slot_of = {g.index: s for s, g in enumerate(snap.nodes[i].gpus)}
    cards = []
    for s in lease.slices:
        slot = slot_of.get(s.gpu_index)
        if slot is None:
            return None
        cards.append(slot)
    return Decision(
        request=lease_request(lease),
        node_index=i,
        node=lease.node,
        cards=tuple(cards),
        mem_bytes=tuple(s.size_bytes for s in lease.slices),
        compute_milli=tuple(s.compute_milli for s in lease.slices),
        offsets=tuple(s.offset_bytes for s in lease.slices),
        score=0.0,
    )


@dataclass
class Drift:
    """What a resync found different from the cache (each should be 0 with working watches)."""

    nodes: int = 0
    gpunodes: int = 0
    leases: int = 0

    @property
    def total(self) -> int:
        return self.nodes + self.gpunodes + self.leases


@dataclass
class ClusterCache:
    nodes: dict[str, NodeObject] = field(default_factory=dict)
    gpunodes: dict[str, GpuNodeObject] = field(default_factory=dict)
    leases: dict[str, LeaseRecord] = field(default_factory=dict)
    synced: bool = False
    generation: int = 0  # bumps on every change (for callers that cache per state)
    _domain: dict[str, Node] = field(default_factory=dict)
    _conditions: dict[str, str | None] = field(default_factory=dict)
    _snap: ClusterSnapshot | None = None
    _applied: dict[str, Decision] = field(default_factory=dict)
    _unfit: dict[str, str] = field(default_factory=dict)  # lease key → why it does not fit
    _bad_nodes: dict[str, str] = field(default_factory=dict)  # node → why it cannot be read
    room_holds: dict[str, RoomHold] = field(default_factory=dict)  # lease key → its room hold
    # lease key → a hold with no GpuLease behind it (deleted while its pod was bound, or a bound
    # pod's allocation without a lease); also in `leases`, so it holds its bytes like one
    orphans: dict[str, LeaseRecord] = field(default_factory=dict)
    # lease keys whose pods are known bound although their lease may still say Reserved: the
    # extender's own Bindings (`mark_bound`) and the bound pods a rebuild listed. The lease's
    # phase turns Bound only when the controller sees the pod; a lease deleted in between must
    # be held like a Bound one (the chaos e2e found that window, the controller killed).
    bound: set[str] = field(default_factory=set)
    # nodes with a PreferNoSchedule taint: kube-scheduler's scoring weighs those against a pod
    # that does not tolerate them, so the extender's filter leaves the choice to it there
    prefer_no_schedule: set[str] = field(default_factory=set)
    # lease key -> a pick /filter answered alone, counted on the snapshot (not a lease: nothing
    # but the snapshot sees it) until the pod's bind reserves its lease or it is swept; with
    # when it was made and the snapshot it is counted on (a rebuilt snapshot drops them all)
    _picks: dict[str, tuple[Decision, float, int]] = field(default_factory=dict)
    # node -> its leases by key (`leases` indexed: a bind reads one node's, not every lease)
    _on_node: dict[str, dict[str, LeaseRecord]] = field(default_factory=dict)

    # ---- reads -------------------------------------------------------------------------------
    def snapshot(self) -> ClusterSnapshot:
        if self._snap is None:
            self._build()
        assert self._snap is not None
        return self._snap

    def known(self, node: str) -> bool:
        return node in self._domain

    def why_unknown(self, node: str) -> str:
        if node in self._bad_nodes:
            return self._bad_nodes[node]
        if node not in self.nodes:
            return "node not in the extender's cache yet"
        return "not a gpupool GPU node (no GpuNode and no gpupool.io/gpu-model label)"

    def applied(self, key: str) -> Decision | None:
        """The Decision lease `key` is applied to the snapshot as; None when it holds nothing
        there (ended, its node or card unknown, or it does not fit its cards)."""
        self.snapshot()
        return self._applied.get(key)

    def placed(self, key: str) -> bool:
        """Lease `key` exists and holds capacity (its pod is bound or being bound)."""
        lease = self.leases.get(key)
        return lease is not None and lease.holds_capacity

    def _index_hold(self, lease: LeaseRecord) -> None:
        if lease.room_hold is None:
            self.room_holds.pop(lease.key, None)
        else:
            self.room_holds[lease.key] = lease.room_hold

    def leases_on(self, node: str) -> list[LeaseRecord]:
        return [x for x in self._on_node.get(node, {}).values() if x.holds_capacity]

    def _index_node(self, old: LeaseRecord | None, new: LeaseRecord | None) -> None:
        if old is not None and (new is None or old.node != new.node):
            on = self._on_node.get(old.node)
            if on is not None:
                on.pop(old.key, None)
                if not on:
                    del self._on_node[old.node]
        if new is not None:
            self._on_node.setdefault(new.node, {})[new.key] = new

    def orphans_on(self, node: str) -> list[LeaseRecord]:
        """Holds on `node` that no GpuLease stands for (yet): a fresh list of the node's leases
        lacks them, so whoever decides from one must add these."""
        return [x for x in self.orphans.values() if x.node == node]

    # ---- picks -------------------------------------------------------------------------------
    def assume_pick(self, key: str, decision: Decision, at: float) -> bool:
        """Count the pick /filter answered alone for the pod of lease `key` on the snapshot, as
        kube-scheduler assumes a pod before its bind: the next pod's filter, which it may send
        before this pod's bind has reserved, then sees the card taken. False when it no longer
        fits the snapshot (nothing is counted)."""
        self.forget_pick(key)
        snap = self.snapshot()
        try:
            snap.assume(decision)
        except GpupoolError:
            return False
        self._picks[key] = (decision, at, snap.uid)
        self.generation += 1
        return True

    def forget_pick(self, key: str) -> None:
        """The pick of lease `key` stops counting (its bind reserves the lease now, or it is
        old)."""
        hit = self._picks.pop(key, None)
        if hit is None:
            return
        decision, _, uid = hit
        if self._snap is not None and self._snap.uid == uid:
            self._snap.forget(decision)
        self.generation += 1

    def sweep_picks(self, made_before: float) -> int:
        """Forget the picks made before `made_before` (their binds never came: kube-scheduler
        gave the pod up after /filter); how many."""
        old = [key for key, (_, at, _) in self._picks.items() if at < made_before]
        for key in old:
            self.forget_pick(key)
        return len(old)

    def _assume_over_picks(self, decision: Decision) -> None:
        """Count a lease's decision on the snapshot; picks are guesses and a lease is the truth:
        where the picks on its node leave no room for it, they stop counting first (their pods'
        binds plan again against what stands)."""
        assert self._snap is not None
        try:
            self._snap.assume(decision)
        except GpupoolError:
            on_node = [k for k, (d, _, _) in self._picks.items()
                       if d.node_index == decision.node_index]  # fmt: skip
            if not on_node:
                raise
            for key in on_node:
                self.forget_pick(key)
            self._snap.assume(decision)

    def picks(self) -> frozenset[str]:
        """The lease keys whose picks are counted now."""
        return frozenset(self._picks)

    # ---- nodes -------------------------------------------------------------------------------
    def _refresh_node(self, name: str) -> None:
        node = self.nodes.get(name)
        gpunode = self.gpunodes.get(name)
        self.generation += 1
        if node is not None and any(t.effect == PREFER_NO_SCHEDULE for t in node.taints):
            self.prefer_no_schedule.add(name)
        else:
            self.prefer_no_schedule.discard(name)
        if node is None:
            if name in self._domain:
                del self._domain[name]
                self._conditions.pop(name, None)
                self._snap = None
            self._bad_nodes.pop(name, None)
            return
        try:
            domain: Node | None = node_of(node, gpunode)
        except GpupoolError as err:
            self._bad_nodes[name] = f"gpupool cannot read this node: {err}"
            log.warning("%s", err)
            domain = None
        else:
            self._bad_nodes.pop(name, None)
        if domain is None or not domain.gpus:
            if name in self._domain:
                del self._domain[name]
                self._conditions.pop(name, None)
                self._snap = None
            return
        condition = condition_of(node, gpunode)
        if self._domain.get(name) != domain:
            self._domain[name] = domain
            self._snap = None
        self._conditions[name] = condition
        if self._snap is not None:
            self._apply_condition(name)

    def _apply_condition(self, name: str) -> None:
        assert self._snap is not None
        condition = self._conditions.get(name)
        unfit = [why for key, why in self._unfit.items() if self.leases[key].node == name]
        if unfit and condition is None:
            condition = f"fenced: {unfit[0]}"
        gpunode = self.gpunodes.get(name)
        other = gpunode.other_path if gpunode is not None else None
        if other is not None and condition is None:
            condition = other  # the views list the node with the others placement skips
        i = self._snap.index[name]
        if self._snap.other_path_note[i] != other:
            self._snap.set_other_path(name, other)
        if self._snap.condition[i] != condition:
            self._snap.set_condition(name, condition)
        self._apply_closed(name)

    def _apply_closed(self, name: str) -> None:
        """Close the cards a defragmentation mark names (by GPU index) to new slices."""
        assert self._snap is not None
        gpunode = self.gpunodes.get(name)
        mark = gpunode.defrag if gpunode is not None else None
        i = self._snap.index[name]
        slots: list[int] = []
        if mark is not None:
            slot_of = {g.index: s for s, g in enumerate(self._snap.nodes[i].gpus)}
            slots = [slot_of[g] for g in mark.gpus if g in slot_of]
        note = mark.note(name) if mark is not None and slots else None
        have = [int(s) for s in self._snap.closed[i].nonzero()[0]]
        if have != sorted(slots) or self._snap.closed_note[i] != note:
            self._snap.set_cards_closed(name, slots, note)

    def set_node(self, node: NodeObject) -> None:
        self.nodes[node.name] = node
        self._refresh_node(node.name)

    def delete_node(self, name: str) -> None:
        self.nodes.pop(name, None)
        self._refresh_node(name)

    def set_gpunode(self, gpunode: GpuNodeObject) -> None:
        self.gpunodes[gpunode.name] = gpunode
        self._refresh_node(gpunode.name)

    def delete_gpunode(self, name: str) -> None:
        self.gpunodes.pop(name, None)
        self._refresh_node(name)

    # ---- leases ------------------------------------------------------------------------------
    def _apply(self, lease: LeaseRecord) -> None:
        if self._snap is None or not lease.holds_capacity:
            return
        decision = lease_decision(self._snap, lease)
        if decision is None:
            return  # node or card not (yet) known: applied on the rebuild that adds it
        try:
            self._assume_over_picks(decision)
        except GpupoolError as err:
            self._unfit[lease.key] = f"lease {lease.key} does not fit its cards ({err})"
            log.error("%s", self._unfit[lease.key])
            self._apply_condition(lease.node)
            return
        self._applied[lease.key] = decision

    def _unapply(self, key: str) -> None:
        decision = self._applied.pop(key, None)
        if decision is not None and self._snap is not None:
            self._snap.forget(decision)
        if self._unfit.pop(key, None) is not None and key in self.leases and self._snap:
            self._apply_condition(self.leases[key].node)

    def set_lease(self, lease: LeaseRecord) -> None:
        if lease.key in self._picks:  # the pod's lease counts now (a standby sees it by watch)
            self.forget_pick(lease.key)
        old = self.leases.get(lease.key)
        self.orphans.pop(lease.key, None)  # the lease itself is back
        self.generation += 1
        self._index_hold(lease)
        self._index_node(old, lease)
        if old is not None and (old.slices, old.node, old.holds_capacity) == (
            lease.slices,
            lease.node,
            lease.holds_capacity,
        ):
            self.leases[lease.key] = lease
            return
        if old is not None:
            self._unapply(lease.key)
        self.leases[lease.key] = lease
        self._apply(lease)

    def lose_lease(self, key: str) -> bool:
        """The GpuLease `key` was deleted (a watch event). Its bytes stay held, as an orphan,
        when its pod was bound (Bound or Active, or Reserved with its pod known bound: `bound`);
        True then. Else it is deleted."""
        lease = self.leases.get(key)
        if lease is not None and (
            lease.phase in (LeasePhase.BOUND, LeasePhase.ACTIVE)
            or (key in self.bound and lease.phase is LeasePhase.RESERVED)
        ):
            if key not in self.orphans:
                self.orphans[key] = lease
                self.generation += 1
                log.warning(
                    "GpuLease %s was deleted while pod %s is bound to %s: its slices stay held "
                    "until the lease is made again or the pod is gone", key, lease.pod.key,
                    lease.node,
                )  # fmt: skip
            return True
        self.delete_lease(key)
        return False

    def hold_unleased(self, lease: LeaseRecord) -> None:
        """A bound pod's allocation with no GpuLease behind it yet (`state.pod_hold.held_by`,
        or a lease whose create the extender gave up on): held as an orphan, as `rebuild`
        holds it, until the lease arrives (`set_lease`) or the pod is gone. A lease that
        stands under that key wins."""
        if lease.key in self.leases and lease.key not in self.orphans:
            return
        self.set_lease(lease)
        self.orphans[lease.key] = lease
        self.bound.add(lease.key)

    def mark_bound(self, key: str) -> None:
        """The pod of lease `key` is bound (this extender's Binding landed)."""
        self.bound.add(key)

    def delete_lease(self, key: str) -> None:
        self.orphans.pop(key, None)
        self.bound.discard(key)
        if key in self.leases:
            self.generation += 1
            self._unapply(key)
            self.room_holds.pop(key, None)
            gone = self.leases.pop(key)
            self._index_node(gone, None)
            node = gone.node
            if self._snap is not None and node in self._snap.index:
                self._apply_condition(node)

    # ---- whole state -------------------------------------------------------------------------
    def _build(self) -> None:
        names = sorted(self._domain)
        self._snap = ClusterSnapshot([self._domain[n] for n in names])
        self._picks.clear()  # made over the old rows; the next filters pick again
        self._applied.clear()
        self._unfit.clear()
        for lease in self.leases.values():
            self._apply(lease)
        for name in names:
            self._apply_condition(name)

    def rebuild(
        self,
        nodes: Iterable[NodeObject],
        gpunodes: Iterable[GpuNodeObject],
        leases: Iterable[LeaseRecord],
        held: Iterable[LeaseRecord] = (),
    ) -> Drift:
        """Replace the whole state from fresh lists; return how far the cache had drifted.
        `held`: what bound pods hold by their allocations (`state.pod_hold.held_by`); those
        without a lease of their key are kept as orphans."""
        new_nodes = {n.name: n for n in nodes}
        new_gpunodes = {n.name: n for n in gpunodes}
        new_leases = {x.key: x for x in leases}
        orphans = {x.key: x for x in held if x.key not in new_leases}
        if orphans:
            log.warning(
                "bound pods without a GpuLease, their allocations held: %s", ", ".join(orphans)
            )
        new_leases.update(orphans)
        drift = Drift()
        if self.synced:
            drift.nodes = len(set(new_nodes) ^ set(self.nodes))
            drift.gpunodes = sum(
                1
                for k in set(new_gpunodes) | set(self.gpunodes)
                if new_gpunodes.get(k) != self.gpunodes.get(k)
            )
            drift.leases = sum(
                1
                for k in set(new_leases) | set(self.leases)
                if (k in new_leases) != (k in self.leases)
                or (
                    k in new_leases
                    and (new_leases[k].slices, new_leases[k].holds_capacity)
                    != (self.leases[k].slices, self.leases[k].holds_capacity)
                )
            )
        self.nodes, self.gpunodes, self.leases = new_nodes, new_gpunodes, new_leases
        self._on_node = {}
        for lease in new_leases.values():
            self._index_node(None, lease)
        self.orphans = orphans
        self.bound = {x.key for x in held}
        self.room_holds = {k: x.room_hold for k, x in new_leases.items() if x.room_hold}
        self._domain.clear()
        self._conditions.clear()
        self._bad_nodes.clear()
        self.prefer_no_schedule.clear()
        for name in self.nodes:
            self._refresh_node(name)
        self._snap = None
        self.synced = True
        self.generation += 1
        return drift
