"""The cards' snapshot the controller keeps between rounds (`controllers.cards.CardState`):
synced by what changed, it holds what a rebuild from the same objects holds (nodes come and go,
a card's health moves, leases start and end), and its generation stays put when nothing did."""

from __future__ import annotations

from typing import Any

import numpy as np

from gpupool.adapters.kubernetes.node import read_gpu_node, read_node
from gpupool.controllers.cards import CardState
from gpupool.domain.allocations import Slice
from gpupool.domain.units import GiB
from gpupool.quota.lease import LeasePhase
from gpupool.state.cluster import ClusterCache
from gpupool.state.lease import LeaseRecord, PodRef
from gpupool.state.nodes import GpuNodeObject, NodeObject


def node(name: str) -> NodeObject:
    return read_node(
        {
            "metadata": {"name": name},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        }
    )


def gpunode(name: str, cards: int = 2, health: str = "Healthy") -> GpuNodeObject:
    devices = [
        {"index": i, "uuid": f"GPU-{name}-{i}", "model": "A100-80GB", "memoryBytes": 80 * GiB}
        for i in range(cards)
    ]
    return read_gpu_node({"metadata": {"name": name}, "status": {"devices": devices,
                                                                 "health": health}})  # fmt: skip


def lease(pod: str, node_name: str, gib: int, phase: LeasePhase = LeasePhase.ACTIVE) -> LeaseRecord:
    card = Slice(0, f"GPU-{node_name}-0", "A100-80GB", 0, gib * GiB, 0)
    return LeaseRecord(f"l-{pod}", "ns", "t", PodRef("ns", pod, f"uid-{pod}"), node_name, (card,),
                       phase=phase)  # fmt: skip


def same(a: Any, b: Any) -> bool:
    return (
        [n.name for n in a.nodes] == [n.name for n in b.nodes]
        and np.array_equal(a.gmem_free, b.gmem_free)
        and np.array_equal(a.gmem_total, b.gmem_total)
        and list(a.condition) == list(b.condition)
    )


def rebuilt(nodes: list[NodeObject], gpus: list[GpuNodeObject], leases: list[LeaseRecord]) -> Any:
    cache = ClusterCache()
    cache.rebuild(nodes, gpus, leases)
    return cache.snapshot()


def test_a_synced_snapshot_is_what_a_rebuild_from_the_same_objects_gives() -> None:
    state = CardState()
    steps = [
        ([node("a"), node("b")], [gpunode("a"), gpunode("b")], [lease("p1", "a", 10)]),
        # a lease more, one ended, a node gone, a card's node suspect
        (
            [node("a"), node("c")],
            [gpunode("a", health="Suspect"), gpunode("c")],
            [lease("p1", "a", 10, LeasePhase.RELEASED), lease("p2", "c", 20)],
        ),
        ([node("a"), node("c")], [gpunode("a"), gpunode("c", cards=1)], [lease("p2", "c", 30)]),
    ]
    for nodes, gpus, leases in steps:
        assert same(state.sync(nodes, gpus, leases), rebuilt(nodes, gpus, leases))


def test_nothing_changed_leaves_the_generation_as_it_was() -> None:
    state = CardState()
    objects = ([node("a")], [gpunode("a")], [lease("p1", "a", 10)])
    state.sync(*objects)
    generation = state.cache.generation
    state.sync([node("a")], [gpunode("a")], [lease("p1", "a", 10)])  # equal values, new objects
    assert state.cache.generation == generation
    state.sync([node("a")], [gpunode("a")], [lease("p1", "a", 12)])
    assert state.cache.generation != generation
