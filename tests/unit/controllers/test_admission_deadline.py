"""The admission+reclaim loop's next deadline from its round (`admission.due`), over rounds of
the real reconciler against the in-memory cluster: none when nothing waits (the idle cluster
costs no round), soon while pods queue, at a reclaim notice's eviction time."""

from __future__ import annotations

import asyncio
import json

from fake_cluster import FakeCluster, pod_json, quota_json

from gpupool.adapters.wire.times import format_time
from gpupool.controllers.admission.due import next_admission_work
from gpupool.controllers.admission.reconcile import AdmissionReconciler, AdmissionRound

NOW = 1_767_225_600.0


def _round(cluster: FakeCluster) -> AdmissionRound:
    return asyncio.run(AdmissionReconciler(cluster, lambda: NOW).reconcile())


def test_an_idle_round_has_no_deadline() -> None:
    cluster = FakeCluster(
        pods=[pod_json("a1", "alpha", 12, admitted_at=NOW - 60, node="n1", phase="Running")],
        quotas=[quota_json("alpha", 24)],
    )
    assert next_admission_work(_round(cluster)) is None


def test_a_round_with_a_queue_comes_due_again_soon() -> None:
    cluster = FakeCluster(
        pods=[
            pod_json("a1", "alpha", 12, gated=True, created=NOW - 20),
            pod_json("a2", "alpha", 20, gated=True, created=NOW - 10),
        ],
        quotas=[quota_json("alpha", 24)],
    )
    assert next_admission_work(_round(cluster), busy_s=5) == NOW + 5


def test_a_reclaim_notice_comes_due_at_its_eviction_time() -> None:
    notice = json.dumps(
        {"at": format_time(NOW - 10), "evictAt": format_time(NOW + 20), "claimant": "beta"}
    )
    cluster = FakeCluster(
        pods=[
            pod_json("a1", "alpha", 12, admitted_at=NOW - 60, node="n1", phase="Running",
                     annotations={"gpupool.io/reclaim-notice": notice}),
        ],
        quotas=[quota_json("alpha", 24)],
    )  # fmt: skip
    round_ = _round(cluster)
    assert [p.reclaim_notice is not None for p in round_.pods] == [True]
    assert next_admission_work(round_, busy_s=5) == NOW + 20
