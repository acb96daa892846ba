"""The port's typed reads (`ports.ClusterApi` → `state.listed.Listed`): each object decoded once
by the adapter's functions (the fake uses them as `KubeClusterApi` does), each value with the
reference an Event names it by, and an object that does not decode handed over as `Unreadable`;
a loop's containment sets that one aside with its ReconcileFailed Event while the others are
processed."""

from __future__ import annotations

import asyncio

from fake_cluster import FakeCluster, lease_json, pod_json, quota_json

from gpupool.adapters.kubernetes.decoded import pods_listed, quotas_listed
from gpupool.adapters.kubernetes.dra_objects import read_claim
from gpupool.adapters.kubernetes.status_writes import quota_status_json
from gpupool.adapters.wire.names import API_VERSION
from gpupool.controllers.admission.reconcile import AdmissionReconciler
from gpupool.controllers.contain import Containment
from gpupool.state.listed import ObjectReference
from gpupool.state.pods import PodView
from gpupool.state.status_writes import QueueLine, QuotaStatusWrite

NOW = 1_767_225_600.0


class Heard:
    def __init__(self) -> None:
        self.failed: list[tuple[str, str]] = []

    def reconcile_failed(self, loop: str, kind: str) -> None:
        self.failed.append((loop, kind))

    def reconcile_retried(self, loop: str) -> None:
        pass

    def set_aside_now(self, loop: str, count: int) -> None:
        pass


def _poisoned(name: str) -> dict[str, object]:
    pod = pod_json(name, "alpha", 12, gated=True, created=NOW - 20)
    pod["metadata"]["annotations"] = ["not", "a", "map"]  # read_pod raises on it
    return pod


def test_a_listing_hands_values_with_their_references_and_the_objects_that_did_not_decode() -> None:
    good = pod_json("good", "alpha")
    good["metadata"]["resourceVersion"] = "41"
    listed = pods_listed([good, _poisoned("bad")])
    [(view, ref)] = listed.read
    assert isinstance(view, PodView) and view.key == "ns/good"
    assert ref == ObjectReference("Pod", "v1", "good", "ns", "uid-good", "41")
    [bad] = listed.unreadable
    assert bad.ref.key == "ns/bad" and bad.ref.uid == "uid-bad"
    assert isinstance(bad.error, AttributeError)


WRITTEN = QuotaStatusWrite(
    "12Gi", 12 * 2**30, "0", 0, "0", 0, 1, 1, (QueueLine("ns", "p", 1, "waits"),), 2
)


def test_an_invalid_quota_reads_with_why_and_its_status_is_kept_to_compare() -> None:
    broken = quota_json("beta", 24)
    broken["spec"]["nominal"] = "lots"
    broken["status"] = quota_status_json(WRITTEN)
    listed = quotas_listed([quota_json("alpha", 24), broken])
    alpha, beta = listed.values
    assert alpha.quota is not None and alpha.invalid is None and alpha.generation == 1
    assert beta.quota is None and beta.invalid is not None and "nominal" in str(beta.invalid)
    assert listed.stored["beta"].quota == WRITTEN  # a status writer compares with it
    assert listed.unreadable == ()


def test_a_pod_that_does_not_decode_is_set_aside_with_its_event_and_the_others_are_admitted() -> (
    None
):
    cluster = FakeCluster(
        pods=[_poisoned("bad"), pod_json("good", "alpha", 12, gated=True, created=NOW - 20)],
        quotas=[quota_json("alpha", 48)],
        leases=[],
    )
    heard = Heard()
    contain = Containment("admission+reclaim", cluster, observer=heard)
    reconciler = AdmissionReconciler(cluster, lambda: NOW, contain=contain)
    asyncio.run(reconciler.reconcile())
    assert cluster.pods["ns/good"]["spec"]["schedulingGates"] == []  # admitted
    assert cluster.pods["ns/bad"]["spec"]["schedulingGates"] != []  # left alone
    failed = [
        (key, message) for key, reason, message in cluster.events if reason == "ReconcileFailed"
    ]
    [(key, message)] = failed
    assert key == "ns/bad" and "admission+reclaim loop (read)" in message
    assert "AttributeError" in message
    assert heard.failed == [("admission+reclaim", "Pod")]
    asyncio.run(reconciler.reconcile())  # its backoff runs: no second event
    assert len([e for e in cluster.events if e[1] == "ReconcileFailed"]) == 1


def test_a_listed_lease_carries_the_reference_its_events_name() -> None:
    pod = pod_json("p", "alpha", node="n1", phase="Running", admitted_at=NOW - 60)
    cluster = FakeCluster(pods=[pod], leases=[lease_json(pod, phase="Active", start=NOW - 60)])
    listed = asyncio.run(cluster.leases())
    [(lease, ref)] = listed.read
    assert ref.kind == "GpuLease" and ref.key == lease.key == "ns/uid-p"
    assert ref.api_version == API_VERSION


def _claim(device_class: str) -> dict[str, object]:
    request = {"name": "gpu", "exactly": {"deviceClassName": device_class, "count": 1}}
    return {
        "metadata": {"name": "c", "namespace": "ns", "uid": "cu"},
        "spec": {"devices": {"requests": [request]}},
        "status": {"allocation": {"devices": {"results": []}}},
    }


def test_a_claim_reads_as_its_ask_of_gpupool_or_why_not() -> None:
    ours = read_claim(_claim("gpu.gpupool.io"))
    assert ours.uid == "cu" and ours.allocated and ours.refusal is None
    assert ours.ask is not None and ours.ask.request == "gpu" and ours.ask.count == 1
    other = read_claim(_claim("gpu.example.com"))  # another driver's: asks nothing of gpupool
    assert other.ask is None and other.refusal is None
    misspelt = read_claim(_claim("gpu.gpupool"))  # refused, with the right name
    assert misspelt.ask is None and misspelt.refusal is not None
    assert "gpu.gpupool.io" in str(misspelt.refusal)
