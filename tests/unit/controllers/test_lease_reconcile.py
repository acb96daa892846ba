"""The lease reconciler against the in-memory cluster: the status it writes for a given state
(through Bound to Active in one write, Released and metered once the pod is gone, collection,
the sweep of a stale reservation), and that a failed write is made again by the next round."""

from __future__ import annotations

import asyncio

from fake_cluster import FakeCluster, lease_json, pod_json

from gpupool.adapters.wire.times import format_time
from gpupool.controllers.leases.reconcile import LeaseReconciler

NOW = 1_767_225_600.0


def _round(cluster: FakeCluster, now: float = NOW) -> None:
    asyncio.run(LeaseReconciler(cluster, lambda: now).reconcile())


def test_a_reserved_lease_whose_pod_runs_is_written_active_with_both_steps() -> None:
    pod = pod_json("p", "alpha", node="n1", phase="Running", admitted_at=NOW - 60)
    cluster = FakeCluster(pods=[pod], leases=[lease_json(pod, start=NOW - 60)])
    _round(cluster)
    [(key, status)] = cluster.written("patch_lease_status")
    assert key == "ns/uid-p" and status["phase"] == "Active"
    assert status["boundAt"] == status["activeAt"] == format_time(NOW)
    assert "gibHours" not in status  # still held


def test_a_lease_whose_pod_is_gone_is_released_with_its_gib_hours() -> None:
    pod = pod_json("p", "alpha", node="n1", phase="Running")
    cluster = FakeCluster(leases=[lease_json(pod, phase="Active", start=NOW - 1800)])
    _round(cluster)  # not in the tenant list: looked up, not found, released
    [(_, status)] = cluster.written("patch_lease_status")
    assert status["phase"] == "Released" and status["gibHours"] == 6.0  # 12 GiB, half an hour
    assert cluster.lease_objects["ns/uid-p"]["status"]["end"] == format_time(NOW)
    _round(cluster, NOW + 3600)  # ended an hour ago: collected
    assert cluster.lease_objects == {}


def test_a_stale_reservation_is_swept_once_a_fresh_read_confirms_its_pod_is_unbound() -> None:
    pod = pod_json("p", "alpha")  # admitted, bound to no node, 10 minutes after its lease
    cluster = FakeCluster(pods=[pod], leases=[lease_json(pod, start=NOW - 600)])
    _round(cluster)
    assert cluster.written("delete_lease") == [("ns/uid-p", None)]


def test_a_failed_status_write_sets_the_lease_aside_and_the_next_round_writes_it() -> None:
    pod = pod_json("p", "alpha", node="n1", phase="Succeeded")
    cluster = FakeCluster(pods=[pod], leases=[lease_json(pod, phase="Active", start=NOW - 60)])
    cluster.fail_next("patch_lease_status")
    reconciler = LeaseReconciler(cluster, lambda: now)
    now = NOW
    asyncio.run(reconciler.reconcile())  # the failure stays with the lease: no raise
    assert cluster.lease_objects["ns/uid-p"]["status"]["phase"] == "Active"
    [(key, reason, message)] = cluster.events
    assert (key, reason) == ("ns/uid-p", "ReconcileFailed") and "ApiDown" in message
    now = NOW + 5  # past the first backoff (1 s)
    asyncio.run(reconciler.reconcile())
    assert cluster.lease_objects["ns/uid-p"]["status"]["phase"] == "Released"
