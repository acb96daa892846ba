"""The cards' snapshot the controller's /metrics and GpuPool status read, kept between rounds:
one `state.ClusterCache` brought up to date from each round's Nodes, GpuNodes and GpuLeases by
what changed (the decoders remember their values by uid and resourceVersion, so an unchanged
object is the same value), not rebuilt from every object each round. The snapshot it gives is
the one a rebuild from the same objects gives (`test_card_state`); its `generation` moves only
when something changed, so a reader may keep what it computed from it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from gpupool.adapters.metrics.controller import CardReading
from gpupool.domain.requests import Request
from gpupool.placement.snapshot import ClusterSnapshot
from gpupool.state.cluster import ClusterCache
from gpupool.state.lease import LeaseRecord
from gpupool.state.nodes import GpuNodeObject, NodeObject


def _changed(old: Mapping[str, object], new: Mapping[str, object]) -> tuple[list[str], list[str]]:
    """(keys gone, keys new or changed): identity first (a remembered decode), then equality."""
    gone = [k for k in old if k not in new]
    changed = [k for k, v in new.items() if (o := old.get(k)) is not v and o != v]
    return gone, changed


class CardState:
    """One ClusterCache for the controller's readings, synced per round."""

    def __init__(self) -> None:
        self.cache = ClusterCache()
        # the readings computed from it: ((generation, requests), readings), for the observer
        self.readings: tuple[tuple[int, tuple[Request, ...]], tuple[CardReading, ...]] | None = None

    def sync(
        self,
        nodes: Iterable[NodeObject],
        gpunodes: Iterable[GpuNodeObject],
        leases: Iterable[LeaseRecord],
    ) -> ClusterSnapshot:
        cache = self.cache
        new_nodes = {n.name: n for n in nodes}
        gone, changed = _changed(cache.nodes, new_nodes)
        for name in gone:
            cache.delete_node(name)
        for name in changed:
            cache.set_node(new_nodes[name])
        new_gpunodes = {g.name: g for g in gpunodes}
        gone, changed = _changed(cache.gpunodes, new_gpunodes)
        for name in gone:
            cache.delete_gpunode(name)
        for name in changed:
            cache.set_gpunode(new_gpunodes[name])
        new_leases = {le.key: le for le in leases}
        gone, changed = _changed(cache.leases, new_leases)
        for key in gone:
            cache.delete_lease(key)
        for key in changed:
            cache.set_lease(new_leases[key])
        return cache.snapshot()
