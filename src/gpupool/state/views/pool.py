"""The pool map: node → cards → slices, each slice labelled by its tenant and pod, with each
card's free memory, fragmentation and health, and the pool's totals.

Built from the `ClusterCache` the extender places on: a card's free memory is the snapshot's
`gmem_free` after every live lease was assumed, and its slices are the leases the cache applied
to that card (`ClusterCache.applied`), so the map shows exactly what placement sees. A live lease
the cache could not apply (its node or card unknown, or it does not fit) is listed apart
(`PoolView.unplaced`), never dropped.

Fragmentation per card is the operators' figure of `placement.fragmentation` (the one
defragmentation acts on, `snapshot_fragmentation`): of the card's memory, the free part the
common request sizes cannot use, the sizes learnt from the leases (`CommonSizes.learn`); the
pool's figure is `pool_fragmentation`, the mean over the healthy cards.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpupool.placement.fragmentation import (
    CommonSizes,
    pool_fragmentation,
    snapshot_fragmentation,
)
from gpupool.state.cluster import ClusterCache


@dataclass(frozen=True, slots=True)
class SliceView:
    lease: str  # the GpuLease, namespace/name
    tenant: str
    pod: str  # namespace/name
    offset_bytes: int
    size_bytes: int
    compute_milli: int
    phase: str
    borrowed: bool


@dataclass(frozen=True, slots=True)
class CardView:
    index: int
    model: str
    memory_bytes: int  # what slices may take (the card less the node's reserve)
    used_bytes: int  # the sum of its slices
    free_bytes: int  # what placement sees free
    compute_free_milli: int
    fragmentation: float  # 0..1 of the card
    healthy: bool
    slices: tuple[SliceView, ...]


@dataclass(frozen=True, slots=True)
class NodeView:
    name: str
    health: str  # GpuNode status.health (Healthy, Degraded, Suspect, Lost); "NoAgent" without one
    condition: str | None  # why placement skips the node now (cordoned, not ready, suspect, ...)
    cards: tuple[CardView, ...]

    @property
    def memory_bytes(self) -> int:
        return sum(c.memory_bytes for c in self.cards)

    @property
    def used_bytes(self) -> int:
        return sum(c.used_bytes for c in self.cards)

    @property
    def free_bytes(self) -> int:
        return sum(c.free_bytes for c in self.cards)

    @property
    def fragmentation(self) -> float:
        """The mean of its cards' fractions."""
        return sum(c.fragmentation for c in self.cards) / len(self.cards) if self.cards else 0.0

    @property
    def slices(self) -> int:
        return sum(len(c.slices) for c in self.cards)


@dataclass(frozen=True, slots=True)
class Unplaced:
    lease: str
    tenant: str
    pod: str
    node: str
    why: str


@dataclass(frozen=True, slots=True)
class PoolTotals:
    nodes: int
    cards: int
    models: tuple[str, ...]
    memory_bytes: int
    used_bytes: int
    free_bytes: int
    fragmentation: float  # `pool_fragmentation`: the mean over the healthy cards
    slices: int
    by_health: tuple[tuple[str, int], ...]  # (health, nodes), sorted by health
    unschedulable: int  # nodes placement skips now (any condition)


@dataclass(frozen=True, slots=True)
class PoolView:
    nodes: tuple[NodeView, ...]  # by name
    totals: PoolTotals
    unplaced: tuple[Unplaced, ...]

    def node(self, name: str) -> NodeView | None:
        for node in self.nodes:
            if node.name == name:
                return node
        return None


def build_pool(cache: ClusterCache, sizes: CommonSizes) -> PoolView:
    snap = cache.snapshot()
    frag = snapshot_fragmentation(snap, sizes)
    on_card: dict[tuple[int, int], list[SliceView]] = {}
    unplaced: list[Unplaced] = []
    for key in sorted(cache.leases):
        lease = cache.leases[key]
        if not lease.holds_capacity:
            continue
        decision = cache.applied(key)
        pod = lease.pod.key
        if decision is None:
            why = (
                "its node is not a GPU node gpupool knows"
                if not cache.known(lease.node)
                else "it does not fit the cards it names (the node is fenced)"
            )
            unplaced.append(Unplaced(key, lease.tenant, pod, lease.node, why))
            continue
        for slot, s in zip(decision.cards, lease.slices, strict=True):
            on_card.setdefault((decision.node_index, slot), []).append(
                SliceView(
                    lease=key,
                    tenant=lease.tenant,
                    pod=pod,
                    offset_bytes=s.offset_bytes,
                    size_bytes=s.size_bytes,
                    compute_milli=s.compute_milli,
                    phase=lease.phase.value,
                    borrowed=lease.borrowed > 0,
                )
            )
    nodes: list[NodeView] = []
    for i, node in enumerate(snap.nodes):
        gpunode = cache.gpunodes.get(node.name)
        cards = []
        for slot, gpu in enumerate(node.gpus):
            slices = sorted(on_card.get((i, slot), ()), key=lambda s: (s.offset_bytes, s.lease))
            cards.append(
                CardView(
                    index=gpu.index,
                    model=gpu.model,
                    memory_bytes=int(snap.gmem_total[i, slot]),
                    used_bytes=sum(s.size_bytes for s in slices),
                    free_bytes=int(snap.gmem_free[i, slot]),
                    compute_free_milli=int(snap.comp_free[i, slot]),
                    fragmentation=float(frag[i, slot]),
                    healthy=bool(snap.healthy[i, slot]),
                    slices=tuple(slices),
                )
            )
        nodes.append(
            NodeView(
                name=node.name,
                health=gpunode.health if gpunode is not None else "NoAgent",
                condition=snap.condition[i],
                cards=tuple(cards),
            )
        )
    totals = pool_totals(nodes, pool_fragmentation(snap, sizes))
    return PoolView(tuple(nodes), totals, tuple(unplaced))


def pool_totals(nodes: Sequence[NodeView], fragmentation: float | None = None) -> PoolTotals:
    """The totals of `nodes`. `fragmentation` None: the mean over their healthy cards of each
    card's figure, which is what `pool_fragmentation` gives for the same cards (the web view's
    totals of the part of the pool a tenant may see)."""
    if fragmentation is None:
        healthy = [c.fragmentation for n in nodes for c in n.cards if c.healthy]
        fragmentation = sum(healthy) / len(healthy) if healthy else 0.0
    health: dict[str, int] = {}
    for node in nodes:
        health[node.health] = health.get(node.health, 0) + 1
    return PoolTotals(
        nodes=len(nodes),
        cards=sum(len(n.cards) for n in nodes),
        models=tuple(sorted({c.model for n in nodes for c in n.cards})),
        memory_bytes=sum(n.memory_bytes for n in nodes),
        used_bytes=sum(n.used_bytes for n in nodes),
        free_bytes=sum(n.free_bytes for n in nodes),
        fragmentation=fragmentation,
        slices=sum(n.slices for n in nodes),
        by_health=tuple(sorted(health.items())),
        unschedulable=sum(1 for n in nodes if n.condition is not None),
    )
