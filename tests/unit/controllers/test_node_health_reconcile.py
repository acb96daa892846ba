"""The node health reconciler against the in-memory cluster: a silent node is marked Lost, its
live leases end Lost and their pods are deleted; a round that fails half-way leaves nothing
behind for the next one (the pod goes before its lease ends)."""

from __future__ import annotations

import asyncio

from fake_cluster import FakeCluster, gpu_node_json, lease_json, pod_json

from gpupool.controllers.node_health.reconcile import NodeHealthReconciler

NOW = 1_767_225_600.0


def _cluster() -> FakeCluster:
    pod = pod_json("p", "alpha", node="n1", phase="Running")
    return FakeCluster(
        pods=[pod],
        leases=[lease_json(pod, phase="Active", start=NOW - 3600)],
        gpu_nodes=[gpu_node_json("n1", heartbeat=NOW - 600)],
    )


def _round(cluster: FakeCluster) -> None:
    asyncio.run(NodeHealthReconciler(cluster, lambda: NOW).reconcile())


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


def test_a_pod_deletion_that_fails_is_made_by_the_next_round() -> None:
    cluster = _cluster()
    cluster.fail_next("delete_pod")
    _round(cluster)  # the failure stays with the lease: set aside, no raise
    assert cluster.lease_objects["ns/uid-p"]["status"]["phase"] == "Active"  # not ended yet
    _round(cluster)
    assert cluster.pods == {}
    assert cluster.lease_objects["ns/uid-p"]["status"]["phase"] == "Lost"
