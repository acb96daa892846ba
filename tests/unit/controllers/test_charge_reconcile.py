"""The charge auditor in the lease reconciler and on /metrics, over the in-memory cluster: a live
lease charged other than what it holds gets one ChargeMismatch Warning event on it and on its
pod (again only when the disagreement changes or comes back), is counted per tenant on /metrics,
and neither a failing event nor unreadable GpuNodes stop the rest of the round."""

from __future__ import annotations

import asyncio

from fake_cluster import FakeCluster, lease_json, pod_json, quota_json
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from support.builders import node_json

from gpupool.adapters.metrics.controller import ControllerMetrics
from gpupool.controllers.admission.reconcile import AdmissionReconciler
from gpupool.controllers.leases.reconcile import LeaseReconciler
from gpupool.controllers.observe import MetricsObserver
from gpupool.ports import Json
from gpupool.state.listed import ObjectReference

NOW = 1_767_225_600.0
GiB = 2**30
MISMATCH = "ChargeMismatch"


def _gpu_node(name: str = "n1", cards: int = 2, gib: int = 72) -> Json:
    devices = [
        {"index": i, "model": "A100-80GB", "uuid": f"GPU-{name}-{i}", "memoryBytes": 80 * GiB,
         "allocatableBytes": gib * GiB}
        for i in range(cards)
    ]  # fmt: skip
    return {"metadata": {"name": name}, "status": {"health": "Healthy", "devices": devices}}


def _charged(lease: Json, amount: int, resource: str = "gpu-memory") -> Json:
    lease["spec"]["amount"] = amount
    lease["spec"]["resource"] = resource
    return lease


def _cluster(*, gpu_nodes: bool = True) -> FakeCluster:
    """alpha's p holds 12Gi but is charged 8Gi; beta's q holds 12Gi charged 12Gi."""
    p = pod_json("p", "alpha", node="n1", phase="Running", admitted_at=NOW - 60)
    q = pod_json("q", "beta", node="n1", phase="Running", admitted_at=NOW - 60)
    return FakeCluster(
        pods=[p, q],
        quotas=[quota_json("alpha", 48), quota_json("beta", 48)],
        leases=[
            _charged(lease_json(p, phase="Active", start=NOW - 60), 8 * GiB),
            lease_json(q, phase="Active", start=NOW - 60),
        ],
        nodes=[node_json("n1", cards=2)],
        gpu_nodes=[_gpu_node()] if gpu_nodes else [],
    )


def _round(cluster: FakeCluster, reconciler: LeaseReconciler | None = None) -> LeaseReconciler:
    reconciler = reconciler or LeaseReconciler(cluster, lambda: NOW)
    asyncio.run(reconciler.reconcile())
    return reconciler


def _mismatches(cluster: FakeCluster) -> list[tuple[str, str]]:
    return [(key, message) for key, reason, message in cluster.events if reason == MISMATCH]


def test_a_lease_charged_less_than_it_holds_gets_one_event_on_it_and_its_pod() -> None:
    cluster = _cluster()
    counted: list[str] = []
    reconciler = LeaseReconciler(cluster, lambda: NOW, on_integrity=counted.append)
    _round(cluster, reconciler)
    events = _mismatches(cluster)
    assert [key for key, _ in events] == ["ns/uid-p", "ns/p"]  # the GpuLease, then its pod
    message = events[0][1]
    assert message.startswith("GpuLease ns/uid-p is charged 8Gi but holds 12Gi (1 slice(s): ")
    assert "spec.amount" in message and events[1][1] == message
    assert counted == [MISMATCH]
    _round(cluster, reconciler)
    _round(cluster, reconciler)
    assert len(_mismatches(cluster)) == 2 and counted == [MISMATCH]  # not every round


def test_a_changed_or_returning_disagreement_is_reported_again() -> None:
    cluster = _cluster()
    reconciler = _round(cluster)
    spec = cluster.lease_objects["ns/uid-p"]["spec"]
    spec["amount"] = 4 * GiB  # another disagreement: news
    _round(cluster, reconciler)
    assert "charged 4Gi but holds 12Gi" in _mismatches(cluster)[-1][1]
    assert len(_mismatches(cluster)) == 4
    spec["amount"] = 12 * GiB  # mended: nothing to say
    _round(cluster, reconciler)
    assert len(_mismatches(cluster)) == 4
    spec["amount"] = 4 * GiB  # and broken again: said again
    _round(cluster, reconciler)
    assert len(_mismatches(cluster)) == 6


