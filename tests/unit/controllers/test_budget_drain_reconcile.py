"""`onExhaustion: drain` applied against the in-memory cluster: a spent budget gives the running
pod the drain notice and an event, evicts it through the Eviction API after its tenant's grace,
marks its GpuLease, and the lease then ends Released (BudgetDrained) with its GiB-hours; a
restarted controller (new reconcilers every round) neither notices nor evicts twice; a refused
eviction is retried; a new window withdraws the notice."""

from __future__ import annotations

import asyncio
import json

from fake_cluster import FakeCluster, lease_json, pod_json, quota_json

from gpupool.adapters.metrics.controller import ControllerMetrics
from gpupool.adapters.wire.times import format_time
from gpupool.controllers.admission.reconcile import AdmissionReconciler
from gpupool.controllers.budget.drain_reconcile import BudgetDrainReconciler
from gpupool.controllers.leases.reconcile import LeaseReconciler

T0 = 1_767_225_600.0  # a window boundary
BUDGET = {"limitHours": 0.1, "windowSeconds": 120, "onExhaustion": "drain"}  # 30 s of 12Gi
DRAIN_NOTICE = "gpupool.io/drain-notice"


def _cluster() -> FakeCluster:
    pod = pod_json("p", "alpha", 12, admitted_at=T0, node="n1", phase="Running")
    return FakeCluster(
        pods=[pod],
        quotas=[quota_json("alpha", 100, budget=BUDGET, reclaimGracePeriodSeconds=5)],
        leases=[lease_json(pod, phase="Active", start=T0)],
    )


def _round(cluster: FakeCluster, now: float) -> None:
    """One controller round as `gpupool controller` runs it, with reconcilers made afresh (as
    after a restart: nothing is remembered between rounds)."""

    async def run() -> None:
        await LeaseReconciler(cluster, lambda: now).reconcile()
        round_ = await AdmissionReconciler(cluster, lambda: now).reconcile()
        await BudgetDrainReconciler(cluster).reconcile(round_)

    asyncio.run(run())


def test_a_spent_budget_notices_evicts_after_the_grace_and_the_lease_ends_metered() -> None:
    cluster = _cluster()
    _round(cluster, T0 + 20)  # 0.067 of 0.1 GiB-hours: nothing
    assert DRAIN_NOTICE not in cluster.pods["ns/p"]["metadata"]["annotations"]
    _round(cluster, T0 + 31)
    notice = json.loads(cluster.pods["ns/p"]["metadata"]["annotations"][DRAIN_NOTICE])
    assert (notice["at"], notice["evictAt"]) == (format_time(T0 + 31), format_time(T0 + 36))
    assert notice["claimant"] == "alpha" and notice["for"] == "ns/p"
    drained = [(r, m) for _, r, m in cluster.events if r == "BudgetDrain"]
    assert len(drained) == 1 and "(on exhaustion: drain)" in drained[0][1]
    _round(cluster, T0 + 33)  # in its grace period: no second notice, no eviction
    assert cluster.written("evict_pod") == []
    assert [r for _, r, _ in cluster.events].count("BudgetDrain") == 1
    _round(cluster, T0 + 36)
    assert [k for k, _ in cluster.written("evict_pod")] == ["ns/p"]
    assert "ns/p" not in cluster.pods and cluster.events[-1][1] == "BudgetDrained"
    lease = cluster.lease_objects["ns/uid-p"]
    assert lease["status"]["reclaim"]["reason"] == "BudgetDrain"
    assert lease["status"]["phase"] == "Active"  # held until the lease controller sees it gone
    _round(cluster, T0 + 37)
    status = cluster.lease_objects["ns/uid-p"]["status"]
    assert status["phase"] == "Released" and status["end"] == format_time(T0 + 37)
    assert status["conditions"][0]["reason"] == "BudgetDrained"
    assert status["gibHours"] == round(12 * 37 / 3600, 6)
    _round(cluster, T0 + 40)
    assert len(cluster.written("evict_pod")) == 1  # nothing evicted twice


def test_a_refused_eviction_is_recorded_once_and_retried() -> None:
    cluster = _cluster()
    cluster.refuse_eviction["ns/p"] = "Cannot evict pod as it would violate the pod's PDB."
    for t in (31, 36, 37):
        _round(cluster, T0 + t)
    assert len(cluster.written("evict_pod")) == 2 and "ns/p" in cluster.pods
    notice = json.loads(cluster.pods["ns/p"]["metadata"]["annotations"][DRAIN_NOTICE])
    assert notice["blocked"] == "Cannot evict pod as it would violate the pod's PDB."
    assert [r for _, r, _ in cluster.events].count("EvictionBlocked") == 1
    del cluster.refuse_eviction["ns/p"]
    _round(cluster, T0 + 38)
    assert "ns/p" not in cluster.pods


def test_a_new_window_withdraws_the_notice_before_the_eviction() -> None:
    cluster = _cluster()
    cluster.quota_objects["alpha"]["spec"]["reclaimGracePeriodSeconds"] = 600
    _round(cluster, T0 + 31)
    assert DRAIN_NOTICE in cluster.pods["ns/p"]["metadata"]["annotations"]
    _round(cluster, T0 + 121)  # the next window: 1 s of 12Gi used
    assert DRAIN_NOTICE not in cluster.pods["ns/p"]["metadata"]["annotations"]
    assert cluster.events[-1][1] == "DrainWithdrawn"
    assert cluster.written("evict_pod") == [] and "ns/p" in cluster.pods


def test_the_drains_notice_and_eviction_are_counted_once_each() -> None:
    cluster, metrics = _cluster(), ControllerMetrics()

    def round_at(now: float) -> None:
        async def run() -> None:
            await LeaseReconciler(cluster, lambda: now).reconcile()
            round_ = await AdmissionReconciler(cluster, lambda: now).reconcile()
            await BudgetDrainReconciler(cluster, metrics).reconcile(round_)

        asyncio.run(run())

    for now in (T0 + 31, T0 + 33, T0 + 36, T0 + 40):
        round_at(now)
    drained = {"reason": "BudgetDrain"}
    sample = metrics.registry.get_sample_value
    assert sample("gpupool_controller_reclaim_notices_total", drained) == 1
    assert sample("gpupool_controller_evictions_total", drained) == 1
