"""Lease expiry applied by the lease reconciler against the in-memory cluster: the expiry is
written when the lease is first seen, a renewal moves it, an unrenewed lease's pod gets the
notice and an event, is evicted through the Eviction API after the grace period, and the lease
then ends Expired with its GiB-hours; a refused eviction is retried."""

from __future__ import annotations

import asyncio
import json

from fake_cluster import FakeCluster, lease_json, pod_json, quota_json

from gpupool.adapters.wire.times import format_time
from gpupool.controllers.leases.reconcile import LeaseReconciler

NOW = 1_767_225_600.0
EXPIRY_NOTICE = "gpupool.io/expiry-notice"


def _round(cluster: FakeCluster, now: float) -> None:
    asyncio.run(LeaseReconciler(cluster, lambda: now).reconcile())


def _cluster(**notes: str) -> FakeCluster:
    # admitted, as a bound pod is (else the lease reconciler reports it NotAdmitted)
    pod = pod_json("p", "alpha", node="n1", phase="Running", annotations=notes, admitted_at=NOW)
    return FakeCluster(
        pods=[pod],
        quotas=[quota_json("alpha", 24, reclaimGracePeriodSeconds=5)],
        leases=[lease_json(pod, phase="Active", start=NOW)],
    )


def test_the_expiry_is_written_at_first_sight_and_a_renewal_moves_it() -> None:
    cluster = _cluster(**{"gpupool.io/lease-ttl": "20s"})
    _round(cluster, NOW + 1)
    spec = cluster.lease_objects["ns/uid-p"]["spec"]
    assert (spec["expiry"], spec["ttlSeconds"]) == (format_time(NOW + 20), 20.0)
    cluster.pods["ns/p"]["metadata"]["annotations"]["gpupool.io/renew"] = "1"
    _round(cluster, NOW + 15)
    spec = cluster.lease_objects["ns/uid-p"]["spec"]
    assert (spec["expiry"], spec["renewal"]) == (format_time(NOW + 35), "1")
    _round(cluster, NOW + 30)  # before the renewed expiry: nothing more
    assert EXPIRY_NOTICE not in cluster.pods["ns/p"]["metadata"]["annotations"]
    assert cluster.written("evict_pod") == []


def test_the_tenants_default_ttl_applies_to_a_pod_without_one() -> None:
    pod = pod_json("p", "alpha", node="n1", phase="Running")
    cluster = FakeCluster(pods=[pod], quotas=[quota_json("alpha", 24, leaseTTLSeconds=7200)],
                          leases=[lease_json(pod, phase="Active", start=NOW)])  # fmt: skip
    _round(cluster, NOW + 1)
    assert cluster.lease_objects["ns/uid-p"]["spec"]["expiry"] == format_time(NOW + 7200)


def test_an_unrenewed_lease_is_noticed_evicted_after_its_grace_and_ends_expired() -> None:
    cluster = _cluster(**{"gpupool.io/lease-ttl": "20s"})
    _round(cluster, NOW + 1)
    _round(cluster, NOW + 21)
    notice = json.loads(cluster.pods["ns/p"]["metadata"]["annotations"][EXPIRY_NOTICE])
    assert notice["evictAt"] == format_time(NOW + 26)
    assert [r for _, r, _ in cluster.events] == ["LeaseExpired"]
    assert cluster.lease_objects["ns/uid-p"]["status"]["phase"] == "Active"  # still held
    _round(cluster, NOW + 25)
    assert cluster.written("evict_pod") == []  # its grace period is not over
    _round(cluster, NOW + 26)
    assert [k for k, _ in cluster.written("evict_pod")] == ["ns/p"]
    assert "ns/p" not in cluster.pods and cluster.events[-1][1] == "LeaseEvicted"
    _round(cluster, NOW + 27)  # the pod is gone: the lease ends Expired, metered to now
    status = cluster.lease_objects["ns/uid-p"]["status"]
    assert status["phase"] == "Expired" and status["end"] == format_time(NOW + 27)
    assert status["gibHours"] == round(12 * 27 / 3600, 6)


def test_a_refused_eviction_is_recorded_once_and_retried() -> None:
    cluster = _cluster(**{"gpupool.io/lease-ttl": "20s"})
    cluster.refuse_eviction["ns/p"] = (
        "Cannot evict pod as it would violate the pod's disruption budget."
    )
    for t in (1, 21, 26, 27):
        _round(cluster, NOW + t)
    assert len(cluster.written("evict_pod")) == 2
    notice = json.loads(cluster.pods["ns/p"]["metadata"]["annotations"][EXPIRY_NOTICE])
    assert "disruption budget" in notice["blocked"]
    assert [r for _, r, _ in cluster.events].count("EvictionBlocked") == 1
    del cluster.refuse_eviction["ns/p"]
    _round(cluster, NOW + 28)
    assert "ns/p" not in cluster.pods


def test_a_lease_without_a_ttl_never_expires() -> None:
    cluster = _cluster()
    _round(cluster, NOW + 10**6)
    assert cluster.written("patch_lease_spec") == [] and cluster.written("patch_pod") == []
