"""The reclaim reconciler against the in-memory cluster, after the admission round whose plan it
consumes: the notice it writes on the borrower, the eviction once the grace period is over and
the mark on the victim's lease; a failed eviction is tried again by the next round (the notice and
its deadline are kept on the pod).

The cohort: alpha (nominal 24Gi, idle) lends to beta (nominal and guaranteed 24Gi), which runs
b1, b2 within its quota and b3, b4 borrowed (12Gi each): the pool is full when alpha's a1 comes.
"""

from __future__ import annotations

import asyncio
import json

from fake_cluster import FakeCluster, lease_json, pod_json, quota_json

from gpupool.controllers.admission.reconcile import AdmissionReconciler
from gpupool.controllers.reclaim.plan import ReclaimRound
from gpupool.controllers.reclaim.reconcile import ReclaimReconciler

NOW = 1_767_225_600.0
NOTICE = "gpupool.io/reclaim-notice"


def _cluster() -> FakeCluster:
    beta = [
        pod_json(name, "beta", node="n1", phase="Running", admitted_at=NOW - 100 + i,
                 borrowed_gib=12 if i >= 2 else 0)
        for i, name in enumerate(("b1", "b2", "b3", "b4"))
    ]  # fmt: skip
    return FakeCluster(
        pods=[*beta, pod_json("a1", "alpha", gated=True, created=NOW - 10)],
        leases=[
            lease_json(
                p,
                phase="Active",
                start=NOW - 100,
                borrowed_gib=12 if p["metadata"]["name"] in ("b3", "b4") else 0,
            )
            for p in beta
        ],
        quotas=[
            quota_json("alpha", 24, cohort="c", reclaimGracePeriodSeconds=3),
            quota_json("beta", 24, cohort="c", guaranteed="24Gi", reclaimGracePeriodSeconds=3),
        ],
    )


def _round(cluster: FakeCluster, now: float) -> ReclaimRound:
    async def both() -> ReclaimRound:
        admission = await AdmissionReconciler(cluster, lambda: now).reconcile()
        return await ReclaimReconciler(cluster).reconcile(admission)

    return asyncio.run(both())


def test_the_newest_borrower_is_noticed_then_evicted_and_its_lease_marked() -> None:
    cluster = _cluster()
    plan = _round(cluster, NOW)
    assert [n.pod.name for n in plan.notices] == ["b4"]
    notice = json.loads(cluster.pods["ns/b4"]["metadata"]["annotations"][NOTICE])
    assert notice["claimant"] == "alpha" and notice["for"] == "ns/a1"
    assert ("ns/b4", "ReclaimNotice") in [(k, r) for k, r, _ in cluster.events]
    assert cluster.written("evict_pod") == []

    _round(cluster, NOW + 1)  # within the grace period: nothing more
    assert cluster.written("evict_pod") == []
    assert [key for key, _ in cluster.written("patch_pod")].count("ns/b4") == 1  # noticed once

    _round(cluster, NOW + 3)
    assert cluster.written("evict_pod") == [("ns/b4", None)] and "ns/b4" not in cluster.pods
    reclaim = cluster.lease_objects["ns/uid-b4"]["status"]["reclaim"]
    assert reclaim["reason"] == "QuotaReclaim"


def test_a_failed_eviction_is_tried_again_by_the_next_round() -> None:
    cluster = _cluster()
    _round(cluster, NOW)
    cluster.fail_next("evict_pod")
    _round(cluster, NOW + 3)  # the failure stays with b4: set aside, no raise
    assert "ns/b4" in cluster.pods and NOTICE in cluster.pods["ns/b4"]["metadata"]["annotations"]
    _round(cluster, NOW + 4)
    assert "ns/b4" not in cluster.pods


def test_a_refused_eviction_is_said_on_the_notice_and_retried() -> None:
    cluster = _cluster()
    _round(cluster, NOW)
    cluster.refuse_eviction["ns/b4"] = "would violate the pod's disruption budget"
    _round(cluster, NOW + 3)
    notice = json.loads(cluster.pods["ns/b4"]["metadata"]["annotations"][NOTICE])
    assert notice["blocked"] == "would violate the pod's disruption budget"
    del cluster.refuse_eviction["ns/b4"]
    _round(cluster, NOW + 5)
    assert "ns/b4" not in cluster.pods


class Told:
    """ports.Outcomes that keeps what it was told."""

    def __init__(self) -> None:
        self.said: list[tuple[str, str]] = []

    def noticed(self, reason: str) -> None:
        self.said.append(("noticed", reason))

    def evicted(self, reason: str) -> None:
        self.said.append(("evicted", reason))


def test_the_notice_and_the_eviction_are_reported_once_each_with_their_reason() -> None:
    cluster, told = _cluster(), Told()

    def round_at(now: float) -> None:
        async def both() -> None:
            admission = await AdmissionReconciler(cluster, lambda: now).reconcile()
            await ReclaimReconciler(cluster, told).reconcile(admission)

        asyncio.run(both())

    for now in (NOW, NOW + 1, NOW + 3):
        round_at(now)
    assert told.said == [("noticed", "QuotaReclaim"), ("evicted", "QuotaReclaim")]


class _CountingCluster(FakeCluster):
    """Counts the reclaim round's reads of Nodes (the snapshot of every lease is built with
    them)."""

    node_reads = 0

    async def nodes(self):  # type: ignore[no-untyped-def]
        self.node_reads += 1
        return await super().nodes()


def _waiting(name: str, tenant: str) -> dict[str, object]:
    """An admitted pod kube-scheduler found no card for."""
    pod = pod_json(name, tenant, admitted_at=NOW - 5)
    pod["status"]["conditions"] = [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
         "message": "0/1 nodes are available: insufficient memory on every card"}
    ]  # fmt: skip
    return pod


def test_the_snapshot_is_built_only_for_a_waiting_pod_room_reclaim_could_serve() -> None:
    """Room is taken only within the claimant's cohort: a full cluster's waiting pods of a tenant
    in no cohort cost no snapshot (no read of the nodes); one of a tenant in a cohort does."""

    def reads(cohort: str | None) -> int:
        cluster = _CountingCluster(
            pods=[_waiting("w1", "solo")], quotas=[quota_json("solo", 24, cohort=cohort)]
        )

        async def both() -> None:
            admission = await AdmissionReconciler(cluster, lambda: NOW).reconcile()
            await ReclaimReconciler(cluster).reconcile(admission)

        before = cluster.node_reads
        asyncio.run(both())
        return cluster.node_reads - before

    # the admission round reads the nodes (card sizes) either way; reclaim once more, or not
    assert reads("c") == reads(None) + 1