def test_milli_gpu_leases_are_judged_against_the_gpunodes_card() -> None:
    cluster = _cluster()
    # beta's 12Gi lease in milli-GPU: 12Gi of a 72Gi card is 167m (rounded up)
    _charged(cluster.lease_objects["ns/uid-q"], 167, "gpu")
    _charged(cluster.lease_objects["ns/uid-p"], 12 * GiB)  # alpha now agrees
    _round(cluster)
    assert _mismatches(cluster) == []
    _charged(cluster.lease_objects["ns/uid-q"], 150, "gpu")
    _round(cluster)
    assert [key for key, _ in _mismatches(cluster)] == ["ns/uid-q", "ns/q"]
    assert "charged 150m but holds 167m" in _mismatches(cluster)[0][1]


def test_without_gpunodes_nothing_is_judged() -> None:
    cluster = _cluster(gpu_nodes=False)
    _round(cluster)
    assert _mismatches(cluster) == []


def test_a_pod_outside_the_tenant_list_is_read_for_its_event() -> None:
    cluster = _cluster()
    del cluster.pods["ns/p"]["metadata"]["labels"]["gpupool.io/tenant"]
    _round(cluster)
    assert [key for key, _ in _mismatches(cluster)] == ["ns/uid-p", "ns/p"]


class _FailingEvents(FakeCluster):
    """Its first event on `fail` raises, as an API server that answers 500 would."""

    fail = "ns/uid-p"

    async def event(
        self,
        about: ObjectReference,
        reason: str,
        message: str,
        *,
        warning: bool = False,
        now_rfc3339: str,
    ) -> None:
        if about.key == self.fail:
            self.fail = ""
            raise RuntimeError("500 Internal Server Error")
        await super().event(about, reason, message, warning=warning, now_rfc3339=now_rfc3339)


def test_a_failed_event_stops_neither_the_others_nor_the_round_and_is_written_next_round() -> None:
    base = _cluster()
    cluster = _FailingEvents(
        pods=list(base.pods.values()),
        quotas=list(base.quota_objects.values()),
        leases=list(base.lease_objects.values()),
        gpu_nodes=list(base.gpu_node_objects.values()),
    )
    _charged(cluster.lease_objects["ns/uid-q"], 1)  # beta's lease disagrees too
    cluster.lease_objects["ns/uid-q"]["status"]["phase"] = "Bound"  # and its lease moves on
    reconciler = _round(cluster)
    assert [key for key, _ in _mismatches(cluster)] == ["ns/uid-q", "ns/q"]
    assert cluster.lease_objects["ns/uid-q"]["status"]["phase"] == "Active"
    _round(cluster, reconciler)
    assert [key for key, _ in _mismatches(cluster)] == ["ns/uid-q", "ns/q", "ns/uid-p", "ns/p"]


def test_unreadable_gpunodes_do_not_stop_the_lease_round() -> None:
    cluster = _cluster()

    async def down() -> list[Json]:
        raise RuntimeError("gpunodes: 503")

    cluster.gpu_nodes = down  # type: ignore[method-assign]
    cluster.lease_objects["ns/uid-p"]["status"]["phase"] = "Bound"
    _round(cluster)
    assert cluster.lease_objects["ns/uid-p"]["status"]["phase"] == "Active"
    assert _mismatches(cluster) == []


def _scrape(cluster: FakeCluster) -> dict[str, float]:
    metrics = ControllerMetrics()
    round_ = asyncio.run(AdmissionReconciler(cluster, lambda: NOW).reconcile())
    asyncio.run(MetricsObserver(cluster, metrics).observe(round_))
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(generate_latest(metrics.registry).decode()):
        for s in family.samples:
            if s.name == "gpupool_controller_lease_charge_mismatches":
                out[s.labels["tenant"]] = s.value
    return out


def test_the_metric_counts_each_tenants_disagreeing_leases_and_shows_zero_otherwise() -> None:
    cluster = _cluster()
    cluster.quota_objects["gamma"] = quota_json("gamma", 24)  # a tenant without leases
    shown = _scrape(cluster)  # every tenant the round knows has a series
    assert {t: shown[t] for t in ("alpha", "beta", "gamma")} == {"alpha": 1, "beta": 0, "gamma": 0}
    _charged(cluster.lease_objects["ns/uid-p"], 12 * GiB)
    assert set(_scrape(cluster).values()) == {0.0}
    cluster.lease_objects["ns/uid-q"]["status"]["phase"] = "Released"  # ended: not counted
    _charged(cluster.lease_objects["ns/uid-q"], 1)
    assert _scrape(cluster)["beta"] == 0.0
    assert _scrape(_cluster(gpu_nodes=False))["alpha"] == 0.0  # unknown cards: not judged
