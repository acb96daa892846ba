"""The cluster state fed by typed events (`state.cluster.ClusterCache`): what it makes of Node and
GpuNode values decoded at the edge (`adapters.kubernetes.node`), a value it cannot use included."""

from __future__ import annotations

from typing import Any

from gpupool.adapters.kubernetes.node import read_gpu_node, read_node
from gpupool.domain.units import GiB
from gpupool.state.cluster import ClusterCache


def _node(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


def _gpunode(name: str, devices: list[dict[str, Any]], health: str = "Healthy") -> dict[str, Any]:
    return {"metadata": {"name": name}, "status": {"devices": devices, "health": health}}


CARD = {"index": 0, "uuid": "GPU-a", "model": "A100-80GB", "memoryBytes": 80 * GiB}


def test_an_unreadable_gpunode_keeps_its_node_out_and_says_why_until_it_is_fixed() -> None:
    cache = ClusterCache()
    bad = _gpunode("n1", [{"index": 0, "model": "A100-80GB"}])  # no memoryBytes
    cache.rebuild([read_node(_node("n1"))], [read_gpu_node(bad)], [])
    assert not cache.known("n1")
    assert cache.why_unknown("n1").startswith("gpupool cannot read this node: GpuNode n1:")
    cache.set_gpunode(read_gpu_node(_gpunode("n1", [CARD])))
    assert cache.known("n1") and len(cache.snapshot()) == 1


def test_a_suspect_gpunode_fences_its_node_with_the_agents_message() -> None:
    cache = ClusterCache()
    gpunode = _gpunode("n1", [CARD], health="Suspect")
    gpunode["status"]["conditions"] = [{"type": "Heartbeat", "message": "no heartbeat for 95s"}]
    cache.rebuild([read_node(_node("n1"))], [read_gpu_node(gpunode)], [])
    snap = cache.snapshot()
    assert snap.condition[snap.index["n1"]] == "node suspect: no heartbeat for 95s"


def test_a_resync_counts_a_gpunode_that_changed_unseen_as_drift() -> None:
    cache = ClusterCache()
    nodes = [read_node(_node("n1"))]
    cache.rebuild(nodes, [read_gpu_node(_gpunode("n1", [CARD]))], [])
    assert cache.rebuild(nodes, [read_gpu_node(_gpunode("n1", [CARD]))], []).total == 0
    sick = read_gpu_node(_gpunode("n1", [{**CARD, "healthy": False}]))
    assert cache.rebuild(nodes, [sick], []).gpunodes == 1
