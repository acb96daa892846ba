"""The status views kept between renders and updated by what changed (the web view's model):
the same `StatusView` `build_status` makes of the same objects, without rebuilding all of it.

The objects come one at a time (`set_node`, `set_lease`, ...: a decoded watch event; None when
it is gone). A change that leaves the decoded value equal changes nothing. `view(now)` then
redoes only what the changes reach:

- the pool map per node: a node's part (its `NodeView` and its leases that could not be placed)
  depends only on its Node, its GpuNode and the leases that name it, so a changed node is built
  again alone (a one-node `ClusterCache` and `build_pool`, the full build's own code) and the
  others are kept; a Node that changed but not the cards it describes (it turned not ready, was
  cordoned) only moves its part's condition (`condition_of`). Their fragmentation also depends
  on the common request sizes, learnt from all leases (`CommonSizes.learn`): when those move,
  every card's figure is figured again in one vectorised call over the cards' kept free memory,
  and only the nodes whose figures moved get a new `NodeView`. The totals are moved part by
  part (`pool_parts.PoolSums`);
- leases, queue and tenants (lists, not maps: cheap) from their kept inputs, when those changed
  or `now` did (held times, GiB-hours and waits move with it); the pool map does not move with
  time, so a new `now` alone keeps it.

Many nodes changed at once (the first state, a relist) are built in one full pass and split.
A view that nothing changed is the same object as the last one (callers publish nothing then).

Pure: no client, no clock (`now` is passed in). `inputs()` gives the `ViewInputs` of what is
held, in the order it came, so a test compares `view(now)` with `build_status(inputs(), now)`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TypeVar

import numpy as np

from gpupool.domain.requests import Request
from gpupool.placement.fragmentation import CommonSizes, card_fragmentation
from gpupool.quota.spec import TenantQuota
from gpupool.state.cluster import ClusterCache, lease_request
from gpupool.state.lease import LeaseRecord
from gpupool.state.nodes import GpuNodeObject, NodeObject, condition_of
from gpupool.state.pods import PodView
from gpupool.state.views.inputs import QuotaStatus
from gpupool.state.views.leases import LeasesView, build_leases
from gpupool.state.views.pool import PoolView, Unplaced, build_pool
from gpupool.state.views.pool_parts import Part, PoolSums, part_of, with_frag
from gpupool.state.views.queue import QueueItem, build_queue
from gpupool.state.views.status import StatusView, ViewInputs
from gpupool.state.views.tenants import TenantView, build_tenants

V = TypeVar("V")

FULL_AT = 64  # more changed nodes than this (and a quarter of them): one full pass instead


def _put(store: dict[str, V], key: str, value: V | None) -> V | None:
    """Set or drop `key`; the value it had. A kept key keeps its place (as a watch cache does)."""
    old = store.get(key)
    if value is None:
        store.pop(key, None)
    else:
        store[key] = value
    return old


class LiveStatus:
    def __init__(self) -> None:
        self._nodes: dict[str, NodeObject] = {}
        self._gpunodes: dict[str, GpuNodeObject] = {}
        self._leases: dict[str, LeaseRecord] = {}
        self._pods: dict[str, PodView] = {}
        self._quotas: dict[str, TenantQuota] = {}
        self._statuses: dict[str, QuotaStatus] = {}
        self._notes: tuple[str, ...] = ()
        self._order: dict[str, int] = {}  # lease key -> when it came (a full build's order)
        self._came = 0
        self._on_node: dict[str, set[str]] = {}  # node name -> keys of the leases naming it
        self._requests: dict[str, Request] = {}  # what the common sizes are learnt from
        self._sizes = CommonSizes((), ())
        self._parts: dict[str, Part] = {}
        self._dirty: set[str] = set()  # node names whose part must be built again
        # node names whose Node alone changed, with the Node they had at the last render: when
        # the cards it describes are the same, only the node's condition can move
        self._renamed: dict[str, NodeObject | None] = {}
        self._sums = PoolSums()
        self._sizes_moved = False
        self._lists_moved = False  # leases, pods or quotas: leases, queue and tenants again
        self._view: StatusView | None = None

    # ---- changes -----------------------------------------------------------------------------
    def set_node(self, name: str, node: NodeObject | None) -> bool:
        if self._nodes.get(name) == node:
            return False
        old = _put(self._nodes, name, node)
        self._renamed.setdefault(name, old)
        return True

    def set_gpunode(self, name: str, gpunode: GpuNodeObject | None) -> bool:
        if self._gpunodes.get(name) == gpunode:
            return False
        _put(self._gpunodes, name, gpunode)
        self._dirty.add(name)
        return True

    def set_lease(self, key: str, lease: LeaseRecord | None) -> bool:
        if self._leases.get(key) == lease:
            return False
        old = _put(self._leases, key, lease)
        if old is not None:
            self._on_node[old.node].discard(key)
            if not self._on_node[old.node]:
                del self._on_node[old.node]
            if old.holds_capacity:
                self._dirty.add(old.node)
        if lease is None:
            self._order.pop(key, None)
        else:
            if key not in self._order:
                self._order[key] = self._came
                self._came += 1
            self._on_node.setdefault(lease.node, set()).add(key)
            if lease.holds_capacity:
                self._dirty.add(lease.node)
        request = lease_request(lease) if lease is not None and lease.slices else None
        if _put(self._requests, key, request) != request:
            self._sizes_moved = True
        self._lists_moved = True
        return True

    def set_pod(self, key: str, pod: PodView | None) -> bool:
        if self._pods.get(key) == pod:
            return False
        _put(self._pods, key, pod)
        self._lists_moved = True
        return True

    def set_quota(self, name: str, quota: TenantQuota | None, status: QuotaStatus | None) -> bool:
        if self._quotas.get(name) == quota and self._statuses.get(name) == status:
            return False
        _put(self._quotas, name, quota)
        _put(self._statuses, name, status)
        self._lists_moved = True
        return True

    def set_notes(self, notes: tuple[str, ...]) -> bool:
        """What the read could not use (unreadable objects), shown as the views' notes."""
        if notes == self._notes:
            return False
        self._notes = notes
        self._lists_moved = True
        return True

    # ---- reads -------------------------------------------------------------------------------
    def inputs(self) -> ViewInputs:
        """What is held, as one read of the cluster would give it."""
        return ViewInputs(
            nodes=list(self._nodes.values()),
            gpunodes=list(self._gpunodes.values()),
            leases=list(self._leases.values()),
            quotas=list(self._quotas.values()),
            statuses=dict(self._statuses),
            pods=list(self._pods.values()),
            notes=self._notes,
        )

    def view(self, now: float) -> StatusView:
        """The views of what is held at `now`; the last one itself when nothing moved."""
        last = self._view
        pool_moved = bool(self._dirty or self._renamed) or self._sizes_moved or last is None
        if not pool_moved and not self._lists_moved and last is not None and last.now == now:
            return last
        pool = self._pool() if pool_moved or last is None else last.pool
        leases, queue, tenants = self._lists(now, last)
        self._lists_moved = False
        self._view = StatusView(now, pool, tenants, queue, leases, None, self._notes)
        return self._view

    def _lists(
        self, now: float, last: StatusView | None
    ) -> tuple[LeasesView, tuple[QueueItem, ...], tuple[TenantView, ...]]:
        if last is not None and last.now == now and not self._lists_moved:
            return last.leases, last.queue, last.tenants
        leases = build_leases(self._leases.values(), now)
        queue = build_queue(self._pods.values(), self._statuses, now)
        tenants = build_tenants(self._quotas.values(), self._statuses, leases, queue)
        return leases, queue, tenants

    # ---- the pool map ------------------------------------------------------------------------
    def _pool(self) -> PoolView:
        refigure = False
        if self._sizes_moved:
            self._sizes_moved = False
            sizes = CommonSizes.learn(self._requests.values())
            refigure, self._sizes = sizes != self._sizes, sizes
        renamed, self._renamed = self._renamed, {}
        dirty, self._dirty = self._dirty, set()
        dirty |= {
            name
            for name, old in renamed.items()
            if name not in dirty and not self._condition_only(name, old)
        }
        if len(dirty) > FULL_AT and len(dirty) * 4 > len(self._parts):
            self._build_all()
            return self._assemble()
        if refigure:
            self._refigure(set(self._parts) - dirty)
        for name in dirty:
            self._build_one(name)
        return self._assemble()

    def _condition_only(self, name: str, old: NodeObject | None) -> bool:
        """When the Node of `name` changed but not the cards it describes (a node that turned
        not ready, or was cordoned): its part with the condition `ClusterCache` would give it,
        and True; False when the part must be built again."""
        part, node, gpunode = self._parts.get(name), self._nodes.get(name), self._gpunodes.get(name)
        if part is None or part.node is None or part.unplaced or old is None or node is None:
            return False  # (a node with unplaced leases may be fenced: built again)
        if gpunode is None and (node.problem, node.label_gpus) != (old.problem, old.label_gpus):
            return False
        condition = condition_of(node, gpunode)
        if condition != part.node.condition:
            self._set(name, replace(part, node=replace(part.node, condition=condition)))
        return True

    def _leases_on(self, name: str) -> list[LeaseRecord]:
        keys = sorted(self._on_node.get(name, ()), key=self._order.__getitem__)
        return [self._leases[k] for k in keys]

    def _build_one(self, name: str) -> None:
        node, gpunode = self._nodes.get(name), self._gpunodes.get(name)
        leases = self._leases_on(name)
        if node is None and gpunode is None and not leases:
            self._set(name, None)
            return
        cache = ClusterCache()
        cache.rebuild([node] if node else [], [gpunode] if gpunode else [], leases)
        pool = build_pool(cache, self._sizes)
        self._set(name, part_of(pool.nodes[0] if pool.nodes else None, list(pool.unplaced), cache))

    def _build_all(self) -> None:
        ordered = [self._leases[k] for k in sorted(self._leases, key=self._order.__getitem__)]
        cache = ClusterCache()
        cache.rebuild(self._nodes.values(), self._gpunodes.values(), ordered)
        pool = build_pool(cache, self._sizes)
        unplaced: dict[str, list[Unplaced]] = {}
        for u in pool.unplaced:
            unplaced.setdefault(u.node, []).append(u)
        views = {n.name: n for n in pool.nodes}
        names = set(self._nodes) | set(self._gpunodes) | set(self._on_node)
        self._parts, self._sums = {}, PoolSums()
        for name in names:
            self._set(name, part_of(views.get(name), unplaced.get(name, []), cache))

    def _refigure(self, names: set[str]) -> None:
        """The cards' fragmentation of `names` under the current sizes, in one call."""
        parts = [(name, self._parts[name]) for name in sorted(names)]
        parts = [(name, p) for name, p in parts if p.node is not None and len(p.free)]
        if not parts:
            return
        frag = card_fragmentation(
            np.concatenate([p.free for _, p in parts]),
            np.concatenate([p.compute_free for _, p in parts]),
            np.concatenate([p.total for _, p in parts]),
            np.concatenate([p.mem_known for _, p in parts]),
            self._sizes,
        ).tolist()
        at = 0
        for name, part in parts:
            n = len(part.free)
            self._set(name, with_frag(part, frag[at : at + n]))
            at += n

    def _set(self, name: str, part: Part | None) -> None:
        old = _put(self._parts, name, part)
        if old is not part:
            self._sums.move(name, old, part)

    def _assemble(self) -> PoolView:
        return self._sums.pool(self._parts)
