"""The pool map in parts, one per node name, for the views kept between renders
(`state.views.live`): what a node's part holds besides its `NodeView` (its unplaced leases, its
cards' figures that fragmentation is figured from, its share of the totals), and the totals
moved part by part (`PoolSums`), so a render that changed a few nodes adds up a few nodes.

Pure: no client, no clock.
"""

from __future__ import annotations

import bisect
from collections import Counter
from dataclasses import dataclass, replace
from typing import cast

import numpy as np

from gpupool.placement.snapshot import BoolArray, IntArray
from gpupool.state.cluster import ClusterCache
from gpupool.state.views.pool import NodeView, PoolTotals, PoolView, Unplaced


@dataclass(frozen=True, slots=True, eq=False)  # parts are told apart by identity (arrays inside)
class Part:
    """One node name's part of the pool map and what its totals and fragmentation need."""

    node: NodeView | None  # None: not a GPU node gpupool knows (its leases are unplaced)
    unplaced: tuple[Unplaced, ...]
    # per card, in the node's order: what the fragmentation of a card is figured from
    free: IntArray
    compute_free: IntArray
    total: IntArray
    mem_known: BoolArray
    healthy_frag: tuple[float, ...]  # the healthy cards' fragmentation, in order
    models: frozenset[str]
    memory: int
    used: int
    free_sum: int
    slices: int


def part_of(node: NodeView | None, unplaced: list[Unplaced], cache: ClusterCache) -> Part:
    empty = np.zeros(0, dtype=np.int64)
    if node is None:
        no = empty.astype(bool)
        return Part(None, tuple(unplaced), empty, empty, empty, no, (), frozenset(), 0, 0, 0, 0)
    snap = cache.snapshot()
    i, n = snap.index[node.name], len(node.cards)
    return Part(
        node=node,
        unplaced=tuple(unplaced),
        free=snap.gmem_free[i, :n].copy(),
        compute_free=snap.comp_free[i, :n].copy(),
        total=snap.gmem_total[i, :n].copy(),
        mem_known=snap.mem_known[i, :n].copy(),
        healthy_frag=tuple(c.fragmentation for c in node.cards if c.healthy),
        models=frozenset(c.model for c in node.cards),
        memory=node.memory_bytes,
        used=node.used_bytes,
        free_sum=node.free_bytes,
        slices=node.slices,
    )


def with_frag(part: Part, frag: list[float]) -> Part:
    """`part` with its cards' fragmentation `frag` (the same object when none moved)."""
    node = part.node
    if node is None or [c.fragmentation for c in node.cards] == frag:
        return part
    cards = tuple(
        c if c.fragmentation == f else replace(c, fragmentation=f)
        for c, f in zip(node.cards, frag, strict=True)
    )
    return replace(
        part,
        node=replace(node, cards=cards),
        healthy_frag=tuple(f for c, f in zip(cards, frag, strict=True) if c.healthy),
    )


class PoolSums:
    """The pool's totals as sums over the parts, moved part by part (`pool_totals`' figures:
    integers, so the order they are added in does not matter), the names of the nodes in order,
    and the parts' unplaced leases. `frag`, the mean fragmentation, is None when a part's healthy
    cards' figures moved (a mean is figured again, in order, not moved)."""

    def __init__(self) -> None:
        self.names: list[str] = []  # of the parts with a node, sorted
        self.cards = self.memory = self.used = self.free = self.slices = self.unschedulable = 0
        self.health: Counter[str] = Counter()
        self.models: Counter[str] = Counter()
        self.unplaced: dict[str, tuple[Unplaced, ...]] = {}
        self.frag: float | None = None

    def move(self, name: str, old: Part | None, new: Part | None) -> None:
        if old is not None:
            self._add(name, old, -1)
        if new is not None:
            self._add(name, new, 1)
        if (old.healthy_frag if old else ()) != (new.healthy_frag if new else ()) or (
            old is None or old.node is None
        ) != (new is None or new.node is None):
            self.frag = None

    def _add(self, name: str, part: Part, sign: int) -> None:
        if part.unplaced:
            if sign > 0:
                self.unplaced[name] = part.unplaced
            else:
                del self.unplaced[name]
        node = part.node
        if node is None:
            return
        if sign > 0:
            bisect.insort(self.names, name)
        else:
            del self.names[bisect.bisect_left(self.names, name)]
        self.cards += sign * len(node.cards)
        self.memory += sign * part.memory
        self.used += sign * part.used
        self.free += sign * part.free_sum
        self.slices += sign * part.slices
        self.unschedulable += sign * (node.condition is not None)
        self.health[node.health] += sign
        for model in part.models:
            self.models[model] += sign

    def pool(self, parts: dict[str, Part]) -> PoolView:
        """The pool map of `parts` (the ones these sums were moved by)."""
        nodes = tuple(cast(NodeView, parts[n].node) for n in self.names)
        if self.frag is None:
            healthy = [f for n in self.names for f in parts[n].healthy_frag]
            # numpy's mean over the same figures in the same order: `pool_fragmentation`'s
            self.frag = float(np.array(healthy, dtype=np.float64).mean()) if healthy else 0.0
        unplaced = sorted((u for us in self.unplaced.values() for u in us), key=lambda u: u.lease)
        totals = PoolTotals(
            nodes=len(nodes),
            cards=self.cards,
            models=tuple(sorted(m for m, k in self.models.items() if k)),
            memory_bytes=self.memory,
            used_bytes=self.used,
            free_bytes=self.free,
            fragmentation=self.frag,
            slices=self.slices,
            by_health=tuple(sorted((h, k) for h, k in self.health.items() if k)),
            unschedulable=self.unschedulable,
        )
        return PoolView(nodes, totals, tuple(unplaced))
