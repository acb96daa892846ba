"""The admission reconciler's budget writes against the in-memory cluster: the GpuQuota status
fields for a given state, the blocked pod's queue note and event, a failed status write made by
the next round, a restarted reconciler (a new one) writing the same numbers, and a removed
budget's fields removed."""

from __future__ import annotations

import asyncio

import pytest
from fake_cluster import FakeCluster, lease_json, pod_json, quota_json

from gpupool.controllers.admission.reconcile import AdmissionReconciler

T0 = 1_767_225_600.0  # a window boundary
BUDGET = {"limitHours": 0.1, "windowSeconds": 120, "onExhaustion": "block"}


def _cluster(budget: dict[str, object] | None = BUDGET) -> FakeCluster:
    done = pod_json("done", "alpha", 12, phase="Succeeded")
    running = pod_json("run", "alpha", 12, admitted_at=T0 + 10, node="n1", phase="Running")
    spec = {} if budget is None else {"budget": budget}
    return FakeCluster(
        pods=[done, running, pod_json("new", "alpha", 12, gated=True, created=T0 + 30)],
        quotas=[quota_json("alpha", 100, **spec)],
        leases=[
            lease_json(done, phase="Released", start=T0, end=T0 + 20),
            lease_json(running, phase="Active", start=T0 + 10),
        ],
    )


def _round(cluster: FakeCluster, now: float) -> None:
    asyncio.run(AdmissionReconciler(cluster, lambda: now).reconcile())


def test_the_status_shows_the_window_and_a_spent_budget_blocks_the_new_pod() -> None:
    cluster = _cluster()
    _round(cluster, T0 + 40)
    [(_, status)] = cluster.written("patch_quota_status")
    assert status["hoursUsed"] == pytest.approx(round(12 * 50 / 3600, 6))
    assert status["hoursRemaining"] == 0.0 and status["budgetExhausted"] is True
    assert status["hoursUnit"] == "GiB-hours" and status["hoursPerHour"] == 12.0
    assert status["windowStart"] == "2026-01-01T00:00:00.000000Z"
    assert status["windowEnd"] == "2026-01-01T00:02:00.000000Z"
    assert status["exhaustionForecast"] == "2026-01-01T00:00:40.000000Z"
    new = cluster.pods["ns/new"]
    assert new["spec"]["schedulingGates"] == [{"name": "gpupool.io/quota"}]
    note = new["metadata"]["annotations"]["gpupool.io/queue"]
    assert "usage budget" not in note and "of 0.1 GiB-hours this window" in note
    assert ("ns/new", "Queued") in [(key, reason) for key, reason, _ in cluster.events]


def test_the_next_window_admits_the_pod_and_the_status_starts_afresh() -> None:
    cluster = _cluster()
    _round(cluster, T0 + 40)
    _round(cluster, T0 + 121)
    assert cluster.pods["ns/new"]["spec"]["schedulingGates"] == []
    status = cluster.quota_objects["alpha"]["status"]
    assert status["windowStart"] == "2026-01-01T00:02:00.000000Z"
    assert status["budgetExhausted"] is False
    assert status["hoursUsed"] == pytest.approx(round(12 * 1 / 3600, 6))  # the running lease


def test_a_failed_status_write_is_made_by_the_next_round() -> None:
    cluster = _cluster()
    cluster.fail_next("patch_quota_status")
    _round(cluster, T0 + 40)  # the failure stays with the quota: set aside, no raise
    assert "hoursUsed" not in cluster.quota_objects["alpha"]["status"]
    _round(cluster, T0 + 40)
    assert cluster.quota_objects["alpha"]["status"]["budgetExhausted"] is True


def test_a_restarted_controller_writes_the_same_hours_and_then_nothing_new() -> None:
    cluster = _cluster()
    _round(cluster, T0 + 40)
    first = dict(cluster.quota_objects["alpha"]["status"])
    before = len(cluster.writes)
    _round(cluster, T0 + 40)  # a new reconciler, nothing in memory: the same numbers
    assert cluster.writes[before:] == []
    assert cluster.quota_objects["alpha"]["status"] == first


def test_a_removed_budget_leaves_no_budget_fields() -> None:
    cluster = _cluster()
    _round(cluster, T0 + 40)
    del cluster.quota_objects["alpha"]["spec"]["budget"]
    _round(cluster, T0 + 41)
    status = cluster.quota_objects["alpha"]["status"]
    assert "hoursUsed" not in status and "windowStart" not in status
    assert cluster.pods["ns/new"]["spec"]["schedulingGates"] == []  # nothing blocks it now
