"""The admission reconciler against the in-memory cluster: the writes it makes for a given state
(ungate + admitted record in one JSON patch, the queue note, the GpuQuota status), and that a write
the API server fails is made again by the next round."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Collection

from fake_cluster import FakeCluster, pod_json, quota_json

from gpupool.controllers.admission.reconcile import AdmissionReconciler
from gpupool.state.listed import Listed
from gpupool.state.pods import PodView

NOW = 1_767_225_600.0


def _cluster() -> FakeCluster:
    """alpha (24Gi) runs nothing; a1 (12Gi) and a2 (20Gi) wait at the gate, a1 first."""
    return FakeCluster(
        pods=[
            pod_json("a1", "alpha", 12, gated=True, created=NOW - 20),
            pod_json("a2", "alpha", 20, gated=True, created=NOW - 10),
        ],
        quotas=[quota_json("alpha", 24)],
    )


def _round(cluster: FakeCluster) -> None:
    asyncio.run(AdmissionReconciler(cluster, lambda: NOW).reconcile())


def test_the_first_pod_is_ungated_with_its_record_and_the_second_is_told_why_it_waits() -> None:
    cluster = _cluster()
    _round(cluster)
    a1 = cluster.pods["ns/a1"]
    assert a1["spec"]["schedulingGates"] == []
    record = json.loads(a1["metadata"]["annotations"]["gpupool.io/admitted"])
    assert record["borrowed"] == 0 and record["preemptible"] is False
    a2 = cluster.pods["ns/a2"]
    assert a2["spec"]["schedulingGates"] == [{"name": "gpupool.io/quota"}]
    assert "position 1 of 1" in a2["metadata"]["annotations"]["gpupool.io/queue"]
    assert [(key, reason) for key, reason, _ in cluster.events] == [
        ("ns/a1", "Admitted"),
        ("ns/a2", "Queued"),
    ]
    [(name, status)] = cluster.written("patch_quota_status")
    assert name == "alpha" and status["usedAmount"] == 12 * 2**30 and status["queued"] == 1


def test_a_second_round_over_the_same_state_writes_nothing_new() -> None:
    cluster = _cluster()
    _round(cluster)
    before = len(cluster.writes)
    _round(cluster)  # a1 admitted, a2's note and the quota status already say the same
    assert cluster.writes[before:] == []


def test_a_failed_admit_sets_the_pod_aside_and_the_next_round_admits() -> None:
    cluster = _cluster()
    cluster.fail_next("patch_pod")
    _round(cluster)  # the failure stays with a1: the round goes on (a2's queue note)
    assert cluster.pods["ns/a1"]["spec"]["schedulingGates"] != []
    assert ("ns/a1", "ReconcileFailed") in [(k, r) for k, r, _ in cluster.events]
    _round(cluster)
    assert cluster.pods["ns/a1"]["spec"]["schedulingGates"] == []


class _Recreated(FakeCluster):
    """a1 is deleted and made again (a new uid) just after the reconciler listed it."""

    async def tenant_pods(
        self, *, fresh: bool = False, keys: Collection[str] | None = None
    ) -> Listed[PodView]:
        pods = await super().tenant_pods()
        self.pods["ns/a1"]["metadata"]["uid"] = "uid-recreated"
        return pods


def test_a_pod_that_changed_under_the_patch_is_not_reported_admitted() -> None:
    base = _cluster()
    cluster = _Recreated(pods=list(base.pods.values()), quotas=list(base.quota_objects.values()))
    _round(cluster)
    assert cluster.pods["ns/a1"]["spec"]["schedulingGates"] != []  # the patch's uid test refused
    assert ("ns/a1", "Admitted") not in [(k, r) for k, r, _ in cluster.events]
