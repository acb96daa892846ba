"""Blast radius of one, in each loop: a poisoned object among good ones fails only itself. The
good ones are handled in the same round; the bad one gets one ReconcileFailed event (not one per
round), is left alone while its backoff runs and is tried again after it (a retry); the errors
and the set-aside count reach the metrics."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

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

from gpupool.adapters.kubernetes import decoded
from gpupool.adapters.metrics.controller import ControllerMetrics
from gpupool.controllers.admission import reconcile as admission_reconcile
from gpupool.controllers.admission.reconcile import AdmissionReconciler
from gpupool.controllers.contain import Containment
from gpupool.controllers.leases import reconcile as lease_reconcile
from gpupool.controllers.leases.reconcile import LeaseReconciler
from gpupool.controllers.manager import Loop, run_loops, whole
from gpupool.controllers.node_health.reconcile import NodeHealthReconciler

NOW = 1_767_225_600.0


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> float:
        return self.now


class Heard:
    """A `ReconcileObserver` that keeps what it hears."""

    def __init__(self) -> None:
        self.failed: list[tuple[str, str]] = []
        self.retried: list[str] = []
        self.aside: dict[str, int] = {}

    def reconcile_failed(self, loop: str, kind: str) -> None:
        self.failed.append((loop, kind))

    def reconcile_retried(self, loop: str) -> None:
        self.retried.append(loop)

    def set_aside_now(self, loop: str, count: int) -> None:
        self.aside[loop] = count


def _failed_events(cluster: FakeCluster) -> list[tuple[str, str]]:
    return [
        (key, message) for key, reason, message in cluster.events if reason == "ReconcileFailed"
    ]


def test_a_lease_whose_expiry_plan_raises_fails_only_itself_the_others_get_their_expiry(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The case: a pod's gpupool.io/lease-ttl of "100000000h" made the expiry plan raise
    # (a date past year 9999) in every round, so no lease of any tenant got its expiry. The
    # decoders now bound the TTL; whatever else makes one lease's plan raise stands in here.
    real = lease_reconcile.plan_expiry  # type: ignore[attr-defined]

    def plan_expiry(leases: Sequence[Any], *args: Any) -> Any:
        if any(le.pod.name == "bad" for le in leases):
            raise ValueError("year 13431 is out of range")
        return real(list(leases), *args)

    monkeypatch.setattr(lease_reconcile, "plan_expiry", plan_expiry)
    bad = pod_json("bad", "alpha", node="n1", phase="Running", admitted_at=NOW - 60,
                   annotations={"gpupool.io/lease-ttl": "1h"})  # fmt: skip
    good = pod_json("good", "beta", node="n1", phase="Running", admitted_at=NOW - 60,
                    annotations={"gpupool.io/lease-ttl": "30s"})  # fmt: skip
    cluster = FakeCluster(
        pods=[bad, good],
        leases=[lease_json(bad, phase="Active", start=NOW - 60),
                lease_json(good, phase="Active", start=NOW - 60)],
    )  # fmt: skip
    heard, clock = Heard(), Clock()
    reconciler = LeaseReconciler(cluster, clock, contain=Containment("leases", cluster,
                                                                      observer=heard))  # fmt: skip
    asyncio.run(reconciler.reconcile())
    assert cluster.lease_objects["ns/uid-good"]["spec"]["expiry"] == "2025-12-31T23:59:30.000000Z"
    assert cluster.lease_objects["ns/uid-bad"]["spec"].get("expiry") is None
    [(key, message)] = _failed_events(cluster)
    assert key == "ns/uid-bad" and "leases loop (expiry)" in message and "year" in message
    assert "Traceback" not in message
    assert heard.failed == [("leases", "GpuLease")] and heard.aside == {"leases": 1}

    clock.now = NOW + 0.5  # its backoff (1 s) runs: left alone, nothing new said
    asyncio.run(reconciler.reconcile())
    assert len(_failed_events(cluster)) == 1 and heard.failed == [("leases", "GpuLease")]
    clock.now = NOW + 2  # tried again: the same error, counted, no second event
    asyncio.run(reconciler.reconcile())
    assert heard.retried == ["leases"] and len(heard.failed) == 2
    assert len(_failed_events(cluster)) == 1 and heard.aside == {"leases": 1}


def test_a_quota_that_cannot_be_read_fails_only_its_tenant(monkeypatch: pytest.MonkeyPatch) -> None:
    # the port decodes (the adapter's reader, as the fake uses it): beta's quota does not read
    real = decoded.read_quota

    def read_quota(obj: Any) -> Any:
        if obj["metadata"]["name"] == "beta":
            raise OverflowError("cannot convert float infinity to integer")
        return real(obj)

    monkeypatch.setattr(decoded, "read_quota", read_quota)
    cluster = FakeCluster(
        pods=[pod_json("a1", "alpha", 12, gated=True, created=NOW - 20),
              pod_json("b1", "beta", 1, gated=True, created=NOW - 20)],
        quotas=[quota_json("alpha", 24), quota_json("beta", 24)],
    )  # fmt: skip
    heard = Heard()
    contain = Containment("admission+reclaim", cluster, observer=heard)
    asyncio.run(AdmissionReconciler(cluster, Clock(), contain=contain).reconcile())
    assert cluster.pods["ns/a1"]["spec"]["schedulingGates"] == []  # alpha admitted
    assert cluster.pods["ns/b1"]["spec"]["schedulingGates"] != []  # beta admits nothing
    assert (
        "could not be read" in cluster.pods["ns/b1"]["metadata"]["annotations"]["gpupool.io/queue"]
    )
    [(key, message)] = _failed_events(cluster)
    assert key == "beta" and "OverflowError" in message
    assert heard.failed == [("admission+reclaim", "GpuQuota")]


def test_a_tenant_whose_plan_raises_is_set_aside_and_the_others_are_planned(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = admission_reconcile.plan_admission  # type: ignore[attr-defined]

    def plan_admission(pods: Sequence[Any], quotas: Any, now: float, **kw: Any) -> Any:
        if any(p.tenant == "beta" for p in pods):
            raise OverflowError("int too large to convert to float")
        return real(pods, quotas, now, **kw)

    monkeypatch.setattr(admission_reconcile, "plan_admission", plan_admission)
    cluster = FakeCluster(
        pods=[pod_json("a1", "alpha", 12, gated=True, created=NOW - 20),
              pod_json("b1", "beta", 1, gated=True, created=NOW - 20)],
        quotas=[quota_json("alpha", 24), quota_json("beta", 24)],
    )  # fmt: skip
    reconciler = AdmissionReconciler(cluster, Clock())
    round_ = asyncio.run(reconciler.reconcile())
    assert cluster.pods["ns/a1"]["spec"]["schedulingGates"] == []
    assert cluster.pods["ns/b1"]["spec"]["schedulingGates"] != []
    assert "beta" not in [t.tenant for t in round_.plan.tenants]
    [(key, message)] = _failed_events(cluster)
    assert key == "beta" and "(plan)" in message
    asyncio.run(reconciler.reconcile())  # same time: beta waits its backoff, no new event
    assert len(_failed_events(cluster)) == 1


def test_a_gpunode_that_cannot_be_read_leaves_the_others_health_checked() -> None:
    pod = pod_json("p", "alpha", node="n1", phase="Running")
    poisoned = gpu_node_json("n2")
    poisoned["status"]["conditions"] = ["not an object"]
    cluster = FakeCluster(
        pods=[pod],
        leases=[lease_json(pod, phase="Active", start=NOW - 3600)],
        gpu_nodes=[poisoned, gpu_node_json("n1")],
        node_leases=[node_lease_json("n2", renewed=NOW), node_lease_json("n1", renewed=NOW - 600)],
    )
    asyncio.run(NodeHealthReconciler(cluster, lambda: NOW).reconcile())
    assert cluster.lease_objects["ns/uid-p"]["status"]["phase"] == "Lost"  # n1 handled
    [(key, message)] = _failed_events(cluster)
    assert key == "n2" and "node-health loop (read)" in message


def test_the_metrics_show_errors_retries_set_aside_and_round_times() -> None:
    metrics = ControllerMetrics()
    metrics.reconcile_failed("leases", "GpuLease")
    metrics.reconcile_failed("leases", "GpuLease")
    metrics.reconcile_retried("leases")
    metrics.set_aside_now("leases", 1)
    metrics.reconcile_took("leases", 0.3)
    text = generate_latest(metrics.registry).decode()
    assert 'gpupool_controller_reconcile_errors_total{kind="GpuLease",loop="leases"} 2.0' in text
    assert 'gpupool_controller_reconcile_errors_total{kind="round",loop="defrag"} 0.0' in text
    assert 'gpupool_controller_reconcile_retries_total{loop="leases"} 1.0' in text
    assert 'gpupool_controller_reconcile_set_aside_objects{loop="leases"} 1.0' in text
    assert 'gpupool_controller_reconcile_set_aside_objects{loop="autoscale"} 0.0' in text
    assert (
        'gpupool_controller_reconcile_duration_seconds_bucket{le="0.5",loop="leases"} 1.0' in text
    )
    assert 'gpupool_controller_reconcile_duration_seconds_count{loop="leases"} 1.0' in text


def test_the_manager_times_each_round_and_counts_a_round_that_fails_as_a_whole() -> None:
    heard: list[tuple[str, object]] = []
    ticks = iter(float(i) for i in range(100))

    class Observer:
        def reconcile_took(self, loop: str, seconds: float) -> None:
            heard.append(("took " + loop, seconds))

        def reconcile_failed(self, loop: str, kind: str) -> None:
            heard.append(("failed " + loop, kind))

        def queue_waited(self, loop: str, seconds: float) -> None:
            pass

        def queue_depth(self, loops: int) -> None:
            pass

    async def main() -> None:
        stop = asyncio.Event()

        async def ok() -> None:
            stop.set()  # one round

        async def broken() -> None:
            raise RuntimeError("whole round")

        await run_loops([Loop("a", whole(broken)), Loop("b", whole(ok))], stop, resync_s=0.01,
                        debounce_s=0.0, observer=Observer(),
                        monotonic=lambda: next(ticks))  # fmt: skip

    asyncio.run(main())
    assert heard == [("failed a", "round"), ("took a", 1.0), ("took b", 1.0)]
