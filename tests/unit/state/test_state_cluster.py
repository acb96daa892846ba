"""The cluster state fed by typed events (`state.cluster.ClusterCache`): what it makes of Node and
GpuNode values decoded at the edge (`adapters.kubernetes.node`), a value it cannot use included."""

from __future__ import annotations

from typing import Any

from gpupool.adapters.kubernetes.node import read_gpu_node, read_node
from gpupool.domain.allocations import Slice
from gpupool.domain.units import GiB
from gpupool.quota.lease import LeasePhase
from gpupool.state.cluster import ClusterCache
from gpupool.state.lease import LeaseRecord, PodRef


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


# -- leases deleted while their pod is bound: the union of leases and pods' allocations --------
def _lease(name: str, gib: int, offset_gib: int = 0, phase: LeasePhase = LeasePhase.ACTIVE) -> Any:
    return LeaseRecord(
        name=name,
        namespace="ns",
        tenant="t",
        pod=PodRef("ns", f"pod-{name}", name),
        node="n1",
        slices=(Slice(0, "GPU-a", "A100-80GB", offset_gib * GiB, gib * GiB, 0),),
        phase=phase,
    )


def _free(cache: ClusterCache) -> int:
    snap = cache.snapshot()
    return int(snap.gmem_free[snap.index["n1"], 0])


def _cache(*leases: Any) -> ClusterCache:
    cache = ClusterCache()
    cache.rebuild([read_node(_node("n1"))], [read_gpu_node(_gpunode("n1", [CARD]))], leases)
    return cache


def test_a_lease_deleted_while_its_pod_runs_keeps_its_bytes_until_it_is_made_again() -> None:
    cache = _cache(_lease("u1", 24))
    assert cache.lose_lease("ns/u1")
    assert _free(cache) == 48 * GiB  # of 72Gi allocatable: still held, the pod uses them
    assert [x.key for x in cache.orphans_on("n1")] == ["ns/u1"]
    cache.set_lease(_lease("u1", 24, phase=LeasePhase.RESERVED))  # the controller made it again
    assert cache.orphans == {} and _free(cache) == 48 * GiB


def test_a_reserved_or_ended_lease_that_is_deleted_frees_its_bytes() -> None:
    for phase in (LeasePhase.RESERVED, LeasePhase.RELEASED):
        cache = _cache(_lease("u1", 24, phase=phase))
        assert not cache.lose_lease("ns/u1")  # gpupool's own undo or collection
        assert _free(cache) == 72 * GiB and cache.orphans == {}


def test_a_reserved_lease_of_a_pod_known_bound_keeps_its_bytes_when_deleted() -> None:
    """The lease still says Reserved (the controller, down, has not seen the pod bound) but the
    Binding landed: deleted now, its bytes are the running pod's and stay held."""
    cache = _cache(_lease("u1", 24, phase=LeasePhase.RESERVED))
    cache.mark_bound("ns/u1")  # this extender's Binding landed
    assert cache.lose_lease("ns/u1")
    assert _free(cache) == 48 * GiB and list(cache.orphans) == ["ns/u1"]
    # a fresh extender knows it from the pods it lists: the rebuild's `held`
    nodes, gpunodes = [read_node(_node("n1"))], [read_gpu_node(_gpunode("n1", [CARD]))]
    reserved = _lease("u2", 8, 24, phase=LeasePhase.RESERVED)
    cache.rebuild(nodes, gpunodes, [reserved], held=[reserved])
    assert cache.lose_lease("ns/u2") and _free(cache) == 64 * GiB
    cache.delete_lease("ns/u2")  # gone for good (its pod ended): forgotten as bound too
    assert "ns/u2" not in cache.bound and _free(cache) == 72 * GiB


def test_a_rebuild_holds_bound_pods_allocations_without_a_lease_and_drops_them_once_gone() -> None:
    cache = _cache(_lease("u1", 24))
    cache.lose_lease("ns/u1")
    held = _lease("u1", 24, phase=LeasePhase.RESERVED)  # what the bound pod's annotation says
    nodes, gpunodes = [read_node(_node("n1"))], [read_gpu_node(_gpunode("n1", [CARD]))]
    cache.rebuild(nodes, gpunodes, [], held=[held])
    assert list(cache.orphans) == ["ns/u1"] and _free(cache) == 48 * GiB
    cache.rebuild(nodes, gpunodes, [_lease("u2", 8, 24)], held=[_lease("u2", 8, 24)])
    assert cache.orphans == {} and _free(cache) == 64 * GiB  # the pod went; u2 has its lease


def test_leases_on_a_node_agree_with_every_lease_scanned_through_random_histories() -> None:
    """`leases_on` reads a per-node index the cache keeps (a bind reads one node's leases); the
    index must say what a scan of every lease says after any mix of writes, moves between
    nodes, deletions (bound: kept as orphans), unleased holds and rebuilds."""
    import random

    nodes = ["n1", "n2", "n3"]
    phases = [LeasePhase.RESERVED, LeasePhase.BOUND, LeasePhase.ACTIVE, LeasePhase.RELEASED]
    for seed in range(20):
        rng = random.Random(seed)
        cache = ClusterCache()
        for _ in range(200):
            name = f"l{rng.randrange(12)}"
            op = rng.random()
            if op < 0.5:
                lease = _lease(name, 1, phase=rng.choice(phases))
                cache.set_lease(_on(lease, rng.choice(nodes)))
            elif op < 0.7:
                cache.lose_lease(f"ns/{name}")
            elif op < 0.8:
                cache.delete_lease(f"ns/{name}")
            elif op < 0.9:
                cache.hold_unleased(_on(_lease(name, 1), rng.choice(nodes)))
            else:
                kept = [x for x in cache.leases.values() if rng.random() < 0.7]
                cache.rebuild([], [], kept, held=[_on(_lease("h", 1), rng.choice(nodes))])
            for node in nodes:
                scanned = {x.key for x in cache.leases.values()
                           if x.node == node and x.holds_capacity}  # fmt: skip
                assert {x.key for x in cache.leases_on(node)} == scanned, (seed, node)


def _on(lease: LeaseRecord, node: str) -> LeaseRecord:
    from dataclasses import replace

    return replace(lease, node=node)
