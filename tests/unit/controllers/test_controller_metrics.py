"""The controller's /metrics from one admission round over the in-memory cluster: tenant quota
series equal what GpuQuota status says, the queue shows, the cards' allocated bytes are the sum
of their leases, and a card's fragmentation is what the definition gives."""

from __future__ import annotations

import asyncio

import pytest
from fake_cluster import (
    FakeCluster,
    gpu_node_json,
    lease_json,
    node_lease_json,
    pod_json,
    quota_json,
)
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from support.builders import node_json

from gpupool.adapters.metrics.controller import ControllerMetrics
from gpupool.controllers.admission.reconcile import AdmissionReconciler
from gpupool.controllers.node_health.reconcile import NodeHealthReconciler
from gpupool.controllers.observe import MetricsObserver

NOW = 1_767_225_600.0
GiB = 2**30
Samples = dict[str, list[tuple[dict[str, str], float]]]


def _cluster() -> FakeCluster:
    """n1 has two A100-80GB cards; alpha (80Gi) runs p1 (70Gi on card 0, an hour so far) and
    queues p2 (12Gi, waiting 5 minutes) since 70 + 12 is over its nominal."""
    running = pod_json("p1", "alpha", 70, admitted_at=NOW - 3600, node="n1", phase="Running")
    return FakeCluster(
        pods=[running, pod_json("p2", "alpha", 12, gated=True, created=NOW - 300)],
        quotas=[quota_json("alpha", 80)],
        leases=[lease_json(running, phase="Active", start=NOW - 3600, gib=70)],
        nodes=[node_json("n1", cards=2)],
    )


def _scrape(cluster: FakeCluster, metrics: ControllerMetrics) -> Samples:
    round_ = asyncio.run(AdmissionReconciler(cluster, lambda: NOW).reconcile())
    asyncio.run(MetricsObserver(cluster, metrics).observe(round_))
    out: Samples = {}
    for family in text_string_to_metric_families(generate_latest(metrics.registry).decode()):
        for s in family.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def _one(samples: Samples, name: str, **labels: str) -> float:
    [value] = [v for ls, v in samples[name] if labels.items() <= ls.items()]
    return value


def test_tenant_series_are_the_quota_status_numbers() -> None:
    cluster = _cluster()
    samples = _scrape(cluster, ControllerMetrics())
    [(_, status)] = cluster.written("patch_quota_status")
    alpha = {"tenant": "alpha", "resource": "gpu-memory"}
    assert _one(samples, "gpupool_controller_tenant_used", **alpha) == status["usedAmount"]
    assert _one(samples, "gpupool_controller_tenant_used", **alpha) == 70 * GiB
    assert _one(samples, "gpupool_controller_tenant_nominal", **alpha) == 80 * GiB
    assert _one(samples, "gpupool_controller_tenant_borrowed", **alpha) == status["borrowedAmount"]
    assert _one(samples, "gpupool_controller_tenant_pending_pods", tenant="alpha") == 1
    assert _one(samples, "gpupool_controller_tenant_pods", tenant="alpha") == 1
    assert _one(samples, "gpupool_controller_tenant_oldest_wait_seconds", tenant="alpha") == 300
    assert _one(samples, "gpupool_controller_tenant_gib_hours", tenant="alpha") == pytest.approx(70)
    assert _one(samples, "gpupool_controller_leases", phase="active") == 1


def test_cards_show_their_leases_and_the_fragment_no_common_request_can_use() -> None:
    samples = _scrape(_cluster(), ControllerMetrics())
    card0 = {"Hostname": "n1", "gpu": "0", "UUID": "GPU-n1-0"}
    card1 = {"Hostname": "n1", "gpu": "1", "UUID": "GPU-n1-1"}
    total = _one(samples, "gpupool_controller_card_memory_total_bytes", **card0)
    assert _one(samples, "gpupool_controller_card_allocated_bytes", **card0) == 70 * GiB
    assert _one(samples, "gpupool_controller_card_allocated_bytes", **card1) == 0
    # Card 0's free memory (total - 70Gi) is below both common requests (70Gi and 12Gi): all of
    # it is fragment. Card 1 is empty: both fit, nothing is fragment.
    frag0 = _one(samples, "gpupool_controller_card_fragmentation_ratio", **card0)
    assert frag0 == pytest.approx((total - 70 * GiB) / total, abs=2e-3)
    assert frag0 > 0
    assert _one(samples, "gpupool_controller_card_fragmentation_ratio", **card1) == 0


def test_an_admission_is_counted_with_its_wait() -> None:
    cluster = _cluster()
    metrics = ControllerMetrics()
    _scrape(cluster, metrics)
    cluster.pods["ns/p1"]["status"]["phase"] = "Succeeded"  # p1 ends: p2 fits and is admitted
    samples = _scrape(cluster, metrics)
    admitted = _one(samples, "gpupool_controller_admissions_total", tenant="alpha")
    assert admitted == 1
    assert _one(samples, "gpupool_controller_admission_wait_seconds_sum", tenant="alpha") == 300
    assert _one(samples, "gpupool_controller_admission_wait_seconds_bucket", tenant="alpha",
                le="300.0") == 1  # fmt: skip
    assert _one(samples, "gpupool_controller_admission_wait_seconds_bucket", tenant="alpha",
                le="120.0") == 0  # fmt: skip
    assert _one(samples, "gpupool_controller_tenant_pending_pods", tenant="alpha") == 0


