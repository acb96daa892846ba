"""The node health reconciler against the in-memory cluster: a node whose Lease went silent is
marked Lost, its live leases end Lost and their pods are deleted; a round that fails half-way
leaves nothing behind for the next one (the pod goes before its lease ends); a Lease that
disappears keeps its last renewal; a node back is Healthy again."""

from __future__ import annotations

import asyncio

from fake_cluster import FakeCluster, gpu_node_json, lease_json, node_lease_json, pod_json

from gpupool.controllers.node_health.reconcile import NodeHealthReconciler

NOW = 1_767_225_600.0


def _cluster(renewed: float = NOW - 600) -> FakeCluster:
    pod = pod_json("p", "alpha", node="n1", phase="Running")
    return FakeCluster(
        pods=[pod],
        leases=[lease_json(pod, phase="Active", start=NOW - 3600)],
        gpu_nodes=[gpu_node_json("n1")],
        node_leases=[node_lease_json("n1", renewed=renewed)],
    )


def _round(cluster: FakeCluster, now: float = NOW) -> None:
    asyncio.run(NodeHealthReconciler(cluster, lambda: now).reconcile())


def test_a_lost_node_loses_its_leases_and_its_pods() -> None:
    cluster = _cluster()
    _round(cluster)
    assert cluster.gpu_node_objects["n1"]["status"]["health"] == "Lost"
    status = cluster.lease_objects["ns/uid-p"]["status"]
    assert status["phase"] == "Lost" and status["gibHours"] == 12.0  # 12 GiB for an hour
    assert cluster.pods == {}
    assert [m for m, _, _ in cluster.writes] == [
        "patch_gpu_node_status", "delete_pod", "patch_lease_status"
    ]  # fmt: skip


def test_a_fresh_lease_writes_nothing() -> None:
    cluster = _cluster(renewed=NOW - 5)
    _round(cluster)
    assert cluster.writes == []


def test_a_gpunode_without_a_lease_is_left_alone() -> None:
    cluster = _cluster()
    cluster.node_lease_objects.clear()
    _round(cluster)
    assert cluster.writes == []


def test_a_lease_deleted_after_it_was_seen_keeps_its_last_renewal() -> None:
    cluster = _cluster(renewed=NOW - 30)
    clock = [NOW]
    reconciler = NodeHealthReconciler(cluster, lambda: clock[0])
    asyncio.run(reconciler.reconcile())
    assert cluster.writes == []
    cluster.node_lease_objects.clear()  # the agent is dead and someone deleted its Lease
    clock[0] = NOW + 200
    asyncio.run(reconciler.reconcile())
    assert cluster.gpu_node_objects["n1"]["status"]["health"] == "Lost"
    assert cluster.pods == {}


def test_a_node_whose_lease_is_renewed_again_is_healthy_again() -> None:
    cluster = _cluster()
    _round(cluster)
    assert cluster.gpu_node_objects["n1"]["status"]["health"] == "Lost"
    cluster.node_lease_objects["gpupool-node-lease/n1"] = node_lease_json("n1", renewed=NOW + 9)
    _round(cluster, NOW + 10)
    status = cluster.gpu_node_objects["n1"]["status"]
    assert status["health"] == "Healthy"
    assert status["conditions"][0]["message"] == "heartbeat resumed"


def test_a_pod_deletion_that_fails_is_made_by_the_next_round() -> None:
    cluster = _cluster()
    cluster.fail_next("delete_pod")
    _round(cluster)  # the failure stays with the lease: set aside, no raise
    assert cluster.lease_objects["ns/uid-p"]["status"]["phase"] == "Active"  # not ended yet
    _round(cluster)
    assert cluster.pods == {}
    assert cluster.lease_objects["ns/uid-p"]["status"]["phase"] == "Lost"


def test_a_health_change_keeps_the_agents_other_gpu_path_condition() -> None:
    cluster = _cluster()
    other = {"type": "OtherGpuPath", "status": "True", "reason": "OtherDevicePlugin",
             "message": "another path hands out the GPUs of node n1: ..."}  # fmt: skip
    cluster.gpu_node_objects["n1"]["status"]["conditions"] = [
        {"type": "Heartbeat", "status": "True", "reason": "Healthy", "message": "ok"},
        other,
    ]
    _round(cluster)
    conditions = cluster.gpu_node_objects["n1"]["status"]["conditions"]
    assert [c["type"] for c in conditions] == ["OtherGpuPath", "Heartbeat"]
    assert conditions[0] == other
    assert conditions[1]["reason"] == "Lost"