def test_every_rounds_admissions_are_counted_though_only_the_last_round_is_shown() -> None:
    # The controller counts each admission round (`admitted`) and shows the state at most
    # every few seconds (`show`): an admission in a round that is never shown still counts.
    cluster = _cluster()
    metrics = ControllerMetrics()
    observer = MetricsObserver(cluster, metrics)
    first = asyncio.run(AdmissionReconciler(cluster, lambda: NOW).reconcile())
    observer.admitted(first)  # p2 still queued: nothing admitted
    cluster.pods["ns/p1"]["status"]["phase"] = "Succeeded"
    admitting = asyncio.run(AdmissionReconciler(cluster, lambda: NOW).reconcile())
    assert [a.pod.name for a in admitting.plan.admit] == ["p2"]
    observer.admitted(admitting)  # counted, never shown
    asyncio.run(observer.show(first))  # the shown state is the older round's
    samples: Samples = {}
    for family in text_string_to_metric_families(generate_latest(metrics.registry).decode()):
        for s in family.samples:
            samples.setdefault(s.name, []).append((s.labels, s.value))
    assert _one(samples, "gpupool_controller_admissions_total", tenant="alpha") == 1
    assert _one(samples, "gpupool_controller_tenant_pending_pods", tenant="alpha") == 1


def test_budget_series_are_the_quota_status_hours() -> None:
    # alpha's budget: 0.1 GiB-hours a 120 s window; 12Gi held from T0 to T0+20 and from T0+10.
    t0 = 1_767_225_600.0
    done = pod_json("done", "alpha", 12, phase="Succeeded")
    running = pod_json("run", "alpha", 12, admitted_at=t0 + 10, node="n1", phase="Running")
    budget = {"limitHours": 0.1, "windowSeconds": 120, "onExhaustion": "block"}
    cluster = FakeCluster(
        pods=[done, running],
        quotas=[quota_json("alpha", 100, budget=budget), quota_json("beta", 10)],
        leases=[
            lease_json(done, phase="Released", start=t0, end=t0 + 20),
            lease_json(running, phase="Active", start=t0 + 10),
        ],
        nodes=[node_json("n1", cards=1)],
    )
    metrics = ControllerMetrics()
    round_ = asyncio.run(AdmissionReconciler(cluster, lambda: t0 + 25).reconcile())
    asyncio.run(MetricsObserver(cluster, metrics).observe(round_))
    samples: Samples = {}
    for family in text_string_to_metric_families(generate_latest(metrics.registry).decode()):
        for s in family.samples:
            samples.setdefault(s.name, []).append((s.labels, s.value))
    status = dict(cluster.written("patch_quota_status"))["alpha"]
    alpha = {"tenant": "alpha", "unit": "GiB-hours"}
    used = _one(samples, "gpupool_controller_tenant_budget_used_hours", **alpha)
    assert used == pytest.approx(status["hoursUsed"], abs=1e-6)
    assert used == pytest.approx(12 * (20 + 15) / 3600)
    assert _one(samples, "gpupool_controller_tenant_budget_hours", **alpha) == 0.1
    left = _one(samples, "gpupool_controller_tenant_budget_remaining_hours", **alpha)
    assert left == pytest.approx(status["hoursRemaining"], abs=1e-6)
    # a tenant without a budget has no budget series
    tenants = {ls["tenant"] for ls, _ in samples["gpupool_controller_tenant_budget_hours"]}
    assert tenants == {"alpha"}


def test_notices_and_evictions_are_counted_by_reason_and_nodes_by_health() -> None:
    metrics = ControllerMetrics()
    before = _counts(metrics)
    assert before[("gpupool_controller_evictions_total", "NodeLost")] == 0  # there from the start
    # the reconcilers report through ports.Outcomes: a lost node's pod deleted, a reclaim
    pod = pod_json("p", "alpha", node="n1", phase="Running")
    lost = FakeCluster(
        pods=[pod],
        leases=[lease_json(pod, phase="Active", start=NOW - 3600)],
        gpu_nodes=[gpu_node_json("n1"), gpu_node_json("n2")],
        node_leases=[node_lease_json("n1", renewed=NOW - 600), node_lease_json("n2", renewed=NOW)],
        nodes=[node_json("n1", cards=1), node_json("n2", cards=1)],
    )
    asyncio.run(NodeHealthReconciler(lost, lambda: NOW, outcomes=metrics).reconcile())
    metrics.noticed("QuotaReclaim")
    metrics.evicted("QuotaReclaim")
    after = _counts(metrics)
    assert after[("gpupool_controller_evictions_total", "NodeLost")] == 1
    assert after[("gpupool_controller_evictions_total", "QuotaReclaim")] == 1
    assert after[("gpupool_controller_reclaim_notices_total", "QuotaReclaim")] == 1
    assert after[("gpupool_controller_evictions_total", "RoomReclaim")] == 0
    samples = _scrape(lost, metrics)
    assert _one(samples, "gpupool_controller_nodes", health="Lost") == 1
    assert _one(samples, "gpupool_controller_nodes", health="Healthy") == 1
    assert _one(samples, "gpupool_controller_nodes", health="Suspect") == 0


def _counts(metrics: ControllerMetrics) -> dict[tuple[str, str], float]:
    text = generate_latest(metrics.registry).decode()
    return {
        (s.name, s.labels["reason"]): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name.endswith("_total") and "reason" in s.labels
    }
